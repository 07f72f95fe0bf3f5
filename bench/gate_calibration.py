"""Calibrate the promotion gate by suite size (issue 23; issue 13's table before it).

One run decides simulated generations under ``strict``, ``paired_v1``, ``paired_v2`` (issue 13,
at its calibrated point) and ``paired`` (gate v3, the default) side by side. The worlds come from
``bench/gate_sim.py``, which imports nothing from the gate; this script only turns its numbers
into :class:`GateInput` and plays the planner and the driver's looks:

* ``strict`` / ``paired_v1`` — the generation as before issue 13: the candidate's runs, the
  comparator's runs reused (the drift applies) except one fresh canary cell, no retry.
* ``paired`` / ``paired_v2`` — ``--runs`` candidate runs per task at the first look, then
  ``top_up_runs`` more per task while the gate answers ``next_action = top_up`` (only on the
  tasks the look's ``top_up_tasks`` names when the top-up is partial, ``top_up_share``); a
  comparator re-payment when it answers ``repay_comparator``. Comparator history ``pooled`` (the
  steady state: ``CANARIES_PER_TASK`` gate canaries fresh, the other planned runs reused,
  ``POOLED_RUNS`` earlier-generation runs per task) or ``none`` (right after a promotion: every
  comparator run fresh, nothing pooled). Every excluded cell is re-paid up to ``retries`` times.

Scenarios (``_hi`` = p in [0.95, 1], otherwise [0.3, 0.95]): ``aa`` identical arms,
``cheaper20`` a 20 % cost cut (``cheaper60``: 60 %, the cost test always passes: the power the
resolve bound and the veto allow), ``worse10_cheaper20`` / ``worse15_cheaper20`` 20 % cheaper but
10 / 15 points worse on every task, ``regress1`` 20 % cheaper with one task at p = 0.1,
``drift5``/``drift10`` identical arms with the old comparator evidence 5 %/10 % dearer
(``drift20``/``drift30``: 20 %/30 %, large drift that the comparator re-payment must carry),
``infra1`` = ``cheaper20`` with 1 % of cells failing, ``hetero20`` per-task effects around 20 %,
``heavytail20`` t3 run noise, ``*_failcost``: a run that does not resolve costs 1.5 times more.

Every rate is printed with its 95 % binomial interval over the pooled seeds (``--seeds``) and
per seed. ``--suite`` runs issue 23's rows (10, 20, 50 and 200 tasks; both histories);
``--tasks``/``--histories``/``--runs`` choose others. ``--ni-check`` adds the level of the v3
resolve bound alone at a true drop equal to the margin. ``--frontier`` sweeps issue 13's
``paired_v2`` designs.

Run: ``python bench/gate_calibration.py [--generations N] [--seeds K] [--suite] [--json]``.
With ``--json`` it prints one object ``{"rows": [...]}``, one row per (policy, scenario, tasks,
runs, history). A ``paired``/``paired_v2`` row also says why generations did not promote
(``not_promoted_because``: cost test or non-inferiority not passed at the final look, a veto,
a futility stop, the last look reached, the total-spend rule; shares of all generations, several
can hold at once, their combinations in ``not_promoted_combinations``) and at which look they
stopped (``stopped_at_look``: where the expected cells come from).

Why one file over 500 lines: it is one command (the calibration table of issue 23), and its
worlds, its design grid and the table it prints are read together against the README rows they
produce; the simulator it drives is ``bench/gate_sim.py``, apart.
"""

import argparse
import dataclasses
import datetime as dt
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from gate_sim import SCENARIOS, Cells, Scenario, World  # noqa: E402

from bench_assets.config.models import PolicyConfig, ReuseConfig  # noqa: E402
from bench_assets.gate import Decision, GateInput, RunOutcome, decide  # noqa: E402
from bench_assets.gate.models import Look  # noqa: E402
from bench_assets.kernel.errorkinds import ErrorKind  # noqa: E402

NOW = dt.datetime(2026, 1, 10, tzinfo=dt.UTC)
FRESH_AT = NOW - dt.timedelta(hours=1)
OLD_AT = NOW - dt.timedelta(days=20)
RUNS = 3
CANARIES_PER_TASK = ReuseConfig().gate_canaries_per_task  # the planner's default
POOLED_RUNS = 9
CHUNK = 100
POLICIES: dict[str, PolicyConfig] = {
    "strict": PolicyConfig(name="strict"),
    "paired_v1": PolicyConfig(name="paired_v1"),
    # gate v2 at its calibrated point (issue 13): one look, its own margin and levels
    "paired_v2": PolicyConfig(name="paired_v2", max_looks=1, top_up_runs=2),
    "paired": PolicyConfig(name="paired"),
}
HISTORIES = ("pooled", "none")
"""``pooled``: the steady state (a gate canary per task fresh, the other planned comparator runs
reused, ``POOLED_RUNS`` earlier-generation runs per task); ``none``: right after a promotion
(every comparator run fresh, nothing reused or pooled)."""


def _outcomes(
    task_ids: list[str],
    arm: str,
    cells: Cells,
    *,
    first_run: int,
    old: bool,
    pooled: bool,
    counts: list[int] | None = None,
) -> list[RunOutcome]:
    rows = []
    for t, task in enumerate(task_ids):
        for r in range(cells.resolved.shape[1] if counts is None else counts[t]):
            infra = bool(cells.infra[t, r])
            ok = bool(cells.resolved[t, r]) and not infra
            kind = ErrorKind.INFRA_ERROR if infra else None if ok else ErrorKind.ORACLE_FAILED
            run = first_run + r
            rows.append(
                RunOutcome(
                    task=task,
                    arm=arm,
                    run=run,
                    resolved=ok,
                    error_kind=kind,
                    metric=None if infra else float(cells.metric[t, r]),
                    reused=old and not pooled,
                    pooled=pooled,
                    generation="sim-old" if old else "sim",
                    record_id=f"{task}-{arm}-{run}-{'p' if pooled else 'o' if old else 'f'}",
                    data_version="dv",
                    recorded_at=OLD_AT if old else FRESH_AT,
                )
            )
    return rows


def _concat(a: Cells, b: Cells) -> Cells:
    return Cells(
        resolved=np.concatenate([a.resolved, b.resolved], axis=1),
        metric=np.concatenate([a.metric, b.metric], axis=1),
        infra=np.concatenate([a.infra, b.infra], axis=1),
    )


def _top_up(cells: Cells, counts: list[int], more: Cells, rows: list[int]) -> Cells:
    """``more`` (tasks x top-up runs) appended after each listed task's runs (``counts``, updated
    in place): a partial top-up leaves the other tasks' runs as they were."""
    step = more.resolved.shape[1]
    width = max([cells.resolved.shape[1], *(counts[t] + step for t in rows)])
    if width > cells.resolved.shape[1]:
        pad = width - cells.resolved.shape[1]
        n = cells.resolved.shape[0]
        cells = _concat(
            cells,
            Cells(
                resolved=np.zeros((n, pad), dtype=bool),
                metric=np.ones((n, pad)),
                infra=np.zeros((n, pad), dtype=bool),
            ),
        )
    for t in rows:
        at = slice(counts[t], counts[t] + step)
        cells.resolved[t, at] = more.resolved[t]
        cells.metric[t, at] = more.metric[t]
        cells.infra[t, at] = more.infra[t]
        counts[t] += step
    return cells


def _input(
    policy: PolicyConfig, task_ids: list[str], outcomes: list[RunOutcome], **extra: object
) -> GateInput:
    return GateInput(
        policy=policy,
        model="sim-model",
        incumbent_arm="comparator",
        candidate_arm="candidate",
        tasks=task_ids,
        outcomes=outcomes,
        aborted=False,
        now=NOW,
        max_age_days=90,
        **extra,  # type: ignore[arg-type]
    )


REASONS = (
    "cost_not_passed",
    "noninferiority_not_passed",
    "veto",
    "futility_stop",
    "last_look",
    "total_spend",
    "other",
)
"""Why a generation did not promote (several can hold at once): the cost test or the resolve
(non-inferiority) test had not passed at the final look, the per-task or integrity veto fired, the
design stopped before its last look on a futility boundary, it reached its last look
(budget/looks exhausted), the total-spend rule kept, or anything else (``other``)."""


def why(d: Decision, look: int) -> tuple[int, tuple[str, ...]]:
    """The look a decided generation stopped at and, when it did not promote, why
    (:data:`REASONS`)."""
    stats = d.paired_v2
    if d.decision == "promote" or stats is None:
        return look, ()
    out = []
    cost, resolve = stats.cost, stats.resolve
    if cost is None or cost.verdict != "improved":
        out.append("cost_not_passed")
    if resolve is None or resolve.verdict != "non_inferior":
        out.append("noninferiority_not_passed")
    effects = {(f.rule, f.effect) for f in d.findings}
    if any(e == "veto" for _, e in effects) or (
        stats.regression_veto is not None and stats.regression_veto.fired
    ):
        out.append("veto")
    if ("futility", "keep") in effects:
        out.append("futility_stop")
    if stats.sequential is not None and stats.sequential.last_look:
        out.append("last_look")
    if stats.total_spend.verdict == "exceeded":
        out.append("total_spend")
    return look, tuple(out) or ("other",)


def play_v1(world: World, policy: PolicyConfig, runs: int = RUNS) -> tuple[str, int, int]:
    """strict / paired_v1: one look, reused comparator, one canary, no retries."""
    ids = [f"t{i:02d}" for i in range(world.s.tasks)]
    cand = world.draw("candidate", runs)
    old = world.draw("comparator", runs, old=True)
    canary = world.draw("comparator", 1)
    old.resolved[0, 0], old.metric[0, 0], old.infra[0, 0] = (
        canary.resolved[0, 0],
        canary.metric[0, 0],
        canary.infra[0, 0],
    )
    outs = _outcomes(ids, "candidate", cand, first_run=0, old=False, pooled=False)
    outs += _outcomes(ids, "comparator", old, first_run=0, old=True, pooled=False)
    d = decide(_input(policy, ids, outs))
    return d.decision, cand.resolved.size, 1


def play_v2(
    world: World,
    policy: PolicyConfig,
    runs: int = RUNS,
    history: str = "pooled",
    canaries_per_task: int = CANARIES_PER_TASK,
) -> tuple[str, int, int, tuple[int, tuple[str, ...]]]:
    """paired (v3) and paired_v2 as ``wfbench evolve`` plays them (bench_assets/driver/looks.py):
    canaries + reused + pooled comparator (``history`` pooled) or every comparator run fresh
    (``none``), retries, then sequential looks that top up the candidate or re-pay the
    comparator's reused cells fresh (dropping the pooled history) on drift. The fourth value is
    :func:`why`: the look the generation stopped at and the reasons it did not promote."""
    ids = [f"t{i:02d}" for i in range(world.s.tasks)]
    canaries = runs if history == "none" else min(canaries_per_task, runs)
    fresh = world.draw("comparator", canaries)
    comp_paid = fresh.resolved.size + world.redraw("comparator", fresh, policy.retries)
    comp = _outcomes(ids, "comparator", fresh, first_run=0, old=False, pooled=False)
    if runs > canaries:
        reused = world.draw("comparator", runs - canaries, old=True)
        comp += _outcomes(ids, "comparator", reused, first_run=canaries, old=True, pooled=False)
    if history == "pooled" and POOLED_RUNS:
        pool = world.draw("comparator", POOLED_RUNS, old=True)
        comp += _outcomes(ids, "comparator", pool, first_run=runs, old=True, pooled=True)
    cand = world.draw("candidate", runs)
    cand_paid = cand.resolved.size + world.redraw("candidate", cand, policy.retries)
    counts = [runs] * len(ids)
    every = runs  # runs planned on every task (partial top-ups are in the looks' records)
    look, repaid = 1, False
    prior: list[Look] = []
    while True:
        outs = comp + _outcomes(
            ids, "candidate", cand, first_run=0, old=False, pooled=False, counts=counts
        )
        d = decide(
            _input(
                policy,
                ids,
                outs,
                planned_runs={"candidate": every, "comparator": runs},
                look=look,
                prior_looks=prior,
                comparator_repaid=repaid,
            )
        )
        if d.next_action == "decide":
            return d.decision, cand_paid, comp_paid, why(d, look)
        assert d.paired_v2 is not None
        prior = d.paired_v2.looks
        if d.next_action == "top_up":
            more = world.draw("candidate", policy.top_up_runs)
            chosen = prior[-1].top_up_tasks
            rows = list(range(len(ids))) if chosen is None else [ids.index(t) for t in chosen]
            if chosen is None:
                every += policy.top_up_runs
            else:
                more.infra[[i for i in range(len(ids)) if i not in set(rows)]] = False
            paid = len(rows) * policy.top_up_runs
            cand_paid += paid + world.redraw("candidate", more, policy.retries)
            cand = _top_up(cand, counts, more, rows)
            look += 1
        else:  # repay_comparator: every reused cell fresh, the pooled history set aside
            comp = _outcomes(ids, "comparator", fresh, first_run=0, old=False, pooled=False)
            if runs > canaries:
                again = world.draw("comparator", runs - canaries)
                comp_paid += again.resolved.size + world.redraw("comparator", again, policy.retries)
                comp += _outcomes(
                    ids, "comparator", again, first_run=canaries, old=False, pooled=False
                )
            repaid = True


@dataclasses.dataclass(frozen=True)
class Job:
    """A slice of generations of one scenario under one policy."""

    policy: str
    config: PolicyConfig
    scenario: Scenario
    seed: int
    first: int
    count: int
    runs: int = RUNS
    history: str = "pooled"
    canaries: int = CANARIES_PER_TASK


Counts = tuple[int, int, int, int, int, dict[str, int], dict[int, int]]


def run_job(job: Job) -> Counts:
    """Promotions, candidate cells, comparator cells, generations and the most candidate cells
    of one generation, for one job; then (``paired``/``paired_v2``) how many generations did not
    promote for each of :data:`REASONS` and how many stopped at each look."""
    v2 = job.config.name in ("paired", "paired_v2")
    promoted = cand = comp = most = 0
    reasons: dict[str, int] = {}
    stops: dict[int, int] = {}
    for g in range(job.first, job.first + job.count):
        world = World(job.scenario, job.seed, g)
        if v2:
            decision, c, k, (look, because) = play_v2(
                world, job.config, job.runs, job.history, job.canaries
            )
            stops[look] = stops.get(look, 0) + 1
            for r in (*because, *(["+".join(because)] if len(because) > 1 else [])):
                reasons[r] = reasons.get(r, 0) + 1
        else:
            decision, c, k = play_v1(world, job.config, job.runs)
        promoted += decision == "promote"
        cand += c
        comp += k
        most = max(most, c)
    return promoted, cand, comp, job.count, most, reasons, stops


def ni_check_job(args: tuple[int, str, int, int, int]) -> tuple[int, str, int, int, int]:
    """Share of generations whose v2 resolve bound says non-inferior at a true drop = margin."""
    tasks, prange, comp_runs, n, seed = args
    policy = PolicyConfig(name="paired", max_looks=1)
    margin = policy.resolve_margin
    lo, hi = (0.3, 0.95) if prange == "lo" else (0.95, 1.0)
    rng = np.random.default_rng([seed, tasks, comp_runs, len(prange)])
    ids = [f"t{i:03d}" for i in range(tasks)]
    hits = 0
    for _ in range(n):
        p = rng.uniform(lo, hi, size=tasks)
        pc = np.clip(p - margin, 0, 1)
        outs = []
        for arm, probs, runs in (("comparator", p, comp_runs), ("candidate", pc, RUNS)):
            res = rng.random((tasks, runs)) < probs[:, None]
            cost = np.exp(rng.normal(0, 0.3, size=(tasks, runs)))
            for t, task in enumerate(ids):
                for r in range(runs):
                    ok = bool(res[t, r])
                    outs.append(
                        RunOutcome(
                            task=task,
                            arm=arm,
                            run=r,
                            resolved=ok,
                            error_kind=None if ok else ErrorKind.ORACLE_FAILED,
                            metric=float(cost[t, r]),
                            reused=False,
                            generation="sim",
                            record_id=f"{task}{arm}{r}",
                            data_version="dv",
                            recorded_at=FRESH_AT,
                        )
                    )
        d = decide(_input(policy, ids, outs))
        assert d.paired_v2 is not None
        resolve = d.paired_v2.resolve
        hits += resolve is not None and resolve.verdict == "non_inferior"
    return tasks, prange, comp_runs, hits, n


FRONTIER_SCENARIOS = ("aa", "cheaper20", "worse10_cheaper20", "drift5")
FRONTIER_GRID = {
    "runs": (2, 3, 4),
    "looks": ((1, 1), (2, 1), (2, 2), (3, 1)),
    "v2_resolve_margin": (0.10, 0.12, 0.15),
    "v2_noninferiority_confidence": (0.75, 0.80, 0.85),
}
TARGETS = {"power": 0.80, "worse10": 0.20, "cells": 40.0, "aa": 0.05, "drift5": 0.05}


def frontier_designs(default: PolicyConfig, runs: int) -> list[tuple[int, PolicyConfig]]:
    """Every design of the frontier grid (first-look runs, looks × top-up, margin, level), the
    default first; ``min_runs`` follows the first look's runs."""
    out = [(runs, default)]
    for r in FRONTIER_GRID["runs"]:
        for looks, top_up in FRONTIER_GRID["looks"]:
            for margin in FRONTIER_GRID["v2_resolve_margin"]:
                for level in FRONTIER_GRID["v2_noninferiority_confidence"]:
                    cfg = default.model_copy(
                        update={
                            "min_runs": min(default.min_runs, r),
                            "max_looks": looks,
                            "top_up_runs": top_up,
                            "v2_resolve_margin": margin,
                            "v2_noninferiority_confidence": level,
                        }
                    )
                    if (r, cfg) != out[0]:
                        out.append((r, cfg))
    return out


def frontier(args: argparse.Namespace) -> None:
    """The power / worse10 / cells frontier over the design grid, one run (``--frontier``)."""
    n = args.generations
    designs = frontier_designs(POLICIES["paired_v2"], args.runs)
    jobs = [
        Job(f"d{i}", cfg, SCENARIOS[s], args.seed, first, min(CHUNK, n - first), runs)
        for i, (runs, cfg) in enumerate(designs)
        for s in FRONTIER_SCENARIOS
        for first in range(0, n, CHUNK)
    ]
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        counts = list(pool.map(run_job, jobs, chunksize=4))
    acc: dict[tuple[str, str], list[int]] = {}
    for job, c in zip(jobs, counts, strict=True):
        a = acc.setdefault((job.policy, job.scenario.name), [0, 0, 0, 0])
        for i, v in enumerate(c[:4]):
            a[i] += v
    rows = []
    for i, (runs, cfg) in enumerate(designs):
        rate = {s: acc[(f"d{i}", s)][0] / acc[(f"d{i}", s)][3] for s in FRONTIER_SCENARIOS}
        good = acc[(f"d{i}", "cheaper20")]
        rows.append(
            {
                "default": i == 0,
                "runs": runs,
                "max_looks": cfg.max_looks,
                "top_up_runs": cfg.top_up_runs,
                "v2_resolve_margin": cfg.v2_resolve_margin,
                "v2_noninferiority_confidence": cfg.v2_noninferiority_confidence,
                "power": rate["cheaper20"],
                "worse10": rate["worse10_cheaper20"],
                "aa": rate["aa"],
                "drift5": rate["drift5"],
                "cells": good[1] / good[3],
                "generations": n,
            }
        )

    def meets(r: dict[str, object], *keys: str) -> bool:
        checks = {
            "power": float(r["power"]) >= TARGETS["power"],  # type: ignore[arg-type]
            "worse10": float(r["worse10"]) <= TARGETS["worse10"],  # type: ignore[arg-type]
            "cells": float(r["cells"]) <= TARGETS["cells"],  # type: ignore[arg-type]
            "aa": float(r["aa"]) <= TARGETS["aa"],  # type: ignore[arg-type]
            "drift5": float(r["drift5"]) <= TARGETS["drift5"],  # type: ignore[arg-type]
        }
        return all(checks[k] for k in keys)

    safe = [r for r in rows if meets(r, "worse10", "cells", "aa", "drift5")]
    strong = [r for r in rows if meets(r, "power", "cells", "aa", "drift5")]
    best_safe = max(safe, key=lambda r: r["power"]) if safe else None  # type: ignore[arg-type,return-value]
    best_strong = min(strong, key=lambda r: r["worse10"]) if strong else None  # type: ignore[arg-type,return-value]
    every = [r for r in rows if meets(r, "power", "worse10", "cells", "aa", "drift5")]
    if args.json:
        print(json.dumps({"frontier": rows}, indent=1))
        return
    print(
        f"gate frontier: {len(designs)} paired (v2) designs x {len(FRONTIER_SCENARIOS)} "
        f"scenarios, {n} generations each, seed {args.seed}; targets: power >= 80 % at <= 40 "
        "candidate cells, worse10_cheaper20 <= 20 %, aa and drift5 <= 5 %"
    )
    head = "runs looks+top-up margin level |  power  worse10  cells |    aa  drift5"
    print(f"  {head}")

    def line(r: dict[str, object], mark: str) -> str:
        return (
            f"  {r['runs']:>4} {r['max_looks']:>5}+{r['top_up_runs']:<6}"
            f" {r['v2_resolve_margin']:>6.2f}"
            f" {r['v2_noninferiority_confidence']:>5.2f} | {r['power']:>6.1%} {r['worse10']:>8.1%}"
            f" {r['cells']:>6.1f} | {r['aa']:>5.1%} {r['drift5']:>7.1%}  {mark}"
        )

    pareto = [
        r
        for r in rows
        if float(r["cells"]) <= TARGETS["cells"]  # type: ignore[arg-type]
        and not any(
            o["power"] >= r["power"]
            and o["worse10"] < r["worse10"]  # type: ignore[operator]
            or o["power"] > r["power"]
            and o["worse10"] <= r["worse10"]  # type: ignore[operator]
            for o in rows
            if float(o["cells"]) <= TARGETS["cells"]  # type: ignore[arg-type]
        )
    ]
    shown = sorted(
        {
            id(r): r for r in [*pareto, rows[0], *(x for x in (best_safe, best_strong) if x)]
        }.values(),
        key=lambda r: (r["worse10"], r["power"]),  # type: ignore[arg-type,return-value]
    )
    print("  (the Pareto front of power against worse10 at <= 40 cells, and the marked rows)")
    for r in shown:
        marks = []
        if r["default"]:
            marks.append("<- default")
        if r is best_safe:
            marks.append("best power with worse10 <= 20 %")
        if r is best_strong:
            marks.append("least worse10 with power >= 80 %")
        print(line(r, ", ".join(marks)))
    print(
        f"  designs meeting every target: {len(every)} of {len(rows)}"
        + ("" if every else " (no design reaches all of them; see the README for the choice)")
    )


SUITE: tuple[tuple[int, int, str, tuple[str, ...]], ...] = (
    # (tasks, first-look runs, comparator history, scenarios): issue 23's done-when rows
    (
        10,
        3,
        "pooled",
        (
            "aa",
            "drift5",
            "drift10",
            "drift20",
            "drift30",
            "cheaper20",
            "worse10_cheaper20",
            "worse15_cheaper20",
            "regress1",
            "aa_failcost",
            "drift10_failcost",
            "cheaper20_failcost",
            "worse10_failcost",
        ),
    ),
    (10, 3, "none", ("aa", "cheaper20", "worse10_cheaper20")),
    (20, 3, "pooled", ("aa", "drift10", "cheaper20", "worse10_cheaper20")),
    (
        50,
        1,
        "pooled",
        ("aa", "drift5", "drift10", "drift20", "drift30", "cheaper20", "worse10_cheaper20"),
    ),
    (50, 1, "none", ("cheaper20", "worse10_cheaper20")),
    (200, 1, "pooled", ("drift10", "cheaper20", "worse10_cheaper20")),
)
"""``--suite``: every row issue 23 asks for, at its suite size, first-look runs and history, plus
large drift (``drift20``/``drift30``, no target in the issue; held to drift10's limit) at 10 and
50 tasks."""


def _rows(jobs: list[Job], counts: list[Counts]) -> list[dict]:
    total: dict[tuple, list[int]] = {}
    reasons: dict[tuple, dict[str, int]] = {}
    stops: dict[tuple, dict[int, int]] = {}
    per_seed: dict[tuple, dict[int, list[int]]] = {}
    for job, c in zip(jobs, counts, strict=True):
        key = (job.policy, job.scenario.name, job.scenario.tasks, job.runs, job.history)
        acc = total.setdefault(key, [0, 0, 0, 0, 0])
        for i, x in enumerate(c[:4]):
            acc[i] += x
        acc[4] = max(acc[4], c[4])
        for r, count in c[5].items():
            reasons.setdefault(key, {})[r] = reasons.setdefault(key, {}).get(r, 0) + count
        for k, count in c[6].items():
            stops.setdefault(key, {})[k] = stops.setdefault(key, {}).get(k, 0) + count
        tally = per_seed.setdefault(key, {}).setdefault(job.seed, [0, 0])
        tally[0] += c[0]
        tally[1] += c[3]
    rows = []
    for key, v in total.items():
        pol, scen, tasks, runs, history = key
        rate = v[0] / v[3]
        rows.append(
            {
                "policy": pol,
                "scenario": scen,
                "tasks": tasks,
                "runs": runs,
                "history": history,
                "promote_rate": rate,
                "ci95": 1.96 * (rate * (1 - rate) / v[3]) ** 0.5,
                "per_seed": {
                    str(k): p / n
                    for k, (p, n) in per_seed[(pol, scen, tasks, runs, history)].items()
                },
                "mean_candidate_cells": v[1] / v[3],
                "max_candidate_cells": v[4],
                "mean_comparator_cells": v[2] / v[3],
                "generations": v[3],
                # why the generations that did not promote did not (a share of all generations;
                # several reasons can hold at once, so the combinations of more than one too)
                # and the share stopping at each look
                "not_promoted_because": {
                    r: reasons.get(key, {}).get(r, 0) / v[3]
                    for r in REASONS
                    if reasons.get(key, {}).get(r, 0)
                },
                "not_promoted_combinations": {
                    r: n / v[3] for r, n in sorted(reasons.get(key, {}).items()) if "+" in r
                },
                "stopped_at_look": {
                    str(k): n / v[3] for k, n in sorted(stops.get(key, {}).items())
                },
            }
        )
    return rows


def main() -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--generations", type=int, default=1000, help="Monte-Carlo size per seed")
    parser.add_argument("--seed", type=int, default=20260110)
    parser.add_argument(
        "--seeds", type=int, default=1, help="independent seeds (seed, seed+1, ...), pooled"
    )
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--json", action="store_true", help='print {"rows": [...]} only')
    parser.add_argument("--ni-check", action="store_true", help="also check the NI bound level")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated")
    parser.add_argument("--tasks", default="10", help="comma-separated suite sizes")
    parser.add_argument(
        "--histories", default="pooled", help=f"comma-separated of {', '.join(HISTORIES)}"
    )
    parser.add_argument(
        "--suite",
        action="store_true",
        help="issue 23's rows (10/20/50/200 tasks, both histories) under --policies",
    )
    parser.add_argument(
        "--runs", type=int, default=RUNS, help=f"runs per task at the first look (default {RUNS})"
    )
    parser.add_argument(
        "--canaries",
        type=int,
        default=CANARIES_PER_TASK,
        help="fresh gate canaries per task in the pooled history (default: the planner's "
        f"reuse.gate_canaries_per_task, {CANARIES_PER_TASK})",
    )
    parser.add_argument(
        "--frontier",
        action="store_true",
        help="sweep paired_v2 designs (runs, looks, margin, level) and print the frontier of "
        "power against worse10_cheaper20 at <= 40 candidate cells",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a field of the paired (v3) policy, e.g. --set resolve_error=0.12",
    )
    args = parser.parse_args()
    if args.set:
        fields = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)}
        POLICIES["paired"] = PolicyConfig.model_validate(
            {**POLICIES["paired"].model_dump(), **fields, "name": "paired"}
        )
    if args.generations < 1:
        parser.error("--generations must be at least 1")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.frontier:
        frontier(args)
        return
    n = args.generations
    started = time.perf_counter()
    seeds = [args.seed + i for i in range(args.seeds)]
    if args.suite:
        grid = [(t, r, h, sc) for t, r, h, sc in SUITE]
    else:
        grid = [
            (int(t), args.runs, h, tuple(args.scenarios.split(",")))
            for t in args.tasks.split(",")
            for h in args.histories.split(",")
        ]
    jobs = []
    for pol in args.policies.split(","):
        for tasks, runs, history, scens in grid:
            cfg = POLICIES[pol]
            if cfg.min_runs > runs:
                cfg = cfg.model_copy(update={"min_runs": runs})
            for s in scens:
                scen = dataclasses.replace(SCENARIOS[s], tasks=tasks)
                for seed in seeds:
                    for first in range(0, n, CHUNK):
                        jobs.append(
                            Job(
                                pol,
                                cfg,
                                scen,
                                seed,
                                first,
                                min(CHUNK, n - first),
                                runs,
                                history,
                                args.canaries,
                            )
                        )
    ni_args = [
        (tasks, pr, comp, max(200, n // 2), args.seed)
        for tasks in (5, 10, 20, 50, 100)
        for pr in ("lo", "hi")
        for comp in (3, 12)
    ]
    # the largest suites first, so the pool's tail is short
    order = sorted(range(len(jobs)), key=lambda i: -jobs[i].scenario.tasks)
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        done = list(pool.map(run_job, [jobs[i] for i in order], chunksize=1))
        ni = list(pool.map(ni_check_job, ni_args, chunksize=1)) if args.ni_check else []
    counts: list[Counts] = [(0, 0, 0, 0, 0, {}, {})] * len(jobs)
    for i, c in zip(order, done, strict=True):
        counts[i] = c
    rows = _rows(jobs, counts)
    elapsed = time.perf_counter() - started
    if args.json:
        print(json.dumps({"rows": rows, "seconds": round(elapsed)}, indent=1))
        return
    print(
        f"gate calibration: {n} generations per seed, seeds {seeds}, {elapsed:.0f} s "
        "(± = 95 % binomial interval over the pooled seeds)"
    )
    head = (
        "policy     tasks runs history scenario             promote        per seed      "
        "cand  max  comp"
    )
    print(f"  {head}")
    for r in rows:
        seeds_txt = " ".join(f"{v:.1%}" for v in r["per_seed"].values())
        print(
            f"  {r['policy']:<10} {r['tasks']:>5} {r['runs']:>4} {r['history']:<7} "
            f"{r['scenario']:<20} {r['promote_rate']:>6.1%} ±{r['ci95']:.1%}  {seeds_txt:<14} "
            f"{r['mean_candidate_cells']:>6.1f} {r['max_candidate_cells']:>4} "
            f"{r['mean_comparator_cells']:>5.1f}"
        )
    if ni:
        level = 1 - PolicyConfig(name="paired", max_looks=1).resolve_error
        print(f"\nv3 resolve bound at a true drop = margin, one look (nominal ≤ {1 - level:.0%})")
        for tasks, pr, comp, hits, m in ni:
            print(f"  {tasks:>3} tasks p {pr:<2} comparator runs {comp:>2}: {hits / m:6.1%}")


if __name__ == "__main__":
    main()
