"""What a suite can promise before any money is spent: gate v3's power report (issue 23).

:func:`power_report` plays the preregistered design (:mod:`bench_assets.gate.paired3`: looks,
spending, futility, the last look that answers) on the normal approximation of its two
statistics — the resolve difference against the margin and the drift-robust cost log ratio —
with the variances this suite will have: ``tasks`` tasks, the candidate's runs per look, and per
task the comparator's fresh and old (reused plus pooled) runs. The resolve variance assumes
per-task rates uniform in ``p_range`` (the calibration's worlds), the cost variance a per-run
log-metric SD of ``run_sd``. A seeded Monte-Carlo of the two statistics' paths (numpy, no
gate call) gives the chance to promote and the expected cells; the real gate's numbers are
measured by ``bench/gate_calibration.py``, which also carries the t and binomial-floor details
this approximation leaves out (the report is within a few points of it at 10–50 tasks).
"""

import math
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, ConfigDict

from bench_assets.config.models import PolicyConfig
from bench_assets.gate.sequential import boundaries, top_up_count

if TYPE_CHECKING:
    from bench_assets.gate.models import Decision

PATHS = 4000
SEED = 20261129


class PowerReport(BaseModel):
    """The promises of one design on one suite."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tasks: int
    first_runs: int
    max_looks: int
    max_candidate_runs: int
    comparator_fresh_per_task: float
    comparator_old_per_task: float
    resolve_margin: float
    expected_candidate_cells: float
    """Under a 20 %-cheaper candidate that resolves as well (the power case)."""
    max_candidate_cells: int
    power_cheaper20: float
    promote_worse10: float
    """A 10-point-worse candidate that is 20 % cheaper."""
    promote_worse_margin: float
    """A candidate exactly ``resolve_margin`` worse (the design's promise: ≤ ``resolve_error``)."""
    mde_cost: float | None
    """Smallest cost cut promoted with 80 % chance (resolving as well); ``None``: none ≤ 60 %."""
    power_cap: float
    """The chance to promote a 60 %-cheaper candidate that resolves as well: what the resolve
    bound alone allows at this size."""
    tasks_for_80_20: int | None
    """Tasks this design (its looks, its resolve error capped at 0.20) needs, starting at 1
    candidate run per task, for 80 % power on a 20 % cut (``None``: none up to 1000)."""
    cells_for_80_20: float | None
    """The candidate cells it then pays, expected."""
    power_one_more_canary: float | None = None
    """Power for a 20 % cut with one more fresh gate canary per task (one reused comparator run
    per task paid fresh instead: ``tasks`` more comparator cells a generation, and the cost test
    leans less on old cells); ``None``: no comparator run is reused to convert."""


def _runs_per_look(policy: PolicyConfig, tasks: int, first: int) -> list[float]:
    """Mean candidate runs per task at each look: each top-up pays ``top_up_runs`` on
    :func:`~bench_assets.gate.sequential.top_up_count` tasks (every task, or a share of them)."""
    step = policy.top_up_runs * top_up_count(tasks, first, policy.top_up_share, policy.top_up_runs)
    return [first + k * step / tasks for k in range(policy.max_looks)]


def _probabilities(
    policy: PolicyConfig,
    tasks: int,
    first: int,
    fresh: float,
    old: float,
    delta: float,
    cost: float,
    p_range: tuple[float, float],
    run_sd: float,
) -> tuple[float, float]:
    """Chance to promote and expected candidate cells for a true resolve difference ``delta``
    and cost log ratio ``cost``."""
    lo, hi = p_range
    pq = (hi + lo) / 2 - (hi**3 - lo**3) / (3 * (hi - lo)) if hi > lo else lo * (1 - lo)
    comp_runs = max(1e-9, fresh + old)
    looks = policy.max_looks
    runs = _runs_per_look(policy, tasks, first)
    var_r = [(pq / m + pq / comp_runs) / tasks for m in runs]
    b2 = policy.drift_prior_sd**2
    s2 = run_sd**2
    if old > 0 and fresh > 0:
        a_var, f_var = s2 / (old * tasks), s2 / (fresh * tasks)
        w = (a_var + b2) / (a_var + b2 + f_var)
        comp = (1 - w) ** 2 / old + w**2 / fresh
    else:
        comp = 1 / comp_runs
    var_c = [s2 * (1 / m + comp) / tasks for m in runs]
    ts_r = [var_r[-1] / v for v in var_r]
    ts_c = [var_c[-1] / v for v in var_c]
    rng = np.random.default_rng(SEED)
    # paths of the two estimates: Brownian in information, correlated only through nothing
    est = []
    for var, mean in ((var_r, delta), (var_c, cost)):
        info = [1 / v for v in var]
        steps = np.diff(np.array([0.0, *info]))
        inc = rng.standard_normal((PATHS, looks)) * np.sqrt(steps) + mean * steps
        est.append(np.cumsum(inc, axis=1) / np.array(info))  # the estimate at each look
    d_hat, c_hat = est
    alive = np.ones(PATHS, dtype=bool)
    promoted = np.zeros(PATHS, dtype=bool)
    cells = np.zeros(PATHS)
    need = math.log1p(-policy.min_improvement)
    # Look k's boundary depends on the fractions of looks 1..k only, so one recursion over all
    # the looks gives every look's (the gate computes the same prefix at each look).
    up_r = boundaries(ts_r, policy.resolve_error, policy.spending)
    up_c = boundaries(ts_c, policy.cost_error, policy.spending)
    fut = policy.futility_error > 0
    down_r = boundaries(ts_r, policy.futility_error, policy.spending) if fut else []
    down_c = (
        down_r
        if ts_c == ts_r or not fut
        else boundaries(ts_c, policy.futility_error, policy.spending)
    )
    for k in range(looks):
        last = k == looks - 1
        a_r, a_c = up_r[k], up_c[k]
        f_r = f_c = math.inf
        if not last and fut:
            f_r, f_c = down_r[k], down_c[k]
        se_r, se_c = math.sqrt(var_r[k]), math.sqrt(var_c[k])
        ni = d_hat[:, k] - a_r * se_r >= -policy.resolve_margin
        cheap = (c_hat[:, k] + a_c * se_c < 0) & (c_hat[:, k] <= need)
        futile = (d_hat[:, k] + f_r * se_r < 0) | (c_hat[:, k] - f_c * se_c > need)
        cells[alive] = runs[k] * tasks
        win = alive & ni & cheap
        promoted |= win
        stop = win | (alive & futile) if not last else alive
        alive &= ~stop
    return float(promoted.mean()), float(cells.mean())


def power_report(
    policy: PolicyConfig,
    tasks: int,
    first_runs: int,
    comparator_fresh_per_task: float,
    comparator_old_per_task: float,
    *,
    p_range: tuple[float, float] = (0.3, 0.95),
    run_sd: float = 0.3,
    comparator_reused_per_task: float = 0.0,
) -> PowerReport:
    """The design's promises on this suite (see the module). ``comparator_reused_per_task``
    (part of the old runs: the planned comparator runs reused, not the pooled history) says
    whether one more gate canary per task is there to buy."""
    args = (comparator_fresh_per_task, comparator_old_per_task)

    def prob(n: int, delta: float, cost: float, first: int = first_runs) -> tuple[float, float]:
        return _probabilities(policy, n, first, *args, delta, cost, p_range, run_sd)

    cut20 = math.log(0.8)
    power, cells = prob(tasks, 0.0, cut20)
    worse10, _ = prob(tasks, -0.10, cut20)
    at_margin, _ = prob(tasks, -policy.resolve_margin, cut20)
    mde = None
    for cut in [x / 100 for x in range(5, 61)]:
        if prob(tasks, 0.0, math.log1p(-cut))[0] >= 0.8:
            mde = cut
            break
    needed = None
    needed_cells = None
    # the question is 80 % power *with* ≤ 20 % on 10-point drops: ask it of this design with its
    # resolve error at most 0.20 (the approximation lacks the bound's conservative floor)
    capped = policy.model_copy(update={"resolve_error": min(policy.resolve_error, 0.20)})
    n = max(policy.min_counted_tasks, 2)
    while n <= 1000:
        p80, cells80 = _probabilities(capped, n, 1, *args, 0.0, cut20, p_range, run_sd)
        if p80 >= 0.8:
            needed = n
            needed_cells = cells80
            break
        n = n + max(1, n // 10)
    one_more = None
    if comparator_reused_per_task >= 1:
        more = (comparator_fresh_per_task + 1, comparator_old_per_task - 1)
        one_more = _probabilities(policy, tasks, first_runs, *more, 0.0, cut20, p_range, run_sd)[0]
    last = _runs_per_look(policy, tasks, first_runs)[-1]
    max_runs = math.ceil(last - 1e-9)
    return PowerReport(
        tasks=tasks,
        first_runs=first_runs,
        max_looks=policy.max_looks,
        max_candidate_runs=max_runs,
        comparator_fresh_per_task=comparator_fresh_per_task,
        comparator_old_per_task=comparator_old_per_task,
        resolve_margin=policy.resolve_margin,
        expected_candidate_cells=cells,
        max_candidate_cells=round(last * tasks),
        power_cheaper20=power,
        promote_worse10=worse10,
        promote_worse_margin=at_margin,
        mde_cost=mde,
        power_cap=prob(tasks, 0.0, math.log(0.4))[0],
        tasks_for_80_20=needed,
        cells_for_80_20=needed_cells,
        power_one_more_canary=one_more,
    )


def report_lines(r: PowerReport) -> list[str]:
    """The report as ``wfbench plan`` prints it."""
    mde = (
        f"none: the resolve bound caps power at {r.power_cap:.0%} at this size"
        if r.mde_cost is None
        else f"{r.mde_cost:.0%}"
    )
    lines = [
        f"what this suite can promise (gate v3, normal approximation; measured by "
        f"bench/gate_calibration.py): {r.tasks} task(s), candidate runs per task "
        f"{r.first_runs} at the first look, up to {r.max_candidate_runs} over {r.max_looks} "
        f"look(s); comparator {r.comparator_fresh_per_task:.1f} fresh + "
        f"{r.comparator_old_per_task:.1f} reused/pooled runs per task",
        f"  candidate cells: expected {r.expected_candidate_cells:.0f}, at most "
        f"{r.max_candidate_cells}",
        f"  power for a 20 % cost cut that resolves as well: {r.power_cheaper20:.0%}",
        f"  chance to promote a 20 %-cheaper candidate 10 points worse: {r.promote_worse10:.0%}"
        f" (exactly the {r.resolve_margin:g} margin worse: {r.promote_worse_margin:.0%})",
        f"  minimum detectable cost cut (80 % power): {mde}",
    ]
    if r.power_one_more_canary is not None and r.power_cheaper20 < 0.8:
        lines.append(
            f"  one more fresh gate canary per task (reuse.gate_canaries_per_task + 1: {r.tasks} "
            f"more comparator cells a generation, less trust in old cells): power "
            f"{r.power_one_more_canary:.0%}"
        )
    if r.tasks_for_80_20 is None:
        lines.append("  80 % power with ≤ 20 % on 10-point drops: not reachable by this design")
    elif r.power_cheaper20 < 0.8 or r.promote_worse10 > 0.2:
        lines.append(
            f"  this suite cannot promise 80 % power on a 20 % cut with ≤ 20 % on 10-point "
            f"drops: that needs about {r.tasks_for_80_20} tasks starting at 1 candidate run per "
            f"task (about {r.cells_for_80_20 or 0:.0f} candidate cells expected)"
        )
    else:
        lines.append("  80 % power with ≤ 20 % on 10-point drops: met at this size")
    return lines


def decision_report(d: "Decision") -> PowerReport | None:
    """The report for the suite a gate v3 decision was taken on — its counted tasks, the
    candidate's runs at the first look, and the comparator's fresh and old (reused and pooled)
    runs per task it actually had — for the UI's metadata next to the decision; ``None`` for the
    other policies or too few counted tasks."""
    s = d.paired_v2
    if d.policy.name != "paired" or s is None or s.sequential is None or s.counted_tasks < 2:
        return None
    n = s.counted_tasks
    p = s.pooled
    return power_report(
        d.policy,
        n,
        s.sequential.first_runs,
        p.fresh_runs / n,
        (p.reused_runs + p.pooled_runs) / n,
        comparator_reused_per_task=p.reused_runs / n,
    )
