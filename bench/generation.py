"""Whole generations (`wfbench evolve`): what generation 2 pays, and how well the pools overlap.

Three measurements, printed side by side in one run, each on a fresh temporary copy of `tasks/`,
a fresh temporary Dagster instance (`DAGSTER_HOME` holding a copy of `dagster_home/dagster.yaml`)
and a fresh temporary artifact root (`WFBENCH_ARTIFACTS`):

1. **Reuse.** `evolve` twice on the demo. The demo queue holds two candidates: generation 1 pays
   every cell; generation 2 should pay only the candidate cells plus `reuse.canaries` canaries per
   comparator arm. Paid/total comes from the planner's result and is cross-checked against the
   cell runs Dagster actually recorded for each generation.
2. **Orchestration cost of a whole generation.** The wall time of demo generation 1 next to a
   bare sequential script doing the same subprocess work with plain ``subprocess.run``: per task
   one input build (binding, oracle snapshot, sanitized template, graph: `build_cell_inputs` on an
   empty store), then per cell `cp -a` of the sanitized template, `git apply` of the replayed
   patch, the verify command and the oracle command (the last three inside bubblewrap with the
   harness's own flags, `sandbox._bwrap_argv`). Target: evolve / bare <= 1.3x. evolve runs
   `limits.agent_sessions` cells at once, so it can come out below 1.
3. **Overlap of graph builds with agent sessions.** Generation 1 again, with `graph.indexer:
   command` set to a self-contained `python -c` indexer that sleeps S seconds and then writes a
   file listing as `/out/graph.json` (the editable source tree is not mounted in the sandbox, so
   the real indexer module is not importable there). S is chosen from measurement 1 so that one
   task's input run lasts about as long as its cells take on the agent workers (clamped to 3-6 s;
   `--sleep` overrides). The overlap phase (from the end of the `candidate_overlay` run to the end
   of the last input or cell run) is compared with max(sum cell / agent workers, sum graph /
   graph workers) (target <= 1.15x) and with the serial order sum graph + sum cell.

Method: sum cell = sum of `record.duration_s` over the generation's records
(`<artifacts>/cells/**/record.json`); sum graph = sum of the Dagster run durations
(`get_run_stats`: end - start) of the generation's runs (tag `wfbench/generation`) whose steps
include `sanitized_graphs` (each such run also materializes that task's binding and oracle
snapshot, exactly what occupies a graph_build worker). Cell run durations are shown too: their
excess over the records is Dagster's per-run cost. A dependency bound is printed as well: a
task's cells cannot start before its inputs are ready, so with the input runs in completion order
g_1..g_n and per-task cell sums c_1..c_n, wall >= max_k (g_1 + ... + g_k + (c_k + ... + c_n) / W).
Diagnostics: the share of the agent workers' time (W x first cell run start to last cell run end)
spent inside cell runs, and machine-wide CPU use over each timed section (/proc/stat), since the
agent workers, the graph worker and the parent all share the machine's cores.

Run: `.venv/bin/python bench/generation.py [--json] [--skip-slow] [--sleep S]`.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import dagster as dg  # noqa: E402
import yaml  # noqa: E402

from bench_assets.agents.replay import Prediction, load_predictions  # noqa: E402
from bench_assets.cells.pipeline import CellInputs, build_cell_inputs  # noqa: E402
from bench_assets.config.models import ReplayAgent  # noqa: E402
from bench_assets.driver.evolve import GEN_TAG, EvolveResult, evolve  # noqa: E402
from bench_assets.inputs.sanitize import template_tree  # noqa: E402
from bench_assets.kernel.fsutil import make_tree_writable, remove_tree  # noqa: E402
from bench_assets.kernel.store import ArtifactStore  # noqa: E402
from bench_assets.runner import trusted as runner_mod  # noqa: E402
from bench_assets.sandbox import process as sandbox  # noqa: E402
from bench_assets.tasks.catalog import Benchmark, load_benchmark  # noqa: E402

TARGET_BARE = 1.3
TARGET_OVERLAP = 1.15
SLEEP_RANGE = (3.0, 6.0)
INPUT_STEP = "sanitized_graphs"
CELL_STEPS = ("comparator_cells", "candidate_cells")
PRE_STEPS = ("incumbent_skills", "candidate_overlay")

SLOW_INDEXER = """\
import json, os, sys, time
time.sleep(float(sys.argv[1]))
root, out = sys.argv[2], sys.argv[3]
files = sorted(
    os.path.relpath(os.path.join(d, f), root)
    for d, _, names in os.walk(root)
    for f in names
)
graph = {"indexer": "bench-slow-listing", "files": files,
         "stats": {"nodes": len(files), "edges": 0}}
with open(os.path.join(out, "graph.json"), "w") as fh:
    json.dump(graph, fh)
"""


def _log(msg: str) -> None:
    print(f"[bench/generation] {msg}", file=sys.stderr, flush=True)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def _fmt_ratio(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.2f}x"


def _verdict(r: float | None, target: float) -> str:
    if r is None:
        return "n/a"
    return "met" if r <= target else "NOT met"


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far, from /proc/stat (0, 0 if unreadable)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return 0, 0
    values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


@dataclass
class Cpu:
    """Machine-wide CPU use over an interval."""

    busy_fraction: float
    core_seconds: float

    @classmethod
    def between(cls, before: tuple[int, int], after: tuple[int, int]) -> "Cpu":
        busy, total = after[0] - before[0], after[1] - before[1]
        hz = os.sysconf("SC_CLK_TCK")
        return cls(busy / total if total else 0.0, busy / hz)


def background_load(seconds: float = 2.0) -> float:
    """Machine busy fraction while this script sleeps: load from anything else on the host."""
    before = cpu_jiffies()
    time.sleep(seconds)
    return Cpu.between(before, cpu_jiffies()).busy_fraction


# ------------------------------------------------------------------------------------------------
# Fresh environments and one generation


@dataclass
class Env:
    """A temporary tasks copy, Dagster home and artifact root."""

    tasks: Path
    home: Path
    artifacts: Path


def fresh_env(
    scratch: Path, name: str, tasks_src: Path, edit: Callable[[dict[str, Any]], None] | None = None
) -> Env:
    root = scratch / name
    root.mkdir()
    tasks = root / "tasks"
    shutil.copytree(tasks_src, tasks, ignore=shutil.ignore_patterns("__pycache__"))
    if edit is not None:
        bench_yaml = tasks / "bench.yaml"
        raw = yaml.safe_load(bench_yaml.read_text(encoding="utf-8"))
        edit(raw)
        bench_yaml.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    home = root / "dagster_home"
    home.mkdir()
    shutil.copy2(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return Env(tasks=tasks, home=home, artifacts=root / "artifacts")


@dataclass
class RunTime:
    """One Dagster run of a generation: what it materialized and when."""

    kind: str  # "pre" | "inputs" | "cell" | "other"
    task: str | None
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class Generation:
    """One timed `evolve` call and what its instance and artifacts say about it."""

    result: EvolveResult
    wall_s: float
    started: float
    finished: float
    cpu: Cpu
    runs: list[RunTime] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)

    def of(self, kind: str) -> list[RunTime]:
        return [r for r in self.runs if r.kind == kind]

    @property
    def cell_sum(self) -> float:
        return sum(float(r["duration_s"]) for r in self.records)

    @property
    def graph_sum(self) -> float:
        return sum(r.duration for r in self.of("inputs"))

    @property
    def phase_start(self) -> float:
        pre = self.of("pre")
        return max(r.end for r in pre) if pre else self.started

    @property
    def phase_end(self) -> float:
        work = self.of("inputs") + self.of("cell")
        return max(r.end for r in work) if work else self.phase_start

    @property
    def phase_s(self) -> float:
        return self.phase_end - self.phase_start


def _classify(steps: list[str]) -> str:
    if INPUT_STEP in steps:
        return "inputs"
    if any(s in CELL_STEPS for s in steps):
        return "cell"
    if any(s in PRE_STEPS for s in steps):
        return "pre"
    return "other"


def run_generation(env: Env) -> Generation:
    """Call `evolve` in-process against the env's instance and collect its runs and records."""
    os.environ["DAGSTER_HOME"] = str(env.home)
    os.environ["WFBENCH_ARTIFACTS"] = str(env.artifacts)
    started = time.time()
    jiffies = cpu_jiffies()
    t0 = time.perf_counter()
    result = evolve(str(env.tasks), artifact_root=str(env.artifacts), progress=lambda _m: None)
    wall = time.perf_counter() - t0
    cpu = Cpu.between(jiffies, cpu_jiffies())
    gen = Generation(result=result, wall_s=wall, started=started, finished=time.time(), cpu=cpu)
    with dg.DagsterInstance.from_config(str(env.home)) as instance:
        for run in instance.get_runs(filters=dg.RunsFilter(tags={GEN_TAG: result.generation})):
            stats = instance.get_run_stats(run.run_id)
            if stats.start_time is None or stats.end_time is None:
                continue
            steps = [s.step_key for s in instance.get_run_step_stats(run.run_id)]
            kind = _classify(steps)
            task = run.tags.get("dagster/partition/task") or run.tags.get("dagster/partition")
            gen.runs.append(RunTime(kind, task, stats.start_time, stats.end_time))
    for path in sorted(ArtifactStore(env.artifacts).cells_root().glob("*/*/*/record.json")):
        rec = json.loads(path.read_text(encoding="utf-8"))
        if rec.get("generation") == result.generation:
            gen.records.append(rec)
    return gen


def overlap(gen: Generation, agent_workers: int, graph_workers: int) -> dict[str, Any]:
    """The overlap phase of a generation next to its ideal and serial bounds."""
    cell_sum, graph_sum = gen.cell_sum, gen.graph_sum
    cell_runs = gen.of("cell")
    cell_run_sum = sum(r.duration for r in cell_runs)
    ideal = max(cell_sum / agent_workers, graph_sum / graph_workers)
    ideal_dagster = max(cell_run_sum / agent_workers, graph_sum / graph_workers)
    serial = graph_sum + cell_sum
    per_task: dict[str, float] = {}
    for rec in gen.records:
        per_task[rec["task"]] = per_task.get(rec["task"], 0.0) + float(rec["duration_s"])
    order = sorted(gen.of("inputs"), key=lambda r: r.end)
    dependency = 0.0
    done = 0.0
    for k, run in enumerate(order):
        done += run.duration
        rest = sum(per_task.get(str(r.task), 0.0) for r in order[k:])
        dependency = max(dependency, done / graph_workers + rest / agent_workers)
    dependency = max(dependency, ideal)
    phase = gen.phase_s
    window = (max(r.end for r in cell_runs) - min(r.start for r in cell_runs)) if cell_runs else 0.0
    idle = agent_workers * window - cell_run_sum
    return {
        "generation": gen.result.generation,
        "evolve_wall_s": gen.wall_s,
        "pre_phase_s": gen.phase_start - gen.started,
        "overlap_phase_s": phase,
        "post_phase_s": gen.finished - gen.phase_end,
        "cells": len(gen.records),
        "cell_runs": len(cell_runs),
        "input_runs": len(gen.of("inputs")),
        "sum_cell_s": cell_sum,
        "sum_cell_runs_s": cell_run_sum,
        "dagster_per_cell_run_s": (cell_run_sum - cell_sum) / len(cell_runs) if cell_runs else 0,
        "agent_window_s": window,
        "agent_busy_in_runs": _ratio(cell_run_sum, agent_workers * window),
        "agent_outside_runs_per_cell_s": idle / len(cell_runs) if cell_runs else 0.0,
        "cpu_busy": gen.cpu.busy_fraction,
        "cpu_core_s": gen.cpu.core_seconds,
        "sum_graph_s": graph_sum,
        "mean_graph_s": graph_sum / len(order) if order else 0.0,
        "agent_workers": agent_workers,
        "graph_workers": graph_workers,
        "ideal_s": ideal,
        "ideal_with_dagster_runs_s": ideal_dagster,
        "dependency_bound_s": dependency,
        "serial_s": serial,
        "phase_over_ideal": _ratio(phase, ideal),
        "wall_over_ideal": _ratio(gen.wall_s, ideal),
        "phase_over_ideal_with_dagster_runs": _ratio(phase, ideal_dagster),
        "phase_over_dependency_bound": _ratio(phase, dependency),
        "phase_over_serial": _ratio(phase, serial),
        "wall_over_serial": _ratio(gen.wall_s, serial),
    }


# ------------------------------------------------------------------------------------------------
# The bare sequential script


def _bwrap(
    argv: list[str], spec: sandbox.SandboxSpec, stdin: bytes | None = None
) -> tuple[int, bytes]:
    """argv in bubblewrap with the harness's flags, through subprocess.run and nothing else."""
    full = sandbox._bwrap_argv(argv, spec, sandbox.sandbox_env())
    done = subprocess.run(
        full,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    return done.returncode, done.stdout


def _tests(layout: runner_mod.Layout, wt: Path, phase: str, paths: list[str]) -> runner_mod.Report:
    """One test phase through the trusted runner, as the harness starts it; its report."""
    call = runner_mod.prepare_phase(
        layout,
        wt,
        phase=phase,  # type: ignore[arg-type]
        pytest_paths=paths,
        command=None,
        import_paths=["."],
        memory_mb=None,
    )
    code, out = _bwrap(call.argv, call.sandbox, call.stdin)
    res = sandbox.ExecResult(tuple(call.argv), code, out, b"", False, 0.0, stdout_head=out)
    done = runner_mod.finish_phase(call, res)
    assert done.report is not None
    return done.report


def bare_cell(
    bench: Benchmark, task: str, patch: str, inputs: CellInputs, scratch: Path
) -> tuple[bool, bool]:
    """Copy the template, apply the patch, verify, oracle, remove: (verify ok, oracle ok)."""
    wt, box, grading = scratch / "wt", scratch / "box", scratch / "grading"
    subprocess.run(
        ["cp", "-a", "--reflink=auto", str(template_tree(inputs.template)), str(wt)], check=True
    )
    box.mkdir()
    if patch.strip():
        (box / "patch.diff").write_text(patch, encoding="utf-8")
        _bwrap(
            ["git", "apply", "--whitespace=nowarn", "/wfbench/patch.diff"],
            sandbox.SandboxSpec(
                workspace=wt, mounts=(sandbox.Mount(box, "/wfbench", writable=True),)
            ),
        )
    layout = runner_mod.new_layout(grading, wt)
    spec = bench.task(task).spec.verify
    assert not isinstance(spec, str), "the demo tasks use the trusted runner"
    res = sandbox.ExecResult((), 0, b"", b"", False, 0.0)
    verify = runner_mod.judge_verify(_tests(layout, wt, "verify", list(spec.pytest)), res, 60)
    make_tree_writable(layout.stage)
    for f in inputs.oracle.files:
        (layout.stage / f.name).write_bytes(inputs.oracle_payloads[f.name])
    expected = runner_mod.expected_oracle_tests(inputs.oracle, inputs.oracle_payloads)
    oracle = runner_mod.judge_oracle(
        _tests(layout, wt, "oracle", [layout.stage_name]), res, 60, expected
    )
    for d in (wt, box, grading):
        remove_tree(d)
    return verify.passed, oracle.passed


@dataclass
class Bare:
    wall_s: float
    inputs_s: float
    cells_s: float
    verdicts: dict[tuple[str, str], tuple[bool, bool]]
    cpu: Cpu


def bare_generation(bench: Benchmark, candidate: str, scratch: Path, warm_up: bool) -> Bare:
    """Generation 1's process work, sequentially: one input build per task, then every cell."""
    predictions: dict[str, dict[tuple[str, int], Prediction]] = {
        name: load_predictions(bench.root / arm.agent.predictions)
        for name, arm in bench.config.arms.items()
        if isinstance(arm.agent, ReplayAgent)
    }
    cells = [
        (task, arm, run)
        for task in bench.task_ids()
        for arm in sorted(bench.config.arms)
        if bench.config.arms[arm].applies_to(bench.task(task).spec)
        for run in range(bench.config.runs)
    ]

    def patch(task: str, arm: str, run: int) -> str:
        pred = predictions.get(arm, {}).get((task, run))
        return pred.model_patch if pred is not None else ""

    work = scratch / "bare-cell"
    work.mkdir()
    if warm_up:  # untimed: first-use costs (page cache, bwrap, interpreter) hit neither side
        store = ArtifactStore(scratch / "bare-warm")
        task, arm, run = cells[0]
        inputs = build_cell_inputs(bench, task, store, candidate=candidate)
        bare_cell(bench, task, patch(task, arm, run), inputs, work)
    store = ArtifactStore(scratch / "bare-artifacts")
    jiffies = cpu_jiffies()
    start = time.perf_counter()
    built = {t: build_cell_inputs(bench, t, store, candidate=candidate) for t in bench.task_ids()}
    inputs_s = time.perf_counter() - start
    verdicts = {}
    for task, arm, run in cells:
        verdicts[(task, f"{arm}.r{run}")] = bare_cell(
            bench, task, patch(task, arm, run), built[task], work
        )
    wall = time.perf_counter() - start
    cpu = Cpu.between(jiffies, cpu_jiffies())
    return Bare(wall, inputs_s, wall - inputs_s, verdicts, cpu)


# ------------------------------------------------------------------------------------------------
# Report


def reuse_summary(gen: Generation) -> dict[str, Any]:
    res = gen.result
    paid = [p for p in res.plan if p.action == "run"]
    kinds: dict[str, int] = {}
    for p in paid:
        kinds[p.kind] = kinds.get(p.kind, 0) + 1
    return {
        "generation": res.generation,
        "candidate": res.candidate,
        "decision": res.decision,
        "paid": res.paid_cells,
        "reused": res.reused_cells,
        "total": len(res.plan),
        "paid_by_reason": dict(sorted(kinds.items())),
        "canaries_by_arm": {
            arm: sum(1 for p in paid if p.kind == "canary" and p.arm == arm)
            for arm in sorted({p.arm for p in paid if p.kind == "canary"})
        },
        "cell_runs_launched": len(gen.of("cell")),
        "records_written": len(gen.records),
        "wall_s": gen.wall_s,
    }


def _print_diagnostics(o: dict[str, Any]) -> None:
    busy = o["agent_busy_in_runs"]
    print(
        f"  agent workers inside cell runs: {'n/a' if busy is None else f'{busy:.0%}'} of "
        f"{o['agent_workers']} x {o['agent_window_s']:.1f} s (first cell run start -> last end); "
        f"{o['agent_outside_runs_per_cell_s']:.2f} s per cell outside runs"
    )


def print_report(s: dict[str, Any]) -> None:
    print(
        f"wfbench generations on the demo ({s['cpus']} CPUs, sandbox bwrap; machine busy while "
        f"idle: {s['background_busy_before']:.0%} before, {s['background_busy_after']:.0%} after)"
    )
    print("1. cells paid per generation (planner result; cell runs Dagster recorded)")
    for g in s["reuse"]:
        reasons = ", ".join(f"{k} {v}" for k, v in g["paid_by_reason"].items())
        print(
            f"  {g['generation']} ({g['candidate']}): paid {g['paid']}/{g['total']}, reused "
            f"{g['reused']}; paid for: {reasons}; cell runs launched {g['cell_runs_launched']}; "
            f"decision {g['decision']}; {g['wall_s']:.1f} s"
        )
    g2 = s["reuse"][1]
    canaries = ", ".join(f"{a} {n}" for a, n in g2["canaries_by_arm"].items()) or "none"
    print(
        f"  generation 2 expected {s['expected_g2_paid']} (candidate cells + "
        f"{s['canaries_per_arm']} canary per comparator arm): "
        f"{'as expected' if g2['paid'] == s['expected_g2_paid'] else 'DIFFERENT'}; "
        f"canaries by arm: {canaries}"
    )

    b, d = s["bare"], s["demo_overlap"]
    print("2. demo generation 1 vs a bare sequential script doing the same subprocess work")
    print(f"  {'(seconds)':<52} {'wall':>8}")
    print(f"  {'evolve g0001, whole generation':<52} {d['evolve_wall_s']:8.2f}")
    print(f"  {'  before the pools (sync, skills, overlay runs)':<52} {d['pre_phase_s']:8.2f}")
    print(f"  {'  inputs + cells (both pools)':<52} {d['overlap_phase_s']:8.2f}")
    print(f"  {'  after (aggregates, decision, report, ledger)':<52} {d['post_phase_s']:8.2f}")
    print(f"  {'bare script, sequential':<52} {b['wall_s']:8.2f}")
    label = f"  {b['tasks']} input builds (build_cell_inputs)"
    print(f"  {label:<52} {b['inputs_s']:8.2f}")
    label = f"  {b['cells']} cells (cp -a, git apply, verify, oracle)"
    print(f"  {label:<52} {b['cells_s']:8.2f}")
    print(
        f"  evolve / bare: {_fmt_ratio(b['ratio'])}  target <= {TARGET_BARE}x: "
        f"{_verdict(b['ratio'], TARGET_BARE)}   (inputs + cells phase only / bare: "
        f"{_fmt_ratio(b['phase_ratio'])})"
    )
    print(
        f"  evolve ran {d['agent_workers']} agent workers; sum of cell records "
        f"{d['sum_cell_s']:.2f} s, of cell runs {d['sum_cell_runs_s']:.2f} s "
        f"({d['dagster_per_cell_run_s']:.2f} s Dagster per cell run); bare-script verdicts equal "
        f"to the g0001 records: {b['verdicts_agree']}/{b['cells']}"
    )
    _print_diagnostics(d)
    print(
        f"  machine CPU ({s['cpus']} cores): evolve g0001 {d['cpu_busy']:.0%} busy, "
        f"{d['cpu_core_s']:.0f} core-s; bare script {b['cpu_busy']:.0%} busy, "
        f"{b['cpu_core_s']:.0f} core-s (alone it keeps one core busy: "
        f"{1 / (s['cpus'] or 1):.0%})"
    )

    o = s.get("slow_overlap")
    print("3. slow indexer: overlap of graph builds with agent sessions")
    if o is None:
        print("  skipped (--skip-slow)")
        return
    print(
        f"  indexer: python -c <sleep {s['sleep_s']:g} s, list files>; graph workers "
        f"{o['graph_workers']}, agent workers {o['agent_workers']}"
    )
    print(f"  {'(seconds)':<52} {'time':>8} {'phase/x':>8}")

    def row(label: str, value: float, ratio: float | None = None) -> None:
        print(f"  {label:<52} {value:8.2f} {'' if ratio is None else _fmt_ratio(ratio):>8}")

    row(f"sum graph ({o['input_runs']} input runs, Dagster run time)", o["sum_graph_s"])
    row(f"sum cell ({o['cells']} records, duration_s)", o["sum_cell_s"])
    row(f"sum cell runs ({o['cell_runs']} Dagster runs)", o["sum_cell_runs_s"])
    row("evolve, whole generation", o["evolve_wall_s"])
    row("  overlap phase (overlay run end -> last run end)", o["overlap_phase_s"])
    row("ideal max(sum cell / W, sum graph / G)", o["ideal_s"], o["phase_over_ideal"])
    row(
        "  same with cell Dagster run time",
        o["ideal_with_dagster_runs_s"],
        o["phase_over_ideal_with_dagster_runs"],
    )
    row(
        "dependency bound (cells wait for their inputs)",
        o["dependency_bound_s"],
        o["phase_over_dependency_bound"],
    )
    row("serial order (sum graph + sum cell)", o["serial_s"], o["phase_over_serial"])
    print(
        f"  overlap phase / ideal: {_fmt_ratio(o['phase_over_ideal'])}  target <= "
        f"{TARGET_OVERLAP}x: {_verdict(o['phase_over_ideal'], TARGET_OVERLAP)}"
    )
    _print_diagnostics(o)
    print(
        f"  machine CPU: {o['cpu_busy']:.0%} busy, {o['cpu_core_s']:.0f} core-s over the "
        f"generation; vs demo g0001 the slow indexer added {o['added_graph_s']:.1f} s of graph "
        f"time and {o['added_phase_s']:.1f} s of overlap-phase wall"
    )
    print(
        f"  whole generation / ideal: {_fmt_ratio(o['wall_over_ideal'])}; whole generation / "
        f"serial: {_fmt_ratio(o['wall_over_serial'])}; overlap phase / serial: "
        f"{_fmt_ratio(o['phase_over_serial'])}"
    )


# ------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", default=str(REPO / "tasks"))
    ap.add_argument("--json", action="store_true", help="print the measurements as JSON")
    ap.add_argument("--skip-slow", action="store_true", help="skip measurement 3 (slow indexer)")
    ap.add_argument("--sleep", type=float, default=None, help="indexer sleep in s (default auto)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    warnings.filterwarnings("ignore", category=dg.PreviewWarning)
    tasks_src = Path(args.tasks).resolve()
    bench = load_benchmark(tasks_src)
    limits = bench.config.limits
    saved = {k: os.environ.get(k) for k in ("DAGSTER_HOME", "WFBENCH_ARTIFACTS")}
    scratch = Path(tempfile.mkdtemp(prefix="wfbench-bench-generation-"))
    summary: dict[str, Any] = {"cpus": os.cpu_count()}
    try:
        sandbox.preflight()
        summary["background_busy_before"] = background_load()
        first = sorted(bench.candidates)[0]
        _log(f"bare sequential script (candidate {first}) ...")
        bare = bare_generation(bench, first, scratch, warm_up=True)

        demo = fresh_env(scratch, "demo", tasks_src)
        _log("demo: evolve generation 1 ...")
        g1 = run_generation(demo)
        _log(f"  {g1.result.generation}: {g1.result.paid_cells} paid in {g1.wall_s:.1f} s")
        _log("demo: evolve generation 2 ...")
        g2 = run_generation(demo)
        _log(f"  {g2.result.generation}: {g2.result.paid_cells} paid in {g2.wall_s:.1f} s")

        comparator = bench.config.comparator_arms()
        candidate_arms = bench.config.candidate_arms()
        n_tasks = len(bench.task_ids())
        summary["canaries_per_arm"] = bench.config.reuse.canaries
        summary["expected_g2_paid"] = n_tasks * len(
            candidate_arms
        ) * bench.config.runs + bench.config.reuse.canaries * len(comparator)
        summary["reuse"] = [reuse_summary(g1), reuse_summary(g2)]
        demo_overlap = overlap(g1, limits.agent_sessions, limits.graph_builds)
        summary["demo_overlap"] = demo_overlap
        agree = sum(
            1
            for rec in g1.records
            if bare.verdicts.get((rec["task"], rec["cell"]))
            == (rec["verify_passed"], rec["oracle_passed"])
        )
        summary["bare"] = {
            "wall_s": bare.wall_s,
            "inputs_s": bare.inputs_s,
            "cells_s": bare.cells_s,
            "tasks": n_tasks,
            "cells": len(bare.verdicts),
            "candidate": first,
            "verdicts_agree": agree,
            "ratio": _ratio(g1.wall_s, bare.wall_s),
            "phase_ratio": _ratio(demo_overlap["overlap_phase_s"], bare.wall_s),
            "cpu_busy": bare.cpu.busy_fraction,
            "cpu_core_s": bare.cpu.core_seconds,
        }

        if not args.skip_slow:
            sleep_s = args.sleep
            if sleep_s is None:
                # One task's cells on the agent workers, minus what its input run costs anyway.
                per_task = demo_overlap["sum_cell_s"] / n_tasks / limits.agent_sessions
                target = per_task - demo_overlap["mean_graph_s"]
                sleep_s = float(round(min(max(target, SLEEP_RANGE[0]), SLEEP_RANGE[1])))
            summary["sleep_s"] = sleep_s

            def slow_indexer(raw: dict[str, Any]) -> None:
                raw["graph"] = {
                    **raw.get("graph", {}),
                    "indexer": "command",
                    "argv": ["python", "-c", SLOW_INDEXER, f"{sleep_s:g}", "{workdir}", "{out}"],
                }

            slow = fresh_env(scratch, "slow", tasks_src, edit=slow_indexer)
            _log(f"slow indexer (sleep {sleep_s:g} s): evolve generation 1 ...")
            g_slow = run_generation(slow)
            _log(
                f"  {g_slow.result.generation}: {g_slow.result.paid_cells} paid in "
                f"{g_slow.wall_s:.1f} s"
            )
            slow_overlap = overlap(g_slow, limits.agent_sessions, limits.graph_builds)
            slow_overlap["paid"] = g_slow.result.paid_cells
            # What the slow indexer cost in wall time, next to the graph time it added.
            slow_overlap["added_graph_s"] = (
                slow_overlap["sum_graph_s"] - demo_overlap["sum_graph_s"]
            )
            slow_overlap["added_phase_s"] = (
                slow_overlap["overlap_phase_s"] - demo_overlap["overlap_phase_s"]
            )
            summary["slow_overlap"] = slow_overlap
        summary["background_busy_after"] = background_load()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        remove_tree(scratch)

    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print_report(summary)


if __name__ == "__main__":
    main()
