"""Per-cell orchestration overhead of the demo cells, next to a bare loop doing the same work.

Every demo cell (task x arm x run) is run three ways, and the figures are printed side by side:

* directly with ``run_cell`` (inputs built once per task with ``build_cell_inputs``, no Dagster);
* through Dagster with ``materialize_cells`` on a temporary instance: first fresh, then a second
  time, when every cell is reused;
* as a bare sequential loop doing only the cell's process work with ``subprocess.run``: ``cp -a``
  of the sanitized template, ``git apply`` of the replayed patch, verify and the oracle through
  the trusted runner (each of the last three inside bubblewrap, with the argv and stdin the harness
  itself builds), then removing the copy.

It also compares grading as shipped (tamper canaries in both phases, tests run in a tree rebuilt
from the base and the recorded patch; issue 21) against grading before that, per cell, target <=
1.3x median (`--integrity-only` runs just that); and grading with the trusted runner (issue 11)
against grading as it was before:
every cell is graded twice, alternating the order, once as shipped and once from a copy of the
tasks whose ``verify`` and oracle are ``python -m pytest`` commands judged by exit status (no
runner-file restore), and the per-cell grading times are shown side by side. Target: trusted /
before <= 1.2x per cell. ``--grading-only`` runs just this comparison.

``bench_assets.sandbox.process.run`` is the only place the harness starts a process. This script
wraps it in every module that imported it by name and charges each process's
``ExecResult.duration_s`` to the running cell, by purpose (classified by argv). A cell's *overhead*
is its wall time minus the time spent inside agent, setup, verify and oracle processes. Git plumbing
and the worktree copy are harness work: they count as overhead, and are also shown on their own.
Target: <= 0.3 s overhead per cell.

Run: `.venv/bin/python bench/cells.py [--tasks DIR] [--limit N] [--json]`.
"""

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import dagster as dg  # noqa: E402

import bench_assets.agents.claude_code  # noqa: E402, F401  (imports sandbox.run by name too)
from bench_assets.agents.replay import Prediction, load_predictions  # noqa: E402
from bench_assets.cells import grading as grading_mod  # noqa: E402
from bench_assets.cells import pipeline as cells_mod  # noqa: E402
from bench_assets.cells.cellkeys import parse_cell_key  # noqa: E402
from bench_assets.cells.pipeline import (  # noqa: E402
    CellInputs,
    build_cell_inputs,
    ensure_contained,
    run_cell,
)
from bench_assets.cells.records import CellRecord  # noqa: E402
from bench_assets.config.models import ReplayAgent  # noqa: E402
from bench_assets.defs import cells as defs_cells  # noqa: E402
from bench_assets.driver.inputs import materialize_inputs  # noqa: E402
from bench_assets.driver.instance import (  # noqa: E402
    materialize_cells,
    sync_instance,
)
from bench_assets.inputs.sanitize import template_tree  # noqa: E402
from bench_assets.kernel.fsutil import make_tree_writable, remove_tree  # noqa: E402
from bench_assets.kernel.store import ArtifactStore  # noqa: E402
from bench_assets.runner import trusted as runner_mod  # noqa: E402
from bench_assets.sandbox import process as sandbox  # noqa: E402
from bench_assets.sandbox.redact import Redactor  # noqa: E402
from bench_assets.tasks.catalog import Benchmark, load_benchmark  # noqa: E402

TARGET_S = 0.3
WORK = ("agent", "setup", "verify", "oracle")
"""Process time that is the cell's actual work (not overhead)."""
HARNESS = ("git", "copy", "other")
"""Process time that is harness work (part of the overhead)."""
PURPOSES = WORK + HARNESS
LABELS = {
    "agent": "agent (replay: git apply)",
    "setup": "task setup",
    "verify": "verify",
    "oracle": "hidden oracle",
    "git": "git plumbing (sandboxed)",
    "copy": "worktree copy (cp -a)",
    "other": "other harness processes",
}


def _now() -> float:
    return time.perf_counter()


def _log(msg: str) -> None:
    print(f"[bench/cells] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# Charging subprocess time to cells


@dataclass
class Tally:
    """Seconds and process count per purpose, for one cell."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PURPOSES, 0.0))
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PURPOSES, 0))

    def add(self, purpose: str, seconds: float) -> None:
        self.seconds[purpose] += seconds
        self.calls[purpose] += 1

    @property
    def work_s(self) -> float:
        return sum(self.seconds[p] for p in WORK)

    @property
    def harness_s(self) -> float:
        return sum(self.seconds[p] for p in HARNESS)


def _git_subcommand(argv: Sequence[str]) -> str:
    i = 1
    while i < len(argv):
        if argv[i] == "-c":
            i += 2
        elif argv[i].startswith("-"):
            i += 1
        else:
            return argv[i]
    return ""


class SubprocessProbe:
    """Wraps ``sandbox.run`` wherever it is bound and charges each process to ``active``."""

    def __init__(self, bench: Benchmark) -> None:
        self.original = sandbox.run
        self.active: Tally | None = None
        self.commands: dict[str, str] = {}
        for task_id in bench.task_ids():
            spec = bench.task(task_id).spec
            if spec.setup:
                self.commands.setdefault(spec.setup, "setup")
        self.patched: list[ModuleType] = []

    def classify(self, argv: Sequence[str], kwargs: dict[str, Any]) -> str:
        isolation = kwargs.get("isolation")
        spec = kwargs.get("sandbox")
        # Both test phases look alike by design; the stage mounted first tells them apart here.
        if spec is not None and spec.mounts and spec.mounts[0].host.name in ("empty", "oracle"):
            return "verify" if spec.mounts[0].host.name == "empty" else "oracle"
        prog = Path(argv[0]).name
        if prog == "git":
            return "agent" if _git_subcommand(argv) == "apply" else "git"
        if prog == "cp":
            return "copy"
        if prog == "sh" and len(argv) >= 3 and argv[1] == "-c" and argv[2] in self.commands:
            return self.commands[argv[2]]
        if (
            prog == "sh"
            and len(argv) >= 3
            and argv[1] == "-c"
            and argv[2].startswith(("git ", "export GIT_INDEX_FILE="))
        ):
            return "git"  # the harness's batched git plumbing (one sandbox start per phase)
        # Anything else contained during a cell is an agent process (command / claude-code).
        return "agent" if isolation is sandbox.Isolation.SANDBOX else "other"

    def run(self, *args: Any, **kwargs: Any) -> sandbox.ExecResult:
        res = self.original(*args, **kwargs)
        if self.active is not None:
            self.active.add(self.classify(res.argv, kwargs), res.duration_s)
        return res

    def install(self) -> None:
        for name, mod in list(sys.modules.items()):
            if not (name == "bench_assets" or name.startswith("bench_assets.")):
                continue
            if getattr(mod, "run", None) is self.original:
                mod.run = self.run  # type: ignore[attr-defined]
                self.patched.append(mod)

    def uninstall(self) -> None:
        for mod in self.patched:
            mod.run = self.original  # type: ignore[attr-defined]
        self.patched.clear()


# ------------------------------------------------------------------------------------------------
# The three ways of running the cells


@dataclass
class CellResult:
    task: str
    cell: str
    wall_s: float
    tally: Tally
    inner_s: float | None = None
    """Dagster path: wall time of ``run_cell`` inside the materialization (None when reused)."""
    reused: bool = False
    verify: bool | None = None
    oracle: bool | None = None

    @property
    def overhead_s(self) -> float:
        return self.wall_s - self.tally.work_s


def run_direct(
    bench: Benchmark,
    plan: list[tuple[str, str]],
    inputs: dict[str, CellInputs],
    store: ArtifactStore,
    probe: SubprocessProbe,
) -> list[CellResult]:
    out = []
    for task, cell in plan:
        arm, run = parse_cell_key(cell)
        tally = Tally()
        probe.active = tally
        start = _now()
        try:
            record, _ = run_cell(
                bench, task, arm, run, inputs[task], store, generation="bench", redactor=Redactor()
            )
        finally:
            probe.active = None
        wall = _now() - start
        out.append(
            CellResult(
                task, cell, wall, tally, verify=record.verify_passed, oracle=record.oracle_passed
            )
        )
    return out


def _boxed(
    argv: list[str],
    spec: sandbox.SandboxSpec,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
) -> sandbox.ExecResult:
    """Run argv in bubblewrap with the harness's own flags, straight through subprocess.run."""
    full = sandbox._bwrap_argv(argv, spec, env if env is not None else sandbox.sandbox_env())
    start = _now()
    res = subprocess.run(
        full,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    return sandbox.ExecResult(
        tuple(argv),
        res.returncode,
        res.stdout,
        res.stderr,
        False,
        _now() - start,
        stdout_head=res.stdout[:200],
    )


def _bare_phase(
    layout: runner_mod.Layout, wt: Path, phase: str, paths: list[str], inputs: CellInputs
) -> bool:
    """One test phase with the trusted runner, judged like the harness judges it."""
    call = runner_mod.prepare_phase(
        layout,
        wt,
        phase=phase,  # type: ignore[arg-type]
        pytest_paths=paths,
        command=None,
        import_paths=["."],
        memory_mb=None,
    )
    res = _boxed(call.argv, call.sandbox, call.env, call.stdin)
    res = sandbox.ExecResult(
        res.argv,
        res.returncode,
        res.stdout,
        res.stderr,
        False,
        res.duration_s,
        stdout_head=res.stdout_head[: len(call.ready)],
    )
    done = runner_mod.finish_phase(call, res)
    assert done.report is not None
    if phase == "verify":
        return runner_mod.judge_verify(done.report, res, 60).passed
    expected = runner_mod.expected_oracle_tests(inputs.oracle, inputs.oracle_payloads)
    return runner_mod.judge_oracle(done.report, res, 60, expected).passed


def bare_cell(
    bench: Benchmark,
    task: str,
    cell: str,
    inputs: CellInputs,
    predictions: dict[str, dict[tuple[str, int], Prediction]],
    scratch: Path,
) -> CellResult:
    """The cell's process work and nothing else: copy, apply, verify, oracle, remove."""
    arm, run = parse_cell_key(cell)
    pred = predictions[arm].get((task, run))
    wt, box, grading = scratch / "wt", scratch / "box", scratch / "grading"
    start = _now()
    subprocess.run(
        ["cp", "-a", "--reflink=auto", str(template_tree(inputs.template)), str(wt)], check=True
    )
    box.mkdir()
    if pred is not None and pred.model_patch.strip():
        (box / "patch.diff").write_text(pred.model_patch)
        spec = sandbox.SandboxSpec(
            workspace=wt, mounts=(sandbox.Mount(box, "/wfbench", writable=True),)
        )
        _boxed(["git", "apply", "--whitespace=nowarn", "/wfbench/patch.diff"], spec)
    layout = runner_mod.new_layout(grading, wt)
    verify_paths = bench.task(task).spec.verify
    assert not isinstance(verify_paths, str), "the demo tasks use the trusted runner"
    verify = _bare_phase(layout, wt, "verify", list(verify_paths.pytest), inputs)
    make_tree_writable(layout.stage)
    for f in inputs.oracle.files:
        (layout.stage / f.name).write_bytes(inputs.oracle_payloads[f.name])
    oracle = _bare_phase(layout, wt, "oracle", [layout.stage_name], inputs)
    for d in (wt, box, grading):
        remove_tree(d)
    return CellResult(task, cell, _now() - start, Tally(), verify=verify, oracle=oracle)


# ------------------------------------------------------------------------------------------------
# Grading: the trusted runner against exit-status commands (how cells were graded before)

LEGACY_VERIFY = "python -m pytest -q -p no:cacheprovider tests"
LEGACY_ORACLE = "python -m pytest -q -p no:cacheprovider {oracle_dir}"


def legacy_tasks(src: Path, dest: Path) -> Path:
    """A copy of the benchmark graded as before: exit-status commands, no runner-file restore."""
    import yaml

    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for task_file in dest.glob("*/task.yaml"):
        data = yaml.safe_load(task_file.read_text())
        data["verify"] = LEGACY_VERIFY
        data["oracle"]["command"] = LEGACY_ORACLE
        data["runner_files"] = "keep"
        task_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


@dataclass
class GradingPair:
    task: str
    cell: str
    trusted_tests_s: float
    legacy_tests_s: float
    trusted_grade_s: float
    legacy_grade_s: float
    agree: bool


def compare_grading(
    benches: dict[str, Benchmark],
    inputs: dict[str, dict[str, CellInputs]],
    plan: list[tuple[str, str]],
    store: ArtifactStore,
    repeat: int = 1,
) -> list[GradingPair]:
    """Grade every cell as shipped and as before, ``repeat`` times each, alternating the order.

    A cell's time per way is the median of its repetitions (the machine is shared: one slow run
    should not decide a per-cell ratio). The first cell is graded both ways once beforehand, not
    counted (cold caches).
    """
    out = []
    for i, (task, cell) in enumerate([plan[0], *plan]):
        arm, run = parse_cell_key(cell)
        times: dict[str, list[tuple[float, float]]] = {"trusted": [], "legacy": []}
        verdicts: dict[str, tuple[bool, bool]] = {}
        for k in range(1 if i == 0 else repeat):
            order = ("trusted", "legacy") if (i + k) % 2 == 0 else ("legacy", "trusted")
            for mode in order:
                rec, _ = run_cell(
                    benches[mode],
                    task,
                    arm,
                    run,
                    inputs[mode][task],
                    store,
                    generation="bench",
                    redactor=Redactor(),
                )
                t = rec.timings
                tests_s = t.get("verify_s", 0.0) + t.get("oracle_s", 0.0)
                times[mode].append((tests_s, t.get("grade_s", 0.0)))
                verdicts[mode] = (rec.verify_passed, rec.oracle_passed)
        if i == 0:
            continue

        med = {
            (mode, j): statistics.median(x[j] for x in times[mode])
            for mode in times
            for j in (0, 1)
        }
        out.append(
            GradingPair(
                task,
                cell,
                med["trusted", 0],
                med["legacy", 0],
                med["trusted", 1],
                med["legacy", 1],
                verdicts["trusted"] == verdicts["legacy"],
            )
        )
    return out


def grading_summary(pairs: list[GradingPair], repeat: int = 1) -> dict[str, Any]:
    def ratio(a: float, b: float) -> float:
        return a / b if b else float("nan")

    tests = [ratio(p.trusted_tests_s, p.legacy_tests_s) for p in pairs]
    whole = [ratio(p.trusted_grade_s, p.legacy_grade_s) for p in pairs]
    return {
        "cells": len(pairs),
        "repeat": repeat,
        "target_ratio": GRADING_TARGET,
        "trusted_tests": _stats([p.trusted_tests_s for p in pairs]),
        "legacy_tests": _stats([p.legacy_tests_s for p in pairs]),
        "trusted_grade": _stats([p.trusted_grade_s for p in pairs]),
        "legacy_grade": _stats([p.legacy_grade_s for p in pairs]),
        "ratio_tests": {
            **_stats(tests),
            "of_totals": ratio(
                sum(p.trusted_tests_s for p in pairs), sum(p.legacy_tests_s for p in pairs)
            ),
        },
        "ratio_grade": {
            **_stats(whole),
            "of_totals": ratio(
                sum(p.trusted_grade_s for p in pairs), sum(p.legacy_grade_s for p in pairs)
            ),
        },
        "verdicts_agree": sum(p.agree for p in pairs),
        "per_cell": [
            {
                "task": p.task,
                "cell": p.cell,
                "trusted_tests_s": round(p.trusted_tests_s, 4),
                "legacy_tests_s": round(p.legacy_tests_s, 4),
                "trusted_grade_s": round(p.trusted_grade_s, 4),
                "legacy_grade_s": round(p.legacy_grade_s, 4),
            }
            for p in pairs
        ],
    }


def print_grading(g: dict[str, Any]) -> None:
    def line(label: str, st: dict[str, float], fmt: str = "8.3f") -> None:
        print(f"  {label:<44} {st['median']:{fmt}} {st['max']:{fmt}} {st['total']:9.2f}")

    def verdict(r: dict[str, float]) -> str:
        ok = "met" if r["median"] <= g["target_ratio"] else "NOT met"
        return (
            f"median {r['median']:.2f}x, max {r['max']:.2f}x, of totals {r['of_totals']:.2f}x "
            f"(target <= {g['target_ratio']}x per cell: median {ok})"
        )

    print(
        f"grading: trusted runner vs exit-status commands (before issue 11), {g['cells']} cells, "
        f"each graded both ways {g['repeat']}x (median per cell), order alternating"
    )
    print(f"  {'(seconds per cell)':<44} {'median':>8} {'max':>8} {'total':>9}")
    line("trusted runner: verify + oracle processes", g["trusted_tests"])
    line("before: verify + oracle processes", g["legacy_tests"])
    line("trusted runner: whole grading", g["trusted_grade"])
    line("before: whole grading", g["legacy_grade"])
    print("  (whole grading = restores, runner-file scan, stage, both phases, patch capture)")
    print(f"  ratio trusted / before, test processes: {verdict(g['ratio_tests'])}")
    print(f"  ratio trusted / before, whole grading:  {verdict(g['ratio_grade'])}")
    print(f"  verdicts equal both ways: {g['verdicts_agree']}/{g['cells']}")


GRADING_TARGET = 1.2
INTEGRITY_TARGET = 1.3


@contextlib.contextmanager
def graded_as_before_issue_21() -> Iterator[None]:
    """Grade as wfbench did before issue 21: no tamper canaries, tests run in the agent's own
    worktree (no base copy kept, the patch not re-applied). Only this script switches it."""
    saved = (grading_mod.TAMPER_CANARIES, grading_mod.rebuild, cells_mod.prepare)

    def prepare_without_base(*args: Any, **kwargs: Any) -> Any:
        return saved[2](*args, **{**kwargs, "keep_base": False})

    grading_mod.TAMPER_CANARIES = False
    grading_mod.rebuild = lambda wt, _patch, _grade: wt  # type: ignore[assignment]
    cells_mod.prepare = prepare_without_base  # type: ignore[assignment]
    try:
        yield
    finally:
        grading_mod.TAMPER_CANARIES, grading_mod.rebuild, cells_mod.prepare = saved


@dataclass
class IntegrityPair:
    task: str
    cell: str
    now_s: float
    before_s: float
    canaries: int
    agree: bool
    resolved_before: bool
    fired: int


def compare_integrity(
    bench: Benchmark, inputs: dict[str, CellInputs], plan: list[tuple[str, str]], store: Any
) -> list[IntegrityPair]:
    """Each cell graded as shipped (canaries, rebuilt tree) and as before issue 21, alternating.

    A cell's time is its worktree preparation (which now keeps the base copy) plus its grading
    (hygiene, patch capture, rebuilding, both phases); the agent's session is left out. The first
    cell is graded both ways once beforehand, not counted (cold caches)."""
    out = []
    for i, (task, cell) in enumerate([plan[0], *plan]):
        arm, run = parse_cell_key(cell)
        got: dict[str, tuple[float, CellRecord]] = {}
        for mode in ("now", "before") if i % 2 == 0 else ("before", "now"):
            ctx = graded_as_before_issue_21() if mode == "before" else contextlib.nullcontext()
            with ctx:
                rec, _ = run_cell(
                    bench,
                    task,
                    arm,
                    run,
                    inputs[task],
                    store,
                    generation="bench",
                    redactor=Redactor(),
                )
            got[mode] = (rec.timings.get("prepare_s", 0.0) + rec.timings.get("grade_s", 0.0), rec)
        if i == 0:
            continue
        now, before = got["now"][1], got["before"][1]
        out.append(
            IntegrityPair(
                task,
                cell,
                got["now"][0],
                got["before"][0],
                len(now.canaries or []),
                (now.verify_passed, now.oracle_passed)
                == (before.verify_passed, before.oracle_passed),
                before.resolved,
                sum(c.outcome in ("passed", "xpassed") for c in now.canaries or []),
            )
        )
    return out


def print_integrity(pairs: list[IntegrityPair]) -> dict[str, Any]:
    ratios = [p.now_s / p.before_s for p in pairs if p.before_s]
    st = _stats(ratios)
    now, before = _stats([p.now_s for p in pairs]), _stats([p.before_s for p in pairs])
    ok = "met" if st["median"] <= INTEGRITY_TARGET else "NOT met"
    print(
        f"grading with tamper canaries and a rebuilt tree vs before issue 21, {len(pairs)} cells "
        "(prepare + grade per cell, order alternating)"
    )
    print(f"  {'(seconds per cell)':<44} {'median':>8} {'max':>8} {'total':>9}")
    print(
        f"  {'now: canaries + rebuilt tree':<44} {now['median']:8.3f} {now['max']:8.3f} "
        f"{now['total']:9.2f}"
    )
    print(
        f"  {'before: agent worktree, no canaries':<44} {before['median']:8.3f} "
        f"{before['max']:8.3f} {before['total']:9.2f}"
    )
    print(
        f"  ratio now / before: median {st['median']:.2f}x, max {st['max']:.2f}x "
        f"(target <= {INTEGRITY_TARGET}x per cell: median {ok})"
    )
    print(
        f"  canaries per cell: median {statistics.median(p.canaries for p in pairs):g}; "
        f"verdicts equal both ways: {sum(p.agree for p in pairs)}/{len(pairs)}"
    )
    honest = [p for p in pairs if p.resolved_before]
    alarms = sum(p.fired > 0 for p in honest)
    print(
        f"  false alarms: {alarms} of {len(honest)} cells that resolved before fired a canary "
        f"({sum(p.canaries for p in honest)} canaries planted in them)"
    )
    return {
        "now": now,
        "before": before,
        "ratio": st,
        "target_ratio": INTEGRITY_TARGET,
        "false_alarms": alarms,
        "honest_cells": len(honest),
    }


class _Enough(Exception):
    """Stops materialize_cells after --limit cells (it has no cell filter of its own)."""


class DagsterProbe:
    """Times each cell materialization of ``materialize_cells`` and the ``run_cell`` inside it."""

    def __init__(self, probe: SubprocessProbe, limit: int) -> None:
        self.probe = probe
        self.limit = limit
        self.cells: list[CellResult] = []
        self.overlay_s = 0.0
        self._start = 0.0
        self._tally = Tally()
        self._inner: float | None = None
        self._materialize = dg.materialize
        self._run_cell = defs_cells.run_cell  # type: ignore[attr-defined]

    def materialize(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("partition_key") is None:  # candidate_overlay
            start = _now()
            try:
                return self._materialize(*args, **kwargs)
            finally:
                self.overlay_s += _now() - start
        self._tally, self._inner = Tally(), None
        self.probe.active = self._tally
        self._start = _now()
        try:
            return self._materialize(*args, **kwargs)
        finally:
            self.probe.active = None

    def run_cell(self, *args: Any, **kwargs: Any) -> Any:
        start = _now()
        try:
            return self._run_cell(*args, **kwargs)
        finally:
            self._inner = _now() - start

    def progress(self, msg: str) -> None:
        if not msg.startswith("["):
            return
        # "[i/n] <task> <cell>: <verdict>[ (reused)]", printed once the cell's metadata is read.
        wall = _now() - self._start
        task, cell = msg.split("] ", 1)[1].split(":", 1)[0].split(" ")
        self.cells.append(
            CellResult(task, cell, wall, self._tally, self._inner, reused="(reused)" in msg)
        )
        if len(self.cells) >= self.limit:
            raise _Enough

    def materialize_cells(self, instance: dg.DagsterInstance, tasks: list[str], **kw: Any) -> None:
        dg.materialize = self.materialize  # driver.instance calls dg.materialize
        defs_cells.run_cell = self.run_cell  # type: ignore[attr-defined]
        try:
            materialize_cells(instance, tasks, progress=self.progress, **kw)
        except _Enough:
            pass
        finally:
            dg.materialize = self._materialize
            defs_cells.run_cell = self._run_cell  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------------
# Report


def _stats(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"median": 0.0, "max": 0.0, "total": 0.0}
    return {"median": statistics.median(values), "max": max(values), "total": sum(values)}


def _median_of(fn: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        start = _now()
        fn()
        times.append(_now() - start)
    return statistics.median(times)


def _target(s: dict[str, float]) -> str:
    med = "met" if s["median"] <= TARGET_S else "NOT met"
    top = "met" if s["max"] <= TARGET_S else "NOT met"
    return f"median {med}, max {top}"


def summarize(
    direct: list[CellResult],
    bare: list[CellResult],
    fresh: list[CellResult],
    reused: list[CellResult],
    extra: dict[str, float],
) -> dict[str, Any]:
    n = len(direct)
    by_purpose = {
        p: {
            "calls_per_cell": sum(c.tally.calls[p] for c in direct) / n,
            **_stats([c.tally.seconds[p] for c in direct]),
        }
        for p in PURPOSES
    }
    python_s = [c.overhead_s - c.tally.harness_s for c in direct]
    agree = sum(
        1 for d, b in zip(direct, bare, strict=True) if (d.verify, d.oracle) == (b.verify, b.oracle)
    )
    fresh_run = [c for c in fresh if not c.reused and c.inner_s is not None]
    bare_total = sum(c.wall_s for c in bare)
    direct_s = _stats([c.wall_s for c in direct])
    fresh_s = _stats([c.wall_s for c in fresh])
    reused_s = _stats([c.wall_s for c in reused])
    return {
        "cells": n,
        "direct": {
            "wall": direct_s,
            "work": _stats([c.tally.work_s for c in direct]),
            "overhead": _stats([c.overhead_s for c in direct]),
            "overhead_harness_processes": _stats([c.tally.harness_s for c in direct]),
            "overhead_in_process": _stats(python_s),
            "by_purpose": by_purpose,
        },
        "dagster": {
            "fresh_wall": fresh_s,
            "fresh_overhead": _stats([c.overhead_s for c in fresh]),
            "fresh_run_cost": _stats([c.wall_s - (c.inner_s or 0.0) for c in fresh_run]),
            "fresh_cells_run": len(fresh_run),
            "reused_wall": reused_s,
            "reused_cells": sum(1 for c in reused if c.reused),
            "inputs_s": extra["dagster_inputs_s"],
            "overlay_s": extra["overlay_s"],
        },
        "bare": {
            "wall": _stats([c.wall_s for c in bare]),
            "verdicts_agree": agree,
            "sandbox": "bwrap, harness flags (sandbox._bwrap_argv), via subprocess.run",
        },
        "ratio": {
            "direct_over_bare": direct_s["total"] / bare_total if bare_total else None,
            "dagster_fresh_over_bare": fresh_s["total"] / bare_total if bare_total else None,
            "dagster_reused_over_bare": reused_s["total"] / bare_total if bare_total else None,
        },
        "bwrap_start_s": extra["bwrap_start_s"],
        "plain_start_s": extra["plain_start_s"],
        "inputs_direct_s": extra["inputs_direct_s"],
        "target_s": TARGET_S,
        "per_cell": [
            {
                "task": d.task,
                "cell": d.cell,
                "direct_wall_s": round(d.wall_s, 4),
                "direct_overhead_s": round(d.overhead_s, 4),
                "direct_seconds": {p: round(v, 4) for p, v in d.tally.seconds.items()},
                "bare_wall_s": round(b.wall_s, 4),
                "dagster_fresh_wall_s": _wall(fresh, d),
                "dagster_reused_wall_s": _wall(reused, d),
            }
            for d, b in zip(direct, bare, strict=True)
        ],
    }


def _wall(cells: list[CellResult], same: CellResult) -> float | None:
    found = [c.wall_s for c in cells if (c.task, c.cell) == (same.task, same.cell)]
    return round(found[0], 4) if found else None


def print_table(s: dict[str, Any], header: str) -> None:
    def line(label: str, st: dict[str, float], note: str = "") -> None:
        row = f"  {label:<36} {st['median']:8.3f} {st['max']:8.3f} {st['total']:9.2f}  {note}"
        print(row.rstrip())

    d, g, b, r = s["direct"], s["dagster"], s["bare"], s["ratio"]
    print(header)
    print(f"  {'(seconds)':<36} {'median':>8} {'max':>8} {'total':>9}")
    print("direct run_cell, per cell (no Dagster)")
    line("cell wall", d["wall"])
    line("in agent/setup/verify/oracle", d["work"])
    line(
        "overhead (wall - those)",
        d["overhead"],
        f"target <= {TARGET_S} s: {_target(d['overhead'])}",
    )
    line("  of which harness processes", d["overhead_harness_processes"], "git plumbing + cp")
    line("  of which in-process Python", d["overhead_in_process"])
    print(f"subprocess time by purpose (direct)   {'calls/cell':>10} {'median':>8} {'max':>8}")
    for p in PURPOSES:
        bp = d["by_purpose"][p]
        if bp["calls_per_cell"] == 0:
            continue
        print(
            f"  {LABELS[p]:<36} {bp['calls_per_cell']:10.1f} {bp['median']:8.3f} {bp['max']:8.3f}"
            f"  total {bp['total']:.2f}"
        )
    print(
        f"  process start: bwrap {s['bwrap_start_s'] * 1000:.1f} ms vs plain "
        f"{s['plain_start_s'] * 1000:.1f} ms (`true` through sandbox.run, median of 10)"
    )
    print("Dagster materialize_cells, per cell (temporary instance)")
    line("fresh: cell wall", g["fresh_wall"], f"{g['fresh_cells_run']} cells ran")
    line("fresh: overhead (wall - work procs)", g["fresh_overhead"], _target(g["fresh_overhead"]))
    line("fresh: wall - run_cell wall", g["fresh_run_cost"], "Dagster's own share")
    line("reused: cell wall", g["reused_wall"], f"{g['reused_cells']} cells reused")
    print(
        f"  (once: sync + materialize_inputs {g['inputs_s']:.2f} s, candidate_overlay "
        f"{g['overlay_s']:.2f} s; inputs built directly {s['inputs_direct_s']:.2f} s)"
    )
    print("whole cell phase vs bare sequential loop")
    print(f"  bare loop ({b['sandbox']})")
    line("bare cell (cp, apply, verify, oracle)", b["wall"])
    print(f"  {'direct run_cell / bare':<36} {r['direct_over_bare']:8.2f}x")
    print(f"  {'Dagster fresh / bare':<36} {r['dagster_fresh_over_bare']:8.2f}x")
    print(f"  {'Dagster reused / bare':<36} {r['dagster_reused_over_bare']:8.2f}x")
    print(f"  bare-loop verdicts equal to the cell records: {b['verdicts_agree']}/{s['cells']}")
    print(
        f"target <= {TARGET_S} s overhead per cell: direct {_target(d['overhead'])}; "
        f"Dagster fresh {_target(g['fresh_overhead'])}"
    )


# ------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", default=str(REPO / "tasks"))
    ap.add_argument("--limit", type=int, default=None, help="first N cells (default all)")
    ap.add_argument("--json", action="store_true", help="print the measurements as JSON")
    ap.add_argument(
        "--grading-only",
        action="store_true",
        help="only compare grading with the trusted runner against exit-status commands",
    )
    ap.add_argument(
        "--integrity-only",
        action="store_true",
        help="only compare grading with canaries and a rebuilt tree against before issue 21",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="grade each cell this many times each way (median per cell; default 1)",
    )
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    bench = load_benchmark(Path(args.tasks))
    tasks = bench.task_ids()
    comparator, candidate = defs_cells.bench_cell_keys(str(bench.root))
    plan = [(t, c) for t in tasks for c in comparator] + [(t, c) for t in tasks for c in candidate]
    # review arms run on review tasks only, the others never there (ArmSpec.applies_to)
    plan = [
        (t, c)
        for t, c in plan
        if bench.config.arms[c.rsplit(".", 1)[0]].applies_to(bench.task(t).spec)
    ]
    if args.limit is not None:
        if args.limit < 1:
            ap.error("--limit must be >= 1")
        plan = plan[: args.limit]
    overlay = sorted(bench.candidates)[0] if bench.candidates else None
    predictions = {
        name: load_predictions(bench.root / arm.agent.predictions)
        for name, arm in bench.config.arms.items()
        if isinstance(arm.agent, ReplayAgent)
    }
    scratch = Path(tempfile.mkdtemp(prefix="wfbench-bench-cells-"))
    store = ArtifactStore(scratch / "artifacts")
    probe = SubprocessProbe(bench)
    probe.install()
    try:
        ensure_contained()
        _log(f"{len(plan)} cells; building inputs of {len(tasks)} tasks ...")
        start = _now()
        inputs = {t: build_cell_inputs(bench, t, store, candidate=overlay) for t in tasks}
        inputs_direct_s = _now() - start
        legacy = load_benchmark(legacy_tasks(bench.root, scratch / "tasks-before"))
        legacy_inputs = {t: build_cell_inputs(legacy, t, store, candidate=overlay) for t in tasks}
        if args.integrity_only:
            _log("grading with and without canaries and the rebuilt tree ...")
            g = print_integrity(compare_integrity(bench, inputs, plan, store))
            if args.json:
                print(json.dumps({"integrity": g}, indent=2))
            return
        if args.grading_only:
            _log("grading both ways ...")
            pairs = compare_grading(
                {"trusted": bench, "legacy": legacy},
                {"trusted": inputs, "legacy": legacy_inputs},
                plan,
                store,
                args.repeat,
            )
            g = grading_summary(pairs, args.repeat)
            if args.json:
                print(json.dumps({"grading": g}, indent=2))
            else:
                print_grading(g)
            return
        bare_dir = scratch / "bare"
        bare_dir.mkdir()
        t0, c0 = plan[0]
        bare_cell(bench, t0, c0, inputs[t0], predictions, bare_dir)  # warm-up, not counted
        bwrap_s = _median_of(
            lambda: sandbox.run(["true"], isolation=sandbox.Isolation.SANDBOX, timeout_s=60), 10
        )
        plain_s = _median_of(
            lambda: sandbox.run(["true"], isolation=sandbox.Isolation.HARNESS, timeout_s=60), 10
        )

        _log("direct run_cell loop ...")
        direct = run_direct(bench, plan, inputs, store, probe)
        _log("bare loop ...")
        bare = [bare_cell(bench, t, c, inputs[t], predictions, bare_dir) for t, c in plan]
        _log("grading both ways ...")
        grading = grading_summary(
            compare_grading(
                {"trusted": bench, "legacy": legacy},
                {"trusted": inputs, "legacy": legacy_inputs},
                plan,
                store,
                args.repeat,
            ),
            args.repeat,
        )

        with dg.instance_for_test() as instance:
            _log("Dagster: sync + materialize_inputs ...")
            start = _now()
            sync_instance(instance, bench)
            materialize_inputs(
                instance,
                tasks,
                tasks_dir=str(bench.root),
                artifact_root=str(store.root),
                progress=lambda _m: None,
            )
            dagster_inputs_s = _now() - start
            runs = []
            for label in ("fresh", "reused"):
                _log(f"Dagster: materialize_cells ({label}) ...")
                dp = DagsterProbe(probe, len(plan))
                dp.materialize_cells(
                    instance,
                    tasks,
                    tasks_dir=str(bench.root),
                    artifact_root=str(store.root),
                    force=False,
                    generation="bench",
                    candidate=overlay or "",
                )
                runs.append(dp)
        fresh, reused = runs[0].cells, runs[1].cells
        summary = summarize(
            direct,
            bare,
            fresh,
            reused,
            {
                "dagster_inputs_s": dagster_inputs_s,
                "overlay_s": runs[0].overlay_s,
                "bwrap_start_s": bwrap_s,
                "plain_start_s": plain_s,
                "inputs_direct_s": inputs_direct_s,
            },
        )
        summary["grading"] = grading
        if args.json:
            print(json.dumps(summary, indent=2))
        else:
            cpus = os.cpu_count()
            print_table(
                summary,
                f"wfbench demo cells: {len(plan)} cells of {len(tasks)} tasks, run sequentially "
                f"({cpus} CPUs, sandbox bwrap)",
            )
            print_grading(grading)
        if not args.json:
            _log("grading with and without canaries and the rebuilt tree ...")
            print_integrity(compare_integrity(bench, inputs, plan, store))
    finally:
        probe.uninstall()
        remove_tree(scratch)


if __name__ == "__main__":
    main()
