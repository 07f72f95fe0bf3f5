"""The ``paired`` policy (the default): the resolve-rate, cost and regression questions judged
statistically over the counted tasks (see :mod:`bench_assets.gate`).

Per task, once the shared run rules pass: the one-sided Fisher p of "candidate resolves less",
then (with every run measured) the defined log ratio. Across tasks: the Bonferroni hard-regression
guard, the bootstrap non-inferiority test of the resolve rate, the paired t test of the cost, and
the report-only sign tests and canary noise floor.
"""

import math
from typing import Literal

from bench_assets.config.models import PolicyConfig
from bench_assets.gate.folding import Task
from bench_assets.gate.models import (
    Bounds,
    CanaryPair,
    CostTest,
    Effect,
    Finding,
    GateInput,
    NoiseFloor,
    NonInferiority,
    PairedStatistics,
    SignTest,
)
from bench_assets.gate.numerics import (
    bootstrap_sum_bounds,
    exact,
    fisher_worse_p,
    pct,
    sign_test_p,
    t_test,
)


def check_resolve(t: Task) -> None:
    """Record the one-sided Fisher p on a task whose runs passed the shared rules."""
    inc, cand = t.inc, t.cand
    t.fisher_p = fisher_worse_p(inc.resolved, inc.valid, cand.resolved, cand.valid)


def check_metric(t: Task, policy: PolicyConfig) -> None:
    """A metric of 0 on a valid run leaves the log ratio undefined: insufficient evidence."""
    if t.log_ratio is None:
        t.add(
            "metric_zero",
            "insufficient",
            f"{t.task}: a valid run has {policy.metric} 0, so its log ratio is undefined.",
        )


def hard_regressions(tasks: list[Task], policy: PolicyConfig) -> None:
    """Flag a hard regression on any Fisher-tested task (all vs none, or Bonferroni p)."""
    tested = [t for t in tasks if t.fisher_p is not None]
    if not tested:
        return
    # Bonferroni over the tested tasks: the chance that any task of an unchanged candidate trips
    # the test stays below 1 − confidence however many tasks there are.
    alpha = (1 - exact(policy.confidence)) / len(tested)
    for t in tested:
        assert t.fisher_p is not None
        all_vs_none = t.inc.resolved == t.inc.valid and t.cand.resolved == 0
        if all_vs_none or t.fisher_p <= alpha:
            t.hard_regression = True
            t.add(
                "hard_regression",
                "keep",
                f"{t.task}: hard regression: candidate resolved {t.cand.resolved}/{t.cand.valid} "
                f"where the incumbent resolved {t.inc.resolved}/{t.inc.valid} (one-sided Fisher "
                f"p = {float(t.fisher_p):.4f}).",
            )


def _sign(wins: int, losses: int, ties: int) -> SignTest:
    return SignTest(wins=wins, losses=losses, ties=ties, p_value=float(sign_test_p(wins, losses)))


def _noise_floor(canaries: list[CanaryPair]) -> NoiseFloor | None:
    if not canaries:
        return None
    logs = [
        math.log(c.fresh / c.reused)
        for c in canaries
        if c.fresh is not None and c.reused is not None and c.fresh > 0 and c.reused > 0
    ]
    return NoiseFloor(
        pairs=len(canaries),
        measured_pairs=len(logs),
        mean_log_ratio=math.fsum(logs) / len(logs) if logs else None,
        rms_log_ratio=math.sqrt(math.fsum(x * x for x in logs) / len(logs)) if logs else None,
    )


def _noninferiority(
    counted: list[Task], policy: PolicyConfig, findings: list[Finding]
) -> NonInferiority:
    scale = math.lcm(*(t.inc.valid for t in counted))
    values = [t.rate_numerator(scale) for t in counted]
    level = policy.noninferiority_confidence
    lo_sum, hi_sum = bootstrap_sum_bounds(
        values,
        samples=policy.bootstrap_samples,
        seed=policy.seed,
        alpha=1 - exact(level),
    )
    denom = len(counted) * scale
    boundary = -exact(policy.resolve_margin) * denom
    verdict: Literal["non_inferior", "inferior", "inconclusive"]
    if lo_sum >= boundary:
        verdict = "non_inferior"
    elif hi_sum < boundary:
        verdict = "inferior"
    else:
        verdict = "inconclusive"
    diff = Bounds(
        estimate=sum(values) / denom, lower=lo_sum / denom, upper=hi_sum / denom, level=level
    )
    text = (
        f"resolve rate: candidate − incumbent = {diff.estimate:+.3f} over {len(counted)} tasks, "
        f"one-sided {level:g} bounds [{diff.lower:+.3f}, {diff.upper:+.3f}] (task-cluster "
        f"bootstrap), margin −{policy.resolve_margin:g}"
    )
    effects: dict[str, Effect] = {
        "non_inferior": "pass",
        "inferior": "keep",
        "inconclusive": "inconclusive",
    }
    effect = effects[verdict]
    ending = {
        "non_inferior": "non-inferior.",
        "inferior": "inferior beyond the margin.",
        "inconclusive": "non-inferiority not shown.",
    }[verdict]
    findings.append(
        Finding(rule="noninferiority", effect=effect, task=None, message=f"{text}: {ending}")
    )
    return NonInferiority(
        tasks=len(counted),
        difference=diff,
        margin=policy.resolve_margin,
        bootstrap_samples=policy.bootstrap_samples,
        seed=policy.seed,
        verdict=verdict,
    )


def _cost_test(counted: list[Task], policy: PolicyConfig, findings: list[Finding]) -> CostTest:
    xs = [t.log_ratio for t in counted if t.log_ratio is not None]
    bounds, sd, t_stat, two_sided, cheaper = t_test(xs, policy.confidence)
    threshold = math.log1p(-policy.min_improvement)
    improvement = Bounds(
        estimate=-math.expm1(bounds.estimate),
        lower=-math.expm1(bounds.upper),
        upper=-math.expm1(bounds.lower),
        level=bounds.level,
    )
    verdict: Literal["improved", "not_improved", "inconclusive"]
    if bounds.upper < 0 and improvement.estimate >= policy.min_improvement:
        verdict = "improved"
    elif bounds.lower > threshold:
        verdict = "not_improved"
    else:
        verdict = "inconclusive"
    text = (
        f"{policy.metric}: candidate/incumbent geometric-mean ratio saves "
        f"{pct(improvement.estimate)} over {len(xs)} tasks, one-sided {policy.confidence:g} "
        f"bounds [{pct(improvement.lower)}, {pct(improvement.upper)}] (paired t, p = "
        f"{cheaper:.4f}), required {pct(policy.min_improvement)}"
    )
    effects: dict[str, Effect] = {
        "improved": "pass",
        "not_improved": "keep",
        "inconclusive": "inconclusive",
    }
    effect = effects[verdict]
    ending = {
        "improved": "significant improvement.",
        "not_improved": "confidently below the required improvement.",
        "inconclusive": "improvement not shown.",
    }[verdict]
    findings.append(
        Finding(rule="cost_improvement", effect=effect, task=None, message=f"{text}: {ending}")
    )
    return CostTest(
        tasks=len(xs),
        log_ratio=bounds,
        sd=sd,
        df=len(xs) - 1,
        t_statistic=t_stat,
        p_value_two_sided=two_sided,
        p_value_cheaper=cheaper,
        improvement=improvement,
        required_improvement=policy.min_improvement,
        verdict=verdict,
    )


def check_set(inp: GateInput, tasks: list[Task], findings: list[Finding]) -> PairedStatistics:
    """The set tests over the counted tasks, and the report-only sign tests and noise floor."""
    policy = inp.policy
    counted = [t for t in tasks if t.counted]
    resolve: NonInferiority | None = None
    cost: CostTest | None = None
    if len(counted) < 2:
        findings.append(
            Finding(
                rule="too_few_tasks",
                effect="insufficient",
                task=None,
                message=f"{len(counted)} counted task(s); the paired tests need at least 2.",
            )
        )
    else:
        resolve = _noninferiority(counted, policy, findings)
        cost = _cost_test(counted, policy, findings)
    rate_wins = sum(
        1 for t in counted if t.cand.resolved * t.inc.valid > t.inc.resolved * t.cand.valid
    )
    rate_losses = sum(
        1 for t in counted if t.cand.resolved * t.inc.valid < t.inc.resolved * t.cand.valid
    )
    ratios = [t.log_ratio for t in counted if t.log_ratio is not None]
    cost_wins = sum(1 for x in ratios if x < 0)
    cost_losses = sum(1 for x in ratios if x > 0)
    resolve_sign = _sign(rate_wins, rate_losses, len(counted) - rate_wins - rate_losses)
    cost_sign = _sign(cost_wins, cost_losses, len(ratios) - cost_wins - cost_losses)
    findings.append(
        Finding(
            rule="sign_test",
            effect="info",
            task=None,
            message=f"sign tests (report only): resolve {resolve_sign.wins} better / "
            f"{resolve_sign.losses} worse / {resolve_sign.ties} tied, p = "
            f"{resolve_sign.p_value:.4f}; {policy.metric} {cost_sign.wins} cheaper / "
            f"{cost_sign.losses} dearer, p = {cost_sign.p_value:.4f}.",
        )
    )
    floor = _noise_floor(inp.canaries)
    if floor is not None:
        if floor.rms_log_ratio is None or floor.mean_log_ratio is None:
            text = f"canary noise floor: none of {floor.pairs} canary pair(s) measured."
        else:
            text = (
                f"canary noise floor (report only): fresh vs reused {policy.metric} differ by "
                f"±{pct(math.expm1(floor.rms_log_ratio))} per run (RMS over "
                f"{floor.measured_pairs} pair(s)), drift {pct(math.expm1(floor.mean_log_ratio))}."
            )
            if cost is not None and abs(cost.log_ratio.estimate) <= floor.rms_log_ratio:
                text += " The estimated effect is within one run's noise floor."
        findings.append(Finding(rule="noise_floor", effect="info", task=None, message=text))
    return PairedStatistics(
        counted_tasks=len(counted),
        resolve=resolve,
        cost=cost,
        hard_regressions=[t.task for t in tasks if t.hard_regression],
        resolve_sign_test=resolve_sign,
        cost_sign_test=cost_sign,
        noise_floor=floor,
    )
