"""Pieces gate v2 (:mod:`bench_assets.gate.paired2`) and gate v3
(:mod:`bench_assets.gate.paired3`) share: the findings they word alike, the drift bound, the cost
test's bounds and document, the total-spend verdict.

v2 is frozen (it recomputes decisions stored before v3; ``tests/test_gate_v2_frozen.py`` holds
the SHA-256 of 160 of its decisions), so every text here is v2's, with v3's wording passed in
where the two differ.
"""

import math
import statistics
from collections.abc import Iterable
from typing import Literal

from bench_assets.config.models import PolicyConfig
from bench_assets.gate.folding import Task
from bench_assets.gate.models import (
    Bounds,
    CostTest,
    Finding,
    GateInput,
    RunOutcome,
    SpendRatio,
)
from bench_assets.gate.numerics import quantile, t_cdf, t_quantile
from bench_assets.kernel.errorkinds import is_excluded

Rows = dict[tuple[str, str], list[RunOutcome]]


def logs(rows: Iterable[RunOutcome]) -> list[float]:
    """Log metric of the valid, measured, positive runs."""
    return [
        math.log(o.metric)
        for o in rows
        if not is_excluded(o.error_kind) and o.metric is not None and o.metric > 0
    ]


def mean(xs: list[float]) -> float:
    return math.fsum(xs) / len(xs)


def within_variance(groups: list[list[float]]) -> tuple[float, int]:
    """Pooled within-group variance of log metric and its degrees of freedom."""
    ss = math.fsum(math.fsum((x - mean(g)) ** 2 for x in g) for g in groups if len(g) >= 2)
    df = sum(len(g) - 1 for g in groups if len(g) >= 2)
    return (ss / df if df else 0.0), df


def by_task_and_arm(outcomes: list[RunOutcome]) -> Rows:
    rows: Rows = {}
    for o in outcomes:
        rows.setdefault((o.task, o.arm), []).append(o)
    return rows


def mutually_unresolved(
    counted: list[Task], policy: PolicyConfig, findings: list[Finding]
) -> list[str]:
    """The counted tasks neither arm resolved (counted as preregistered), noted once."""
    unresolved = [t.task for t in counted if t.inc.resolved == 0 and t.cand.resolved == 0]
    if unresolved:
        findings.append(
            Finding(
                rule="mutually_unresolved",
                effect="info",
                task=None,
                message=f"mutually unresolved tasks counted as preregistered "
                f"(mutually_unresolved: {policy.mutually_unresolved}): {', '.join(unresolved)}.",
            )
        )
    return unresolved


def too_few_tasks(counted: list[Task], policy: PolicyConfig, findings: list[Finding]) -> bool:
    """Fewer counted tasks than ``min_counted_tasks``: an insufficient finding, ``True``."""
    if len(counted) >= policy.min_counted_tasks:
        return False
    findings.append(
        Finding(
            rule="too_few_tasks",
            effect="insufficient",
            task=None,
            message=f"{len(counted)} counted task(s); the paired policy needs at least "
            f"{policy.min_counted_tasks} (min_counted_tasks).",
        )
    )
    return True


def zero_variance(policy: PolicyConfig) -> Finding:
    return Finding(
        rule="zero_variance",
        effect="insufficient",
        task=None,
        message=f"{policy.metric}: every run of every counted task has the same ratio "
        "and no run-level spread; a t test would claim certainty it does not have.",
    )


def drift_unmeasured(what: str) -> Finding:
    return Finding(
        rule="drift",
        effect="insufficient",
        task=None,
        message=f"reused comparator evidence, but no fresh comparator run on any task to {what}.",
    )


def drift_bound(
    deltas: list[float], floor: float, df_within: int, level: float
) -> tuple[float, float, float, float]:
    """Mean of the per-task drifts with the larger of the cluster and run-level SE (``floor``:
    the summed run-level variance), and its two-sided ``level`` bounds: (mean, se, lower,
    upper)."""
    k = len(deltas)
    m = mean(deltas)
    se_floor = math.sqrt(floor) / k
    se_cluster = statistics.stdev(deltas) / math.sqrt(k) if k >= 2 else 0.0
    if se_cluster > se_floor:
        se, df = se_cluster, k - 1
    else:
        se, df = se_floor, max(1, df_within)
    q = t_quantile(level, df)
    return m, se, m - q * se, m + q * se


def cost_bounds(m: float, se: float, alpha: float, df: int | None) -> tuple[Bounds, Bounds, float]:
    """The one-sided ``1 − alpha`` bounds of the mean log ratio, the same as an improvement
    (1 − ratio), and the t statistic (``alpha`` 0: infinitely wide; ``df`` ``None``: the normal
    quantile)."""
    q = quantile(1 - alpha, df) if alpha > 0 else math.inf
    bounds = Bounds(estimate=m, lower=m - q * se, upper=m + q * se, level=1 - alpha)
    improvement = Bounds(
        estimate=-math.expm1(m),
        lower=-math.expm1(bounds.upper),
        upper=-math.expm1(bounds.lower),
        level=bounds.level,
    )
    return bounds, improvement, m / se


def cost_test(
    n: int,
    bounds: Bounds,
    improvement: Bounds,
    t_stat: float,
    sd: float,
    policy: PolicyConfig,
    verdict: str,
    *,
    normal: bool = False,
) -> CostTest:
    """The recorded cost test; ``normal``: its p values from the normal distribution (gate v3's
    run-level standard error; ``df`` is then ``None``)."""
    df = None if normal else n - 1
    if df is None:
        z = statistics.NormalDist()
        two, cheaper = min(1.0, 2.0 * z.cdf(-abs(t_stat))), z.cdf(t_stat)
    else:
        two, cheaper = min(1.0, 2.0 * t_cdf(-abs(t_stat), df)), t_cdf(t_stat, df)
    return CostTest(
        tasks=n,
        log_ratio=bounds,
        sd=sd,
        df=df,
        t_statistic=t_stat,
        p_value_two_sided=two,
        p_value_cheaper=cheaper,
        improvement=improvement,
        required_improvement=policy.min_improvement,
        verdict=verdict,  # type: ignore[arg-type]
    )


def spend_verdict(
    ratio: float, inp: GateInput, against: str, findings: list[Finding]
) -> SpendRatio:
    """The total-spend verdict of ``ratio`` (candidate over ``against``) and its keep finding."""
    limit = inp.policy.max_total_spend_ratio
    verdict: Literal["within", "exceeded", "report_only"]
    if limit is None:
        verdict = "report_only"
    elif ratio > limit:
        verdict = "exceeded"
        findings.append(
            Finding(
                rule="total_spend",
                effect="keep",
                task=None,
                message=f"total {inp.policy.metric}: candidate spends {ratio:.3f}x the "
                f"{against} summed over counted tasks, above the {limit:g}x limit.",
            )
        )
    else:
        verdict = "within"
    return SpendRatio(ratio=ratio, limit=limit, verdict=verdict)


def repay_finding(look: int, max_looks: int, spends: str) -> Finding:
    return Finding(
        rule="sequential",
        effect="insufficient",
        task=None,
        message=f"look {look}/{max_looks}: the generation re-pays the "
        "comparator's reused cells fresh, sets its pooled history aside, and the gate "
        f"looks again ({spends}).",
    )


def top_up_finding(look: int, max_looks: int, top_up_runs: int) -> Finding:
    return Finding(
        rule="sequential",
        effect="insufficient",
        task=None,
        message=f"look {look}/{max_looks} inconclusive: the planner pays "
        f"{top_up_runs} more candidate run(s) per task and the gate looks again.",
    )
