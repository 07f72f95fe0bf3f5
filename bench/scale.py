"""How the harness's bookkeeping grows with the number of tasks: synthetic suites of 10 to 3,000.

A suite of N tasks is N copies of the demo task ``csv-quoted-fields`` (``t00000`` ...), with the
demo's ``bench.yaml`` (3 arms x 3 runs = 9 cells per task), skills, candidate queue, and each
predictions file holding the demo task's three lines once per copy. Every size gets a fresh
Dagster instance (a copy of ``dagster_home/dagster.yaml``) and a fresh artifact root. Timed, each
as a whole ``wfbench`` process (wall seconds, and its peak RSS from ``/usr/bin/time``):

* ``validate``, ``sync`` (first, then repeated: nothing to change);
* ``inputs`` (first: binds, captures and builds every task; repeated: everything unchanged);
* ``plan --json`` on the empty instance (every cell ``missing``/``candidate``);
* ``plan --json`` after generation g0001 (cells recorded, decision made: candidate c0002 next)
  and after g0002.

**What a "generation" is here.** Paying 9,000 real cells is far too slow for this machine, so a
generation is *recorded*, not paid: for every cell the previous plan says ``run``, the script
writes a real ``record.json`` (identity computed by the harness's own ``cell_identity`` from the
stored inputs, usage from the predictions file, outcome from ``replays/expected.json``) and
reports a runless materialization of the cell partition carrying exactly the metadata the cell
asset writes (``defs.cells.cell_metadata`` = display fields + ``CellMaterialization``) and the
record's data version. The decision is the real one: ``materialize_decision`` (aggregates for
all tasks in one ranged run, gate, report, ledger) in its own timed process. g0002 then records
only what the plan after g0001 says must run (candidate cells of c0002 + canaries).

Sizes above ``--real-inputs-max`` (default 1000) skip the two ``inputs`` timings: their input
materializations are recorded the same way (task t00000's real inputs, copied with each task's
own binding record), which is all planning reads.

Also measured, on the smallest size after g0002: the per-cell orchestration cost of a cell whose
record is reused (no session runs), through the Dagster run path (``QueueExecutor``: a queued
run per cell, launched by a daemon in its own process) and the in-process path
(``InProcessExecutor``), with the instance bytes each path adds per cell.

With ``--compare-history`` each generation is also decided on a throwaway copy of the instance
and artifacts with the pooled comparator history read one event-log query per comparator cell
(the lookup before the bulk one), and the report puts the time spent in that lookup and the whole
decide side by side: per-cell / bulk.

Run: ``.venv/bin/python bench/scale.py [--sizes 10,100,1000] [--json] [--workdir DIR]
[--compare-history]``.
Targets (the scale issue): plan after a generation at 1,000 tasks <= 10 s and <= 1 GB; growth of
that plan 1,000/100 <= 12x.
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
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import dagster as dg  # noqa: E402
import yaml  # noqa: E402

from bench_assets import binding as binding_mod  # noqa: E402
from bench_assets.agents.replay import cached_predictions  # noqa: E402
from bench_assets.catalog import Benchmark, load_benchmark  # noqa: E402
from bench_assets.cellkeys import cell_key, identity_digest  # noqa: E402
from bench_assets.cells import SANDBOX_BACKEND, cell_identity, make_adapter  # noqa: E402
from bench_assets.defs.cells import cell_metadata  # noqa: E402
from bench_assets.defs.resources import latest_metadata_by_partition  # noqa: E402
from bench_assets.documents import CellMaterialization  # noqa: E402
from bench_assets.driver.instance import INPUT_ASSETS  # noqa: E402
from bench_assets.driver.plan import stored_input_identities  # noqa: E402
from bench_assets.errorkinds import ErrorKind  # noqa: E402
from bench_assets.hashing import sha256_json, sha256_text  # noqa: E402
from bench_assets.models import ReplayAgent  # noqa: E402
from bench_assets.records import CellRecord, new_record_id, now_iso, write_record  # noqa: E402
from bench_assets.store import ArtifactStore  # noqa: E402

DEMO = REPO / "tasks"
DEMO_TASK = "csv-quoted-fields"
TARGET_PLAN_S = 10.0
TARGET_PLAN_MB = 1024.0
TARGET_GROWTH = 12.0
ORCHESTRATION_CELLS = 8
SCALE_ARMS = ("baseline", "workflow", "candidate_workflow")


def _log(msg: str) -> None:
    print(f"[bench/scale] {msg}", file=sys.stderr, flush=True)


def task_id(i: int) -> str:
    return f"t{i:05d}"


# ------------------------------------------------------------------------------------------------
# Suites and processes


def make_suite(n: int, dest: Path) -> Path:
    """N copies of the demo task, with the demo's bench.yaml, skills, candidates and replays."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    # The demo's three implementation arms (its review and two-phase arms have their own tasks
    # and replays): 9 cells per task.
    bench = yaml.safe_load((DEMO / "bench.yaml").read_text())
    bench["arms"] = {a: bench["arms"][a] for a in SCALE_ARMS}
    (dest / "bench.yaml").write_text(yaml.safe_dump(bench, sort_keys=False))
    for name in ("skills", "candidates"):
        shutil.copytree(DEMO / name, dest / name)
    # A third queued candidate, so the plan after g0002 still plans all 9 cells per task.
    third = dest / "candidates" / "c0003-scale"
    shutil.copytree(DEMO / "candidates" / "c0001-test-first", third)
    spec = yaml.safe_load((third / "candidate.yaml").read_text())
    (third / "candidate.yaml").write_text(yaml.safe_dump({**spec, "id": third.name}))
    with open(third / "files" / "work" / "SKILL.md", "a") as fh:
        fh.write("\nKeep the change small.\n")
    (dest / "replays").mkdir()
    shutil.copy(DEMO / "replays" / "expected.json", dest / "replays" / "expected.json")
    for path in sorted((DEMO / "replays").glob("*.jsonl")):
        mine = [
            json.loads(x)
            for x in path.read_text().splitlines()
            if x.strip() and json.loads(x)["instance_id"] == DEMO_TASK
        ]
        with open(dest / "replays" / path.name, "w") as fh:
            for i in range(n):
                for line in mine:
                    fh.write(json.dumps({**line, "instance_id": task_id(i)}) + "\n")
    spec = yaml.safe_load((DEMO / DEMO_TASK / "task.yaml").read_text())
    for i in range(n):
        d = dest / task_id(i)
        shutil.copytree(DEMO / DEMO_TASK, d)
        (d / "task.yaml").write_text(yaml.safe_dump({**spec, "id": d.name}, sort_keys=False))
    return dest


@dataclass
class Timed:
    """One whole process: wall time, peak RSS, exit code and what it printed."""

    label: str
    wall_s: float
    peak_mb: float
    rc: int
    stdout: str = ""
    stderr: str = ""


def timed(label: str, argv: list[str], env: dict[str, str]) -> Timed:
    """Run ``argv`` to its end; wall clock and the process's own peak RSS.

    The peak comes from ``/usr/bin/time -f %M``: a child forked straight from this (large)
    process would report this process's size as its own peak (Linux keeps the pre-exec high
    water mark), while GNU time forks the command from its own small process.
    """
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile(mode="r") as rss,
    ):
        start = time.perf_counter()
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", rss.name, *argv],
            stdout=out,
            stderr=err,
            env=env,
            cwd=REPO,
            check=False,
        )
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        words = rss.read().split()  # "Command exited with non-zero status N" precedes it
        peak_kb = int(words[-1]) if words and words[-1].isdigit() else 0
        res = Timed(
            label,
            wall,
            peak_kb / 1024,
            proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
        )
    tail = res.stderr.strip().splitlines()[-1:] if res.rc else []
    _log(f"{label}: {wall:.2f} s, {res.peak_mb:.0f} MB, exit {res.rc} {' '.join(tail)}")
    if res.rc:
        raise RuntimeError(f"{label} failed (exit {res.rc}):\n{res.stderr[-3000:]}")
    return res


def wfbench(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench_assets.cli", *args]


def tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def home_bytes(home: Path) -> int:
    """The instance folder (sqlite storage, compute logs); the artifact root is elsewhere."""
    return tree_bytes(home)


# ------------------------------------------------------------------------------------------------
# Recording state without paying for it


def _report(instance: dg.DagsterInstance, asset: str, partition: str, md: dict, dv: str) -> None:
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            asset, partition=partition, metadata=md, tags={"dagster/data_version": dv}
        )
    )


def record_inputs(instance: dg.DagsterInstance, bench: Benchmark, artifacts: ArtifactStore) -> int:
    """Input materializations of every task but t00000, from t00000's real ones (see docstring).

    Each task gets its own binding record (its id, repository identity, task-file digest and a
    commit SHA of its own); the oracle, template and graph are the same content for every copy,
    as ``wfbench inputs`` would find them.
    """
    first = task_id(0)
    stored = {a: latest_metadata_by_partition(instance, a, [first])[first] for a in INPUT_ASSETS}
    model = binding_mod.load(Path(str(stored["task_bindings"]["record_path"])))
    n = 0
    for task in bench.task_ids():
        if task == first:
            continue
        spec_digest = sha256_json(bench.task(task).spec.model_dump(mode="json", by_alias=True))
        sha = sha256_text(f"synthetic commit of {task}")[:40]
        b = model.model_copy(
            update={
                "task_id": task,
                "repo_identity": f"inline:{task}",
                "resolved_sha": sha,
                "task_file_digest": spec_digest,
            }
        )
        path = binding_mod.save(b, artifacts)
        md_b = {
            **_plain(stored["task_bindings"]),
            "resolved_sha": sha,
            "repo": f"inline: inline:{task}",
            "digest": b.digest,
            "record_path": dg.MetadataValue.path(str(path)),
        }
        _report(instance, "task_bindings", task, md_b, b.digest)
        o = _plain(stored["oracle_snapshots"])
        _report(instance, "oracle_snapshots", task, o, str(o["digest"]))
        g = {**_plain(stored["sanitized_graphs"]), "source_sha": sha}
        _report(
            instance, "sanitized_graphs", task, g, str(stored["sanitized_graphs"]["data_version"])
        )
        n += 3
    return n


def _plain(md: dict[str, Any]) -> dict[str, Any]:
    """Metadata values only (no tags, no conveniences), paths as path values."""
    out: dict[str, Any] = {}
    for k, v in md.items():
        if k.startswith("dagster/") or k in ("data_version", "run_id"):
            continue
        out[k] = dg.MetadataValue.path(v) if k.endswith("_path") else v
    return out


def record_generation(
    instance: dg.DagsterInstance,
    bench: Benchmark,
    artifacts: ArtifactStore,
    plan_rows: list[dict[str, Any]],
    *,
    generation: str,
    candidate: str,
) -> int:
    """Record a fresh cell for every ``run`` row of a plan, as a paid cell would be recorded.

    Like a generation, it first snapshots the incumbent skills and this generation's overlay
    (real materializations, in process).
    """
    from bench_assets.defs.cells import candidate_overlay
    from bench_assets.defs.inputs import incumbent_skills
    from bench_assets.defs.resources import BenchResource
    from bench_assets.driver.instance import materialize

    resources = {
        "bench": BenchResource(tasks_dir=str(bench.root), artifact_root=str(artifacts.root))
    }
    materialize(instance, [incumbent_skills], resources)
    materialize(
        instance,
        [candidate_overlay],
        resources,
        op_config={"candidate_overlay": {"candidate": candidate}},
    )
    tasks = sorted({r["task"] for r in plan_rows if r["action"] == "run"})
    identities, unusable = stored_input_identities(instance, bench, tasks, candidate=candidate)
    if unusable:
        raise RuntimeError(f"stored inputs unusable: {dict(list(unusable.items())[:3])}")
    expected = json.loads((bench.root / "replays" / "expected.json").read_text())
    adapters = {a: make_adapter(bench, spec) for a, spec in bench.config.arms.items()}
    n = 0
    for row in plan_rows:
        if row["action"] != "run":
            continue
        task, arm, run = row["task"], row["arm"], int(row["run"])
        spec = bench.config.arms[arm]
        ident = cell_identity(bench, task, arm, run, identities[task], adapters[arm])
        assert isinstance(spec.agent, ReplayAgent)
        pred = cached_predictions(bench.root / spec.agent.predictions)[(task, run)]
        outcome = expected[arm][DEMO_TASK][run]
        resolved = bool(outcome["verify"] and outcome["oracle"] and pred.model_patch.strip())
        kind = None
        if not resolved:
            kind = ErrorKind.VERIFY_FAILED if not outcome["verify"] else ErrorKind.ORACLE_FAILED
        u = pred.usage
        ids = identities[task]
        record_id = new_record_id()
        record = CellRecord(
            record_id=record_id,
            task=task,
            task_class=bench.task(task).spec.class_,
            arm=arm,
            role=spec.role,
            run=run,
            cell=cell_key(arm, run),
            generation=generation,
            adapter="replay",
            model=bench.config.model,
            effort=bench.config.effort,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_input_tokens=u.cache_read_input_tokens,
            cache_creation_input_tokens=u.cache_creation_input_tokens,
            total_tokens=u.total_tokens,
            cost_usd=u.cost_usd,
            turns=u.turns,
            agent_duration_s=u.duration_s,
            duration_s=1.0,
            churn_files=1,
            churn_insertions=10,
            churn_deletions=2,
            verify_passed=bool(outcome["verify"]),
            oracle_passed=bool(outcome["oracle"]),
            resolved=resolved,
            error_kind=kind,
            error_detail="",
            verify_tail="",
            protected_changed=[],
            session_ids=[],
            patch=None,
            transcript=None,
            identity_digest=identity_digest(ident),
            identity=ident,
            skills_digest=ident["skills"],
            overlay_digest=ident["overlay"],
            binding_digest=ids.binding.digest,
            resolved_sha=ids.binding.resolved_sha,
            sanitized_sha=ids.sanitized_sha,
            oracle_digest=ids.oracle_digest,
            graph_digest=ids.graph_digest,
            harness_version=str(ident["harness_version"]),
            agent_version=None,
            sandbox_backend=SANDBOX_BACKEND,
            timings={},
            recorded_at=now_iso(),
        )
        path = write_record(artifacts.cell(task, record.cell, record_id), record)
        lineage = CellMaterialization(
            record_path=str(path),
            identity_digest=record.identity_digest,
            error_kind=record.error_kind,
            generation=generation,
            recorded_at=record.recorded_at,
            reused=False,
            ran_because=f"{row['reason']} (recorded by bench/scale.py)",
        )
        asset = "candidate_cells" if spec.role == "candidate" else "comparator_cells"
        pk = str(dg.MultiPartitionKey({"task": task, "cell": record.cell}))
        _report(instance, asset, pk, cell_metadata(record, path, lineage), record.data_version)
        n += 1
    return n


DECIDE = """
import sys, json, time, warnings
import dagster as dg
warnings.filterwarnings("ignore")
from bench_assets.catalog import load_benchmark
from bench_assets.defs import decision, resources
from bench_assets.driver.instance import materialize_decision
if sys.argv[4] == "per-cell":  # the lookup before the bulk one: one event-log query per cell
    decision.partition_materializations_by_partition = lambda inst, asset, keys, limit: {
        k: resources.partition_materializations(inst, asset, k, limit) for k in keys}
pooled = decision._pooled_history
spent = []
def timed_pooled(*a, **kw):
    start = time.perf_counter()
    try:
        return pooled(*a, **kw)
    finally:
        spent.append(time.perf_counter() - start)
decision._pooled_history = timed_pooled
bench = load_benchmark(sys.argv[1])
out = materialize_decision(dg.DagsterInstance.get(), bench.task_ids(), tasks_dir=str(bench.root),
    artifact_root=sys.argv[2], generation=sys.argv[3], aborted=False,
    progress=lambda m: print(m, file=sys.stderr))
print(json.dumps({"decision": out["decision"].get("decision"),
    "pooled_history_s": sum(spent) if spent else None}))
"""


# ------------------------------------------------------------------------------------------------
# Per-cell orchestration: the Dagster run path vs in process


def orchestration(
    instance: dg.DagsterInstance, bench: Benchmark, artifacts: ArtifactStore, home: Path
) -> dict[str, Any]:
    """Reused comparator cells (no session) through the run queue and in process."""
    from bench_assets.driver.runqueue import InProcessExecutor, Job, QueueExecutor

    cells = [
        (t, cell_key(a, r))
        for t in bench.task_ids()
        for a in bench.config.comparator_arms()
        for r in range(bench.config.runs)
    ]
    out: dict[str, Any] = {}
    for name, picked in (
        ("in_process", cells[:ORCHESTRATION_CELLS]),
        ("run_queue", cells[ORCHESTRATION_CELLS : 2 * ORCHESTRATION_CELLS]),
    ):
        jobs = [
            Job(
                ("comparator_cells",),
                str(dg.MultiPartitionKey({"task": t, "cell": c})),
                op_config={"comparator_cells": {"force": False, "generation": ""}},
                tags={"dagster/partition/task": t, "dagster/partition/cell": c},
                label=f"{t} {c}",
            )
            for t, c in picked
        ]
        before = home_bytes(home)
        kwargs = {"tasks_dir": str(bench.root), "artifact_root": str(artifacts.root)}
        ex: Any = (
            InProcessExecutor(instance, **kwargs)
            if name == "in_process"
            else QueueExecutor(instance, **kwargs, progress=_log)
        )
        with ex:
            start = time.perf_counter()
            run_ids = [ex.submit(j) for j in jobs]
            finished = []
            while ex.pending():
                finished += ex.poll(1.0)
            wall = time.perf_counter() - start
        failed = [f.job.label for f in finished if not f.ok]
        if failed:
            raise RuntimeError(f"{name}: cells failed: {failed}")
        runs = [r for r in run_ids if r] or [f.run_id for f in finished]
        durations = []
        for run_id in runs:
            stats = instance.get_run_stats(run_id)
            if stats.start_time and stats.end_time:
                durations.append(stats.end_time - stats.start_time)
        mds = latest_metadata_by_partition(
            instance, "comparator_cells", [j.partition for j in jobs]
        )
        reused = sum(1 for md in mds.values() if md.get("reused"))
        out[name] = {
            "cells": len(jobs),
            "reused": reused,
            "wall_s": wall,
            "per_cell_s": wall / len(jobs),
            "median_run_s": statistics.median(durations) if durations else None,
            "home_bytes_per_cell": (home_bytes(home) - before) / len(jobs),
        }
        _log(f"orchestration {name}: {out[name]}")
    return out


# ------------------------------------------------------------------------------------------------
# One size


@dataclass
class SizeResult:
    tasks: int
    cells: int
    times: dict[str, float] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    setup: dict[str, float] = field(default_factory=dict)
    plans: dict[str, dict[str, int]] = field(default_factory=dict)
    decisions: dict[str, str] = field(default_factory=dict)
    orchestration: dict[str, Any] = field(default_factory=dict)
    pooled_history: dict[str, dict[str, float | None]] = field(default_factory=dict)
    """generation -> lookup ("bulk", "per-cell") -> seconds in ``_pooled_history``."""


def _counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {"run": 0, "reuse": 0}
    for r in rows:
        out[r["action"]] += 1
    return out


def _decide(
    res: SizeResult, n: int, root: Path, art: Path, env: dict[str, str], generation: str, how: str
) -> str:
    """One timed ``DECIDE`` process with the given pooled-history lookup; its verdict."""
    label = f"decide {generation}" + ("" if how == "bulk" else f" ({how})")
    decided = timed(
        f"{n}: {label}", [sys.executable, "-c", DECIDE, str(root), str(art), generation, how], env
    )
    res.times[label] = decided.wall_s
    res.peaks[label] = decided.peak_mb
    out = json.loads(decided.stdout.strip().splitlines()[-1])
    res.pooled_history.setdefault(generation, {})[how] = out["pooled_history_s"]
    return str(out["decision"])


def run_size(
    n: int,
    work: Path,
    *,
    real_inputs: bool,
    measure_orchestration: bool,
    compare_history: bool = False,
) -> SizeResult:
    _log(f"--- {n} tasks ---")
    root = make_suite(n, work / f"suite{n}")
    home, art = work / f"home{n}", work / f"art{n}"
    for d in (home, art):
        if d.exists():
            shutil.rmtree(d)
    home.mkdir(parents=True)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "WFBENCH_ARTIFACTS": str(art),
        "WFBENCH_TASKS": str(root),
    }
    os.environ.update({k: env[k] for k in ("DAGSTER_HOME", "WFBENCH_ARTIFACTS", "WFBENCH_TASKS")})
    res = SizeResult(tasks=n, cells=n * 9)

    def run(label: str, *args: str) -> Timed:
        t = timed(f"{n}: {label}", wfbench(*args), env)
        res.times[label] = t.wall_s
        res.peaks[label] = t.peak_mb
        return t

    run("validate", "validate", str(root))
    run("sync", "sync", "--tasks", str(root))
    run("sync (repeat)", "sync", "--tasks", str(root))
    instance = dg.DagsterInstance.get()
    artifacts = ArtifactStore(art)
    if real_inputs:
        run("inputs", "inputs", "--tasks", str(root))
        run("inputs (repeat)", "inputs", "--tasks", str(root))
    else:
        timed(
            f"{n}: inputs of t00000",
            wfbench("inputs", "--tasks", str(root), "--task", task_id(0)),
            env,
        )
        start = time.perf_counter()
        record_inputs(instance, load_benchmark(root), artifacts)
        res.setup["record inputs"] = time.perf_counter() - start
    res.sizes["after inputs"] = home_bytes(home)
    plan = json.loads(run("plan (empty)", "plan", "--json", "--tasks", str(root)).stdout)
    res.plans["empty"] = _counts(plan)
    bench = load_benchmark(root)
    for generation, candidate, label in (
        ("g0001", "c0001-test-first", "plan (after g0001)"),
        ("g0002", "c0002-plan-budget", "plan (after g0002)"),
    ):
        start = time.perf_counter()
        k = record_generation(
            instance, bench, artifacts, plan, generation=generation, candidate=candidate
        )
        res.setup[f"record {generation} ({k} cells)"] = time.perf_counter() - start
        res.sizes[f"{generation} cells"] = home_bytes(home)
        if compare_history:
            # The per-cell lookup decides on a copy of this state, after the real decision (so
            # it, not the bulk lookup, gets any warm file cache), and is then thrown away.
            twin_home, twin_art = work / f"home{n}-per-cell", work / f"art{n}-per-cell"
            for src, dst in ((home, twin_home), (art, twin_art)):
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(src, dst)
        res.decisions[generation] = _decide(res, n, root, art, env, generation, "bulk")
        if compare_history:
            twin_env = {**env, "DAGSTER_HOME": str(twin_home), "WFBENCH_ARTIFACTS": str(twin_art)}
            verdict = _decide(res, n, root, twin_art, twin_env, generation, "per-cell")
            if verdict != res.decisions[generation]:
                raise RuntimeError(
                    f"{generation}: per-cell history decided {verdict}, "
                    f"bulk {res.decisions[generation]}"
                )
            shutil.rmtree(twin_home, ignore_errors=True)
            shutil.rmtree(twin_art, ignore_errors=True)
        res.sizes[f"after {generation}"] = home_bytes(home)
        plan = json.loads(run(label, "plan", "--json", "--tasks", str(root)).stdout)
        res.plans[generation] = _counts(plan)
    res.sizes["artifacts"] = tree_bytes(art)
    if measure_orchestration:
        res.orchestration = orchestration(instance, bench, artifacts, home)
    return res


# ------------------------------------------------------------------------------------------------
# Report


COMMANDS = [
    "validate",
    "sync",
    "sync (repeat)",
    "inputs",
    "inputs (repeat)",
    "plan (empty)",
    "plan (after g0001)",
    "plan (after g0002)",
    "decide g0001",
    "decide g0001 (per-cell)",
    "decide g0002",
    "decide g0002 (per-cell)",
]


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.1f}x"


def report(results: list[SizeResult]) -> str:
    sizes = [r.tasks for r in results]
    pairs = list(zip(results, results[1:], strict=False))
    head = f"{'wall seconds (peak MB)':<24}" + "".join(f"{n:>16}" for n in sizes)
    head += "".join(f"{f'{b.tasks}/{a.tasks}':>12}" for a, b in pairs)
    lines = [
        "Scale of wfbench bookkeeping: synthetic suites (copies of the demo task, 9 cells each)",
        head,
        "-" * len(head),
    ]
    for c in COMMANDS:
        if not any(c in r.times for r in results):
            continue
        row = f"{c:<24}"
        for r in results:
            cell = f"{r.times[c]:.2f} ({r.peaks[c]:.0f})" if c in r.times else "-"
            row += f"{cell:>16}"
        for a, b in pairs:
            ok = c in a.times and c in b.times and a.times[c] > 0
            row += f"{f'{b.times[c] / a.times[c]:.1f}x' if ok else '-':>12}"
        lines.append(row)
    lines.append("")
    lines.append(f"{'instance MB':<24}" + "".join(f"{n:>16}" for n in sizes))
    for key in ("after inputs", "g0001 cells", "after g0001", "g0002 cells", "after g0002"):
        row = f"{key:<24}"
        for r in results:
            row += f"{r.sizes.get(key, 0) / 1e6:>16.1f}"
        lines.append(row)
    row = f"{'per generation (g0002)':<24}"
    for r in results:
        row += f"{(r.sizes['after g0002'] - r.sizes['after g0001']) / 1e6:>16.1f}"
    lines.append(row)
    row = f"{'artifacts MB':<24}"
    for r in results:
        row += f"{r.sizes['artifacts'] / 1e6:>16.1f}"
    lines.append(row)
    lines.append("")
    lines.append("plans (run/reuse):")
    for r in results:
        plans = ", ".join(f"{k} {v['run']}/{v['reuse']}" for k, v in r.plans.items())
        lines.append(f"  {r.tasks:>5} tasks: {plans}; decisions {r.decisions}")
    lines.append("setup (not harness cost, seconds):")
    for r in results:
        lines.append(
            f"  {r.tasks:>5} tasks: " + ", ".join(f"{k} {v:.0f}" for k, v in r.setup.items())
        )
    if any(r.pooled_history for r in results):
        lines.append("pooled comparator history inside decide, seconds (per-cell / bulk lookup):")
    for r in results:
        for generation, spent in r.pooled_history.items():
            bulk, per_cell = spent.get("bulk"), spent.get("per-cell")
            whole = [r.times.get(f"decide {generation}{x}") for x in ("", " (per-cell)")]
            row = f"  {r.tasks:>5} tasks {generation}: history {_s(per_cell)} / {_s(bulk)}"
            row += f" = {_ratio(per_cell, bulk)}; whole decide {_s(whole[1])} / {_s(whole[0])}"
            lines.append(row + f" = {_ratio(whole[1], whole[0])}")
    for r in results:
        if r.orchestration:
            lines.append(f"per-cell orchestration at {r.tasks} tasks (reused cells, no session):")
            for name, o in r.orchestration.items():
                med = o["median_run_s"]
                lines.append(
                    f"  {name:<10} {o['per_cell_s']:.2f} s/cell wall ({o['cells']} cells, "
                    f"{o['reused']} reused), median run {med if med is None else round(med, 2)} s, "
                    f"+{o['home_bytes_per_cell'] / 1e3:.0f} kB instance per cell"
                )
    big = next((r for r in results if r.tasks == 1000), None)
    hundred = next((r for r in results if r.tasks == 100), None)
    if big is not None and "plan (after g0001)" in big.times:
        s, mb = big.times["plan (after g0001)"], big.peaks["plan (after g0001)"]
        lines.append("targets (1,000 tasks x 9 cells, plan after a generation):")
        lines.append(f"  wall {s:.2f} s <= {TARGET_PLAN_S} s: {_met(s <= TARGET_PLAN_S)}")
        lines.append(f"  peak {mb:.0f} MB <= {TARGET_PLAN_MB:.0f} MB: {_met(mb <= TARGET_PLAN_MB)}")
        if hundred is not None and "plan (after g0001)" in hundred.times:
            g = s / hundred.times["plan (after g0001)"]
            lines.append(
                f"  growth 1000/100 {g:.1f}x <= {TARGET_GROWTH}x: {_met(g <= TARGET_GROWTH)}"
            )
    return "\n".join(lines)


def main() -> None:
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1000", help="comma-separated task counts")
    ap.add_argument("--real-inputs-max", type=int, default=1000)
    ap.add_argument("--workdir", type=Path, default=None, help="keep suites and instances here")
    ap.add_argument("--no-orchestration", action="store_true")
    ap.add_argument(
        "--compare-history",
        action="store_true",
        help="also decide each generation on a copy of the instance with the pooled comparator "
        "history read one query per cell (the lookup before the bulk one); report both",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    os.chdir(REPO)  # the run queue's workspace loads the code location from here
    work = args.workdir or Path(tempfile.mkdtemp(prefix="wfbench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for i, n in enumerate(sizes):
        results.append(
            run_size(
                n,
                work,
                real_inputs=n <= args.real_inputs_max,
                measure_orchestration=i == 0 and not args.no_orchestration,
                compare_history=args.compare_history,
            )
        )
        print(report(results) if not args.json else "", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps([r.__dict__ for r in results], indent=2, default=str))
    else:
        print(report(results))
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
