"""The ceiling on issue 23's 10-task power row for any gate whose cost test cannot be fooled by
comparator drift (README, "Where the defaults sit").

Why only fresh comparator cells count: in the simulated world (``gate_sim.py``) drift makes every
reused or pooled comparator cell ``1 + drift`` times dearer, one factor for all of them. A cost test
whose false promotions do not depend on that factor can use the old cells only through contrasts
within them (task against task), and those say nothing about the suite-wide cost difference the
test decides: correcting the old cells by the drift estimated from the fresh ones and averaging
over the tasks gives back the fresh-only comparator exactly. So the most powerful drift-robust
cost test compares the candidate's cells with the ``k`` fresh comparator cells per task and
nothing else. Every gate that holds drift must do at most as well as that.

This script plays both oracles, which know every true rate and variance (no gate can do better):

* non-inferiority: ``Δ̂ = mean over tasks of (candidate rate − comparator rate)`` with the true
  variance, comparator evidence = the bench's runs plus the pooled history (resolve outcomes do
  not drift), promote only if ``(Δ̂ + margin)/SE > z(1 − resolve_error)``;
* cost: the mean over tasks of the log-cost difference against the fresh cells only, with the true
  run sigma, passed when below ``−z(1 − α_c)·SE``; ``α_c`` is the largest level that keeps A/A
  promotions at ``--aa-limit`` (2 %, issue 23's row) given how often the oracle's
  non-inferiority test passes an equal candidate.

with a fixed number of candidate cells (no sequential design can beat a fixed one with its
maximum), and prints, per candidate cells and fresh canaries per task, the chance each passes and
the product: the most a drift-robust gate can promote a 20 % cut. The worlds are
``gate_sim.World``'s, so the draws are the calibration's own.

``python bench/gate_bound.py [--tasks 10] [--generations 20000] [--cells 46,60] [--canaries
1,2,3,4,5]``
"""

import argparse
import dataclasses
import math
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gate_sim import RUN_SIGMA, SCENARIOS, World  # noqa: E402

NORMAL = statistics.NormalDist()


def _per_task(cells: int, tasks: int) -> np.ndarray:
    """``cells`` candidate cells spread over the tasks as evenly as they go."""
    base, extra = divmod(cells, tasks)
    return np.array([base + (1 if t < extra else 0) for t in range(tasks)])


def _draw(scenario: str, tasks: int, seed: int, g: int, n: np.ndarray, k: int, comp_runs: int):
    s = SCENARIOS[scenario]
    world = World(dataclasses.replace(s, tasks=tasks), seed, g)
    runs = int(n.max())
    cand = world.draw("candidate", runs)
    mask = np.arange(runs)[None, :] < n[:, None]
    fresh = world.draw("comparator", k)
    comp_resolve = world.draw("comparator", comp_runs).resolved
    return world, cand, mask, fresh, comp_resolve


def oracle(
    scenario: str,
    *,
    tasks: int,
    cells: int,
    canaries: int,
    comp_runs: int,
    generations: int,
    seed: int,
    margin: float,
    resolve_error: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Per generation: the non-inferiority statistic's margin over its bound (> 0 passes) and
    the cost statistic (z, negative is cheaper)."""
    n = _per_task(cells, tasks)
    z_ni = NORMAL.inv_cdf(1 - resolve_error)
    ni, cost = np.empty(generations), np.empty(generations)
    for g in range(generations):
        world, cand, mask, fresh, comp = _draw(scenario, tasks, seed, g, n, canaries, comp_runs)
        rate_c = (cand.resolved & mask).sum(axis=1) / n
        rate = comp.mean(axis=1)
        var = world.p_cand * (1 - world.p_cand) / n + world.p * (1 - world.p) / comp_runs
        se = math.sqrt(var.sum()) / tasks
        ni[g] = (float((rate_c - rate).mean()) + margin) / se - z_ni
        log_c = (np.log(cand.metric) * mask).sum(axis=1) / n
        d = log_c - np.log(fresh.metric).mean(axis=1)
        se_cost = RUN_SIGMA * math.sqrt(float((1 / n + 1 / canaries).sum())) / tasks
        cost[g] = float(d.mean()) / se_cost
    return ni, cost


def analytic(tasks: int, cells: int, canaries: int, alpha: float) -> float:
    """The cost oracle's power for a 20 % cut, normal approximation."""
    n = _per_task(cells, tasks)
    se = RUN_SIGMA * math.sqrt(float((1 / n + 1 / canaries).sum())) / tasks
    return NORMAL.cdf(-math.log(0.8) / se - NORMAL.inv_cdf(1 - alpha))


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--generations", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=20260110)
    ap.add_argument("--cells", default="46,60", help="candidate cells per generation, comma list")
    ap.add_argument("--canaries", default="1,2,3,4,5", help="fresh comparator cells per task")
    ap.add_argument("--runs", type=int, default=3, help="the bench's comparator runs per task")
    ap.add_argument("--pooled", type=int, default=9, help="pooled comparator runs per task")
    ap.add_argument("--margin", type=float, default=0.10)
    ap.add_argument("--resolve-error", type=float, default=0.20)
    ap.add_argument("--aa-limit", type=float, default=0.02)
    a = ap.parse_args()
    comp_runs = a.runs + a.pooled
    print(
        f"{a.tasks} tasks, {a.generations} generations, seed {a.seed}; comparator resolve "
        f"evidence {a.runs} + {a.pooled} pooled runs per task"
    )
    print(
        "| candidate cells | fresh canaries per task | α_c (A/A = "
        f"{a.aa_limit:.0%}) | NI passes, equal | NI passes, 10 points worse"
        " | cost passes a 20 % cut (normal approx.)"
        " | 20 % cut promoted: the ceiling | 10 points worse promoted |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    common = dict(
        tasks=a.tasks, comp_runs=comp_runs, generations=a.generations, seed=a.seed,
        margin=a.margin, resolve_error=a.resolve_error,
    )  # fmt: skip
    for cells in (int(c) for c in a.cells.split(",")):
        for k in (int(c) for c in a.canaries.split(",")):
            ni_aa, cost_aa = oracle("aa", cells=cells, canaries=k, **common)
            p_ni = float((ni_aa > 0).mean())
            alpha = min(0.5, a.aa_limit / p_ni)
            z = NORMAL.inv_cdf(1 - alpha)
            ni_cut, cost_cut = oracle("cheaper20", cells=cells, canaries=k, **common)
            ni_w, cost_w = oracle("worse10_cheaper20", cells=cells, canaries=k, **common)
            promote = float(((ni_cut > 0) & (cost_cut < -z)).mean())
            worse = float(((ni_w > 0) & (cost_w < -z)).mean())
            half = 1.96 * math.sqrt(promote * (1 - promote) / a.generations)
            print(
                f"| {cells} | {k} | {alpha:.4f} | {p_ni:.1%} | {float((ni_w > 0).mean()):.1%} "
                f"| {float((cost_cut < -z).mean()):.1%} ({analytic(a.tasks, cells, k, alpha):.1%})"
                f" | **{promote:.1%}** ± {half:.1%} | {worse:.1%} |"
            )


if __name__ == "__main__":
    main()
