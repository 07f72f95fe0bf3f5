"""Dagster's per-cell cost on the run path, next to real agent-session lengths.

A generation of the demo where every arm's agent is a ``command`` agent that sleeps S seconds
(default 60, the length of a short real agent session) and changes nothing, so each cell is one
S-second session plus grading. The generation runs through Dagster's run queue exactly as
``wfbench evolve`` does by default: queued runs, ``limits.agent_sessions`` = W of them at once
(the ``agent_sessions`` pool), launched by a ``dagster-daemon`` that ``evolve`` starts for its own
duration, each run in its own process; a run is one cell, or a ``cell_batch`` of several cells of
one task paid one after another (each cell its own in-process run).

Printed side by side:

* the cell phase's wall time (first cell run start to last cell run end, Dagster's run stats)
  next to its ideal, ``sum(cell records' duration_s) / W`` (every slot busy with a cell's own work
  all the time): the ratio is what Dagster's orchestration costs a generation of this shape;
* per cell: the cell's own work (the record's ``duration_s``: sandbox, session, grading), the
  Dagster run around it (run end - run start: process start, code load, event log writes), and
  the slot time lost between runs (queue to launch: daemon tick, run-worker start);
* the same in seconds per cell, so it can be compared with a session's length.

Each measurement uses a fresh temporary copy of ``tasks/`` (only the first K tasks kept), a fresh
Dagster instance (a copy of ``dagster_home/dagster.yaml``) and a fresh artifact root.

With ``--baseline DIR`` (another worktree with its own ``.venv``, e.g. main's HEAD) the same
generation is measured first with that tree's code and ``dagster.yaml``, and the per-cell stage
medians are printed side by side: slot free → agent starts, and the orchestration overhead
(target: median <= 1.5 s on a quiet machine), with the mean slot time per cell that is not its
work (where a batch's run start-up, paid once for several cells, shows).

Run: ``.venv/bin/python bench/run_path.py [--sleep 60] [--tasks 3] [--runs 2] [--sessions 3]
[--baseline DIR] [--json]``. With the defaults: 3 tasks x the demo's 4 implementation arms x 2
runs = 24 cells of 60 s on 3 slots, an ideal cell phase of about 8 minutes.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(os.environ.get(TREE_ENV := "WFBENCH_BENCH_TREE") or Path(__file__).parent.parent)
REPO = REPO.resolve()
"""The tree whose code (and ``dagster_home/dagster.yaml``) is measured: this one, or the one
``--baseline`` names (this script re-runs itself there with that tree's ``.venv``)."""
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import dagster as dg  # noqa: E402
from generation import GEN_TAG, Env, Generation, fresh_env, run_generation  # noqa: E402

try:  # the tree measured may predate cell batches (``--baseline``)
    from bench_assets.driver.cellbatch import CELL_BATCH_JOB, CELL_BATCH_TAG
except ImportError:
    CELL_BATCH_JOB, CELL_BATCH_TAG = "cell_batch", "wfbench/cell_batch"

STAGES = (
    dg.DagsterEventType.RUN_ENQUEUED,
    dg.DagsterEventType.RUN_STARTING,
    dg.DagsterEventType.RUN_START,
    dg.DagsterEventType.ASSET_MATERIALIZATION,
    dg.DagsterEventType.RUN_SUCCESS,
)
TARGET_OVERHEAD_S = 1.5
"""Issue 24: median per-cell orchestration overhead on a quiet machine."""


def _log(msg: str) -> None:
    print(f"[run_path] {msg}", file=sys.stderr, flush=True)


def _edit(tasks: int, runs: int, sessions: int, sleep_s: float):
    def edit(raw: dict[str, Any]) -> None:
        raw["runs"] = runs
        raw["policy"]["min_runs"] = runs
        raw["limits"]["agent_sessions"] = sessions
        for arm in raw["arms"].values():
            arm["agent"] = {
                "adapter": "command",
                "argv": ["sh", "-c", f"sleep {sleep_s:g}"],
                "version": f"sleep-{sleep_s:g}",
            }

    return edit


def _keep_tasks(env: Env, k: int) -> list[str]:
    """Delete every task folder but the first ``k`` (sorted), so the suite has k tasks."""
    tasks = sorted(p.name for p in env.tasks.iterdir() if (p / "task.yaml").is_file())
    for name in tasks[k:]:
        shutil.rmtree(env.tasks / name)
    return tasks[:k]


def measure(gen: Generation, sessions: int) -> dict[str, Any]:
    cells = sorted(gen.of("cell"), key=lambda r: r.start)
    records = gen.records
    if not cells or not records:
        raise SystemExit("run_path: the generation ran no cells; nothing to measure")
    phase_start = min(r.start for r in cells)
    phase_end = max(r.end for r in cells)
    phase = phase_end - phase_start
    work = sum(float(r["duration_s"]) for r in records)
    run_sum = sum(r.duration for r in cells)
    sessions_s = [float(r["agent_duration_s"]) for r in records if r.get("agent_duration_s")]
    n = len(cells)
    ideal = work / sessions
    # Slot time lost at the phase's ends: the W first cell starts after the phase began (slots
    # not yet busy) and the W last cell ends before it ended (slots idle at the tail).
    head = sum(r.start - phase_start for r in cells[:sessions])
    tail = sum(phase_end - e for e in sorted(r.end for r in cells)[-sessions:])
    return {
        "cells": n,
        "records": len(records),
        "sessions": sessions,
        "generation_wall_s": gen.wall_s,
        "cell_phase_wall_s": phase,
        "ideal_s": ideal,
        "phase_over_ideal": phase / ideal if ideal else None,
        "per_cell": {
            "session_s_median": statistics.median(sessions_s) if sessions_s else None,
            "work_s_median": statistics.median(float(r["duration_s"]) for r in records),
            "run_s_median": statistics.median(r.duration for r in cells),
            "in_run_overhead_s": (run_sum - work) / n,
            "between_runs_s": (sessions * phase - run_sum) / n,
            "total_overhead_s": (sessions * phase - work) / n,
            "head_idle_s": head / n,
            "tail_idle_s": tail / n,
        },
    }


def _times(instance: dg.DagsterInstance, run_id: str) -> dict[Any, float]:
    """The first timestamp of each of :data:`STAGES` the run has."""
    t: dict[Any, float] = {}
    for kind in STAGES:
        ev = instance.get_records_for_run(run_id, of_type=kind).records
        if ev:
            t[kind] = ev[0].timestamp
    return t


def stages(env: Env, generation: str, records: list[dict[str, Any]]) -> dict[str, float | None]:
    """Where a cell run's time outside its own work goes, median over the generation's cells.

    A slot is held by a queued run: a cell's own run, or a ``cell_batch`` run paying several
    cells of a task one after another, each an in-process run of its own. ``slot free →
    launched``: from the moment a slot was free (the latest end of an earlier slot-holding run,
    or the run's enqueue if a slot was already free) to the daemon launching the run
    (``RUN_STARTING``: dequeue tick and the run launcher's call); ``launched → started``: the run
    worker's process start and code load, until ``RUN_START``; ``started → cell starts``: the
    step's own start-up (inputs read, identity, reuse check) until ``run_cell`` starts. A batch's
    first cell takes the batch's launch; a later cell's slot is free when the cell before it in
    the batch ended, and it is launched and started at that moment (no process start: all of its
    start-up is ``started → cell starts``).

    ``slot free → agent starts``: until the agent process starts (the cell's start, from its
    materialization's time less the record's ``duration_s``, plus its ``prepare_s``: worktree and
    skills). ``orchestration overhead``: the slot's time that is not the cell's own work, from
    the slot being free to the run's end (a batch's last cell: the batch run's end), less the
    record's ``duration_s``.
    """
    E = dg.DagsterEventType
    by_cell = {(r["task"], r["cell"]): r for r in records}
    with dg.DagsterInstance.from_config(str(env.home)) as instance:
        recs = instance.get_run_records(dg.RunsFilter(tags={GEN_TAG: generation}))
        holders: dict[str, dict[Any, float]] = {}  # slot-holding runs: cell runs and batches
        cells: list[dict[Any, Any]] = []
        for rec in recs:
            run = rec.dagster_run
            if run.job_name == CELL_BATCH_JOB:
                holders[run.run_id] = _times(instance, run.run_id)
                continue
            tags = run.tags
            if "dagster/partition/cell" not in tags:
                continue
            record = by_cell.get(
                (tags.get("dagster/partition/task"), tags["dagster/partition/cell"])
            )
            if record is None:
                continue
            t: dict[Any, Any] = {**_times(instance, run.run_id), "record": record}
            t["batch"] = tags.get(CELL_BATCH_TAG)
            if t["batch"] is None:
                holders[run.run_id] = t
            cells.append(t)
    ends = sorted(h[E.RUN_SUCCESS] for h in holders.values() if E.RUN_SUCCESS in h)

    def freed_at(h: dict[Any, float]) -> float:
        return max([e for e in ends if e <= h[E.RUN_STARTING]] + [h[E.RUN_ENQUEUED]])

    in_batch: dict[str, list[dict[Any, Any]]] = {}
    for c in cells:
        if c["batch"] is not None:
            in_batch.setdefault(c["batch"], []).append(c)
    react, boot, step, to_agent, overhead = [], [], [], [], []
    b_react, b_boot, b_op, b_first, b_gap, b_end = [], [], [], [], [], []
    for bid, kids in in_batch.items():
        batch = holders.get(bid, {})
        kids = sorted(kids, key=lambda x: x.get(E.RUN_START, 0.0))
        if not all(k in batch for k in STAGES if k != E.ASSET_MATERIALIZATION):
            continue
        if not all(E.RUN_START in k and E.ASSET_MATERIALIZATION in k for k in kids):
            continue
        starts = [k[E.ASSET_MATERIALIZATION] - float(k["record"]["duration_s"]) for k in kids]
        b_react.append(batch[E.RUN_STARTING] - freed_at(batch))
        b_boot.append(batch[E.RUN_START] - batch[E.RUN_STARTING])
        b_op.append(kids[0][E.RUN_START] - batch[E.RUN_START])
        b_first.append(starts[0] - kids[0][E.RUN_START])
        b_gap += [
            s - k[E.RUN_SUCCESS]
            for k, s in zip(kids[:-1], starts[1:], strict=True)
            if E.RUN_SUCCESS in k
        ]
        if E.RUN_SUCCESS in kids[-1]:
            b_end.append(batch[E.RUN_SUCCESS] - kids[-1][E.RUN_SUCCESS])
    for c in cells:
        if E.RUN_START not in c or E.ASSET_MATERIALIZATION not in c or E.RUN_SUCCESS not in c:
            continue
        end = c[E.RUN_SUCCESS]
        if c["batch"] is None:
            if E.RUN_STARTING not in c or E.RUN_ENQUEUED not in c:
                continue
            freed, launched, started = freed_at(c), c[E.RUN_STARTING], c[E.RUN_START]
        else:
            batch = holders.get(c["batch"], {})
            if not all(k in batch for k in STAGES if k != E.ASSET_MATERIALIZATION):
                continue
            siblings = sorted(in_batch[c["batch"]], key=lambda x: x.get(E.RUN_START, 0.0))
            i = siblings.index(c)
            if i == 0:
                freed, launched, started = (
                    freed_at(batch),
                    batch[E.RUN_STARTING],
                    batch[E.RUN_START],
                )
            else:
                freed = launched = started = siblings[i - 1].get(E.RUN_SUCCESS, c[E.RUN_START])
            if i == len(siblings) - 1:
                end = batch[E.RUN_SUCCESS]
        rec = c["record"]
        work = float(rec["duration_s"])
        cell_start = c[E.ASSET_MATERIALIZATION] - work
        agent_start = cell_start + float((rec.get("timings") or {}).get("prepare_s", 0.0))
        react.append(launched - freed)
        boot.append(started - launched)
        step.append(cell_start - started)
        to_agent.append(agent_start - freed)
        overhead.append(end - freed - work)
    if not overhead:
        return {}

    def med(xs: list[float]) -> float | None:
        return statistics.median(xs) if xs else None

    return {
        "slot_free_to_launched_s": statistics.median(react),
        "launched_to_started_s": statistics.median(boot),
        "started_to_cell_s": statistics.median(step),
        "slot_free_to_agent_s": statistics.median(to_agent),
        "orchestration_overhead_s": statistics.median(overhead),
        "launches": sum(1 for h in holders.values() if E.RUN_STARTING in h),
        "batches": len(in_batch),
        "batch": {
            "slot_free_to_launched_s": med(b_react),
            "launched_to_started_s": med(b_boot),
            "started_to_first_cell_run_s": med(b_op),
            "first_cell_run_to_cell_s": med(b_first),
            "cell_end_to_next_cell_s": med(b_gap),
            "last_cell_end_to_batch_end_s": med(b_end),
        },
    }


def print_report(m: dict[str, Any], sleep_s: float) -> None:
    pc = m["per_cell"]
    print(
        f"Run path: {m['cells']} cells of a {sleep_s:g} s command-agent session "
        f"on {m['sessions']} agent slots (queued runs: a cell, or a batch of a task's cells)"
    )
    la = m.get("load_average")
    if la:
        print(
            f"(1-minute load average {la['before']:.1f} before, {la['after']:.1f} after, on "
            f"{la['cpus']} CPUs: process start-up, and so Dagster's per-run cost, grows with "
            "load)"
        )
    print()
    print(f"| {'measure':<46} | {'seconds':>9} | {'ratio':>7} |")
    print(f"| {'-' * 46} | {'-' * 9}:| {'-' * 7}:|")

    def row(label: str, value: float | None, ratio: float | None = None) -> None:
        v = "—" if value is None else f"{value:9.1f}"
        r = "" if ratio is None else f"{ratio:6.3f}x"
        print(f"| {label:<46} | {v:>9} | {r:>7} |")

    row("ideal: sum(cell work) / slots", m["ideal_s"], 1.0)
    row(
        "cell phase wall (first run start→last run end)",
        m["cell_phase_wall_s"],
        m["phase_over_ideal"],
    )
    row("whole generation (evolve call)", m["generation_wall_s"])
    print()
    print(f"| {'per cell (median or mean)':<46} | {'seconds':>9} | {'of work':>7} |")
    print(f"| {'-' * 46} | {'-' * 9}:| {'-' * 7}:|")
    work = pc["work_s_median"]
    row("agent session (record.agent_duration_s)", pc["session_s_median"])
    row("cell work (record.duration_s)", work, 1.0)
    row("Dagster run (end - start)", pc["run_s_median"], pc["run_s_median"] / work)
    row("overhead inside the run (mean)", pc["in_run_overhead_s"], pc["in_run_overhead_s"] / work)
    row("slot idle between runs (mean)", pc["between_runs_s"], pc["between_runs_s"] / work)
    row("total Dagster cost per cell (mean)", pc["total_overhead_s"], pc["total_overhead_s"] / work)
    if "head_idle_s" in pc:
        row(
            "  of which: slots not yet busy at the start",
            pc["head_idle_s"],
            pc["head_idle_s"] / work,
        )
        row("  of which: slots idle at the tail", pc["tail_idle_s"], pc["tail_idle_s"] / work)
    if m.get("stages"):
        print()
        print(f"| {'between runs, by stage (median)':<46} | {'seconds':>9} | {'':>7} |")
        print(f"| {'-' * 46} | {'-' * 9}:| {'-' * 7}:|")
        for key, label in (
            ("slot_free_to_launched_s", "slot free → daemon launches the next run"),
            ("launched_to_started_s", "launched → run worker started (process, code)"),
            ("started_to_cell_s", "run started → cell starts (inputs, identity)"),
            ("slot_free_to_agent_s", "slot free → agent process starts"),
            ("orchestration_overhead_s", "orchestration overhead per cell (slot − work)"),
        ):
            row(label, m["stages"].get(key))
        batch = m["stages"].get("batch") or {}
        if m["stages"].get("batches"):
            print()
            title = f"a batch's run, by stage (median of {m['stages']['batches']})"
            print(f"| {title:<46} | {'seconds':>9} | {'':>7} |")
            print(f"| {'-' * 46} | {'-' * 9}:| {'-' * 7}:|")
            for key, label in (
                ("slot_free_to_launched_s", "slot free → daemon launches the batch"),
                ("launched_to_started_s", "launched → batch run started (process, code)"),
                ("started_to_first_cell_run_s", "batch started → first cell's run starts"),
                ("first_cell_run_to_cell_s", "first cell's run starts → cell starts"),
                ("cell_end_to_next_cell_s", "a cell's run ends → the next cell starts"),
                ("last_cell_end_to_batch_end_s", "last cell's run ends → batch run ends"),
            ):
                row(label, batch.get(key))
        print(f"\nslot-holding runs launched: {m['stages'].get('launches')}")


def _baseline(args: argparse.Namespace, tree: Path) -> dict[str, Any]:
    """This script's measurement of another tree, in its own process and virtualenv."""
    tree = tree.resolve()
    argv = [str(tree / ".venv" / "bin" / "python"), str(Path(__file__).resolve()), "--json"]
    argv += ["--sleep", str(args.sleep), "--tasks", str(args.tasks), "--runs", str(args.runs)]
    argv += ["--sessions", str(args.sessions)]
    _log(f"measuring the tree {tree}")
    env = {**os.environ, TREE_ENV: str(tree), "PYTHONPATH": str(tree)}
    proc = subprocess.run(argv, cwd=tree, env=env, stdout=subprocess.PIPE, check=False)
    if proc.returncode:
        raise SystemExit(f"run_path: the measurement of {tree} failed (exit {proc.returncode})")
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _wall_rows(m: dict[str, Any]) -> dict[str, float | None]:
    """The wall-clock measures of one tree: what a generation's real clock pays."""
    pc = m["per_cell"]
    return {
        "phase_over_ideal": m["phase_over_ideal"],
        "total_overhead_s": pc["total_overhead_s"],
        "head_idle_s": pc.get("head_idle_s"),
        "tail_idle_s": pc.get("tail_idle_s"),
        "generation_wall_s": m["generation_wall_s"],
        "launches": m["stages"].get("launches"),
    }


def print_comparison(trees: list[tuple[str, dict[str, Any]]]) -> None:
    """Each tree's per-cell medians and wall-clock measures side by side (the last is this
    tree), the target, and which measures this tree improved against every other tree."""
    names = [n for n, _ in trees]
    width = max(9, *(len(n) for n in names))
    head = " | ".join(f"{n:>{width}}" for n in names)
    rule = " | ".join("-" * (width - 1) + ":" for _ in names)
    print()
    print(f"| {'per cell (s), median unless said':<46} | {head} |")
    print(f"| {'-' * 46} | {rule} |")

    def line(label: str, values: list[Any], fmt: str) -> None:
        cells = " | ".join(
            f"{'—':>{width}}" if v is None else f"{format(v, fmt):>{width}}" for v in values
        )
        print(f"| {label:<46} | {cells} |")

    for key, label in (
        ("slot_free_to_launched_s", "slot free → daemon launches the run"),
        ("launched_to_started_s", "launched → run worker started"),
        ("started_to_cell_s", "run started → cell starts"),
        ("slot_free_to_agent_s", "slot free → agent process starts"),
        ("orchestration_overhead_s", "orchestration overhead per cell (median)"),
    ):
        line(label, [m["stages"].get(key) for _, m in trees], ".2f")
    walls = [_wall_rows(m) for _, m in trees]
    print(f"| {'**wall clock**':<46} | {' | '.join(' ' * width for _ in names)} |")
    for key, label, fmt in (
        ("phase_over_ideal", "cell phase wall / ideal", ".3f"),
        ("total_overhead_s", "slot time not a cell's work, mean per cell", ".2f"),
        ("head_idle_s", "  of which: slots not yet busy at the start", ".2f"),
        ("tail_idle_s", "  of which: slots idle at the tail", ".2f"),
        ("launches", "slot-holding runs launched", "d"),
        ("generation_wall_s", "whole generation (s)", ".1f"),
    ):
        line(label, [w[key] for w in walls], fmt)
    line("1-minute load average (after)", [m["load_average"]["after"] for _, m in trees], ".1f")
    this, others = walls[-1], walls[:-1]
    over = trees[-1][1]["stages"].get("orchestration_overhead_s")
    la = trees[-1][1].get("load_average", {})
    print(
        f"\ntarget: median orchestration overhead <= {TARGET_OVERHEAD_S} s on a quiet machine: "
        f"{over:.2f} s here at a 1-minute load average of {la.get('after', 0):.1f} on "
        f"{la.get('cpus')} CPUs ({'met' if over <= TARGET_OVERHEAD_S else 'not met'})"
    )
    for key, label in (
        ("phase_over_ideal", "cell phase wall / ideal"),
        ("total_overhead_s", "mean slot time not a cell's work"),
    ):
        mine = float(this[key] or 0.0)
        theirs = [(n, float(w[key] or 0.0)) for (n, _), w in zip(trees[:-1], others, strict=True)]
        better = [n for n, v in theirs if mine < v]
        worse = [n for n, v in theirs if mine >= v]
        verdict = (
            f"improved on {', '.join(better)}"
            if not worse
            else f"NOT improved on {', '.join(worse)}"
        )
        print(f"{label}: {mine:.3f} here; {verdict}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sleep", type=float, default=60.0, help="session length in s (default 60)")
    ap.add_argument("--tasks", type=int, default=3, help="demo tasks kept (default 3)")
    ap.add_argument("--runs", type=int, default=2, help="runs per arm (default 2)")
    ap.add_argument("--sessions", type=int, default=3, help="agent_sessions slots (default 3)")
    ap.add_argument("--workdir", type=Path, default=None, help="keep the instance here")
    ap.add_argument("--json", action="store_true", help="print the measurements as JSON")
    ap.add_argument(
        "--baseline",
        type=Path,
        action="append",
        default=[],
        help="another worktree (with its .venv), e.g. main's HEAD; may be given more than once: "
        "each is measured first, the same way, one after another, and printed side by side",
    )
    args = ap.parse_args()
    before = [(str(tree), _baseline(args, tree)) for tree in args.baseline]

    os.environ.pop("WFBENCH_IN_PROCESS", None)  # the run path is what is measured
    scratch = args.workdir or Path(tempfile.mkdtemp(prefix="wfbench-runpath-"))
    scratch.mkdir(parents=True, exist_ok=True)
    env = fresh_env(
        scratch,
        f"sleep{args.sleep:g}-{int(time.time())}",
        REPO / "tasks",
        _edit(args.tasks, args.runs, args.sessions, args.sleep),
    )
    kept = _keep_tasks(env, args.tasks)
    _log(f"tasks {', '.join(kept)}; instance {env.home}")
    load_before = os.getloadavg()[0]
    gen = run_generation(env)
    _log(f"generation {gen.result.generation}: {gen.wall_s:.1f} s")
    m = measure(gen, args.sessions)
    m["sleep_s"] = args.sleep
    m["stages"] = stages(env, gen.result.generation, gen.records)
    m["load_average"] = {"before": load_before, "after": os.getloadavg()[0], "cpus": os.cpu_count()}
    if args.json:
        print(json.dumps(m if not before else {"baselines": dict(before), "this": m}, indent=2))
    else:
        for name, b in before:
            print(f"## baseline ({name})")
            print_report(b, args.sleep)
            print()
        if before:
            print(f"## this tree ({REPO})")
        print_report(m, args.sleep)
        if before:
            print_comparison([*before, (str(REPO), m)])
    if args.workdir is None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
