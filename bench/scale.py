"""How wfbench's bookkeeping grows with the number of tasks, side by side with today's code.

A suite of N tasks is N copies of the demo task ``csv-quoted-fields`` (``t00000`` ...), with the
demo's ``bench.yaml`` (3 arms x 3 runs = 9 cells per task), skills, candidate queue, and each
predictions file holding the demo task's three lines once per copy. Every size gets a fresh
Dagster instance (a copy of ``dagster_home/dagster.yaml``) and a fresh artifact root. Each row is
one whole process (wall seconds, and its peak RSS from ``/usr/bin/time``):

* **fresh plan** — ``wfbench plan --json`` on the never-built suite (nothing stored, no record):
  every cell ``missing``/``candidate``; the number of tasks whose inputs were built to plan it
  is counted from its stderr (must be 0);
* **inputs, unchanged** — a generation's input phase after the inputs were materialized: the
  stored templates and oracles re-verified, the stale tasks found in bulk, and the input runs of
  the stale ones launched and waited for (``INPUT_PHASE``); prints the runs launched (must be 0);
* **inputs, 1 task edited** — the same after editing one task's prompt: exactly that task's
  inputs rebuilt (one ``input_batch`` run);
* **decide** — ``wfbench decide --generation g0001``, the command a user runs: every planned cell
  verified, aggregates, gate, report, ledger. The row fails (the script stops) unless the
  decision rests on every recorded cell and is not ``insufficient_evidence``: a decision that
  found no evidence is quick and measures nothing;
* **plan after g0001** — ``wfbench plan --json`` once g0001's cells are recorded;

and the growth 1,000/100 of each row.

**What a "generation" is here.** Paying 9,000 real cells is far too slow for this machine, so
g0001 is *recorded*, not paid: for every cell the fresh plan says ``run``, the script writes a real
``record.json`` (identity computed by the harness's own ``cell_identity`` from the stored inputs,
usage from the predictions file, outcome from ``replays/expected.json``), stores a
materialization of the cell partition under one run id of the generation carrying exactly the
metadata the cell asset writes (``defs.cells.cell_metadata``) and the record's data version, and
writes the generation's manifest (header and one plan per task), as ``wfbench evolve`` leaves
them. (Until 2026-12 the cells were reported runless and without a manifest: the decision
accepted none of them, and the row timed an ``insufficient_evidence`` decision over no evidence.)

Sizes above ``--real-inputs-max`` (default 100) do not build every task's inputs: task t00000's
real inputs are built, the others recorded from them the way Dagster records a materialization
(each task's own binding record and source digest, code versions and upstream data versions in
the provenance tags), which is all the input phase and planning read.

**Today's code** (``--today DIR``: a checkout of main's HEAD, e.g. ``git worktree add --detach
/tmp/main-head main``) is measured by running *its* ``bench/scale.py --json`` on the same sizes,
or read from a saved run (``--today-json FILE``), plus today's ``wfbench plan --json`` on a
never-built suite (``--today-fresh-max``, default 100 tasks). Its rows: that fresh plan;
``inputs (repeat)``
as its unchanged input phase — a lower bound: ``wfbench inputs`` materializes every task in
process, one run per task, while a generation launches one queued run per task with a run
start-up each (it has no other way; an edited task costs the same); ``decide g0001``.

Why one file over 500 lines (about 920): a bench script that builds its own suites, records
inputs and a whole generation without paying for them, and prints one table; every part is used
only here (``bench/decide_scale.py`` imports its recording helpers).

Run: ``.venv/bin/python bench/scale.py [--sizes 100,1000] [--today DIR | --today-json FILE]
[--json] [--workdir DIR]``.
Targets (issue 24): fresh plan at 1,000 tasks <= 10 s; the unchanged input phase at 1,000 tasks
<= 10 s with 0 input runs; one edited task rebuilds exactly that task; decide at 1,000 tasks
<= 10 s; growth 1,000/100 <= 12x for every row.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import dagster as dg  # noqa: E402
import yaml  # noqa: E402

from bench_assets.agents.replay import cached_predictions  # noqa: E402
from bench_assets.cells.cellkeys import cell_key, identity_digest  # noqa: E402
from bench_assets.cells.pipeline import SANDBOX_BACKEND, cell_identity, make_adapter  # noqa: E402
from bench_assets.cells.records import CellRecord, new_record_id, now_iso, write_record  # noqa: E402
from bench_assets.config.models import ReplayAgent  # noqa: E402
from bench_assets.decision.documents import CellMaterialization  # noqa: E402
from bench_assets.decision.manifest import (  # noqa: E402
    ManifestCell,
    ManifestHeader,
    TaskManifest,
    write_header,
    write_task,
)
from bench_assets.defs.cells import cell_metadata  # noqa: E402
from bench_assets.defs.resources import latest_metadata, latest_metadata_by_partition  # noqa: E402
from bench_assets.driver.plan import stored_input_identities  # noqa: E402
from bench_assets.driver.transaction import WATCH_EXCLUDE  # noqa: E402
from bench_assets.inputs import binding as binding_mod  # noqa: E402
from bench_assets.inputs import input_state  # noqa: E402
from bench_assets.inputs.input_state import INPUT_ASSETS  # noqa: E402
from bench_assets.kernel.errorkinds import ErrorKind  # noqa: E402
from bench_assets.kernel.hashing import sha256_json, sha256_text, tree_digest  # noqa: E402
from bench_assets.kernel.store import ArtifactStore  # noqa: E402
from bench_assets.tasks.catalog import Benchmark, load_benchmark  # noqa: E402

DEMO = REPO / "tasks"
DEMO_TASK = "csv-quoted-fields"
TARGET_GROWTH = 12.0
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
    return copy_demo_task(dest, n)


def copy_demo_task(dest: Path, n: int) -> Path:
    """Write ``n`` copies of the demo task into ``dest`` and each replays file's lines for them."""
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


def timed(label: str, argv: list[str], env: dict[str, str], cwd: Path = REPO) -> Timed:
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
            cwd=cwd,
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


# ------------------------------------------------------------------------------------------------
# Recording state without paying for it


def _report(
    instance: dg.DagsterInstance,
    asset: str,
    partition: str,
    md: dict,
    dv: str,
    tags: dict[str, str] | None = None,
) -> None:
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            asset, partition=partition, metadata=md, tags={**(tags or {}), DV_TAG: dv}
        )
    )


DV_TAG = "dagster/data_version"


def record_inputs(instance: dg.DagsterInstance, bench: Benchmark, artifacts: ArtifactStore) -> int:
    """Input materializations of every task but t00000, from t00000's real ones (see docstring).

    Each task gets its own binding record (its id, repository identity, task-file digest and a
    commit SHA of its own) and its own source digest; the oracle, template, graph and environment
    are the same content for every copy, as ``wfbench inputs`` would find them. Each event
    carries the provenance Dagster writes (code version; the upstream partitions' data versions).
    """
    first = task_id(0)
    stored = {a: latest_metadata_by_partition(instance, a, [first])[first] for a in INPUT_ASSETS}
    model = binding_mod.load(Path(str(stored["task_bindings"]["record_path"])))
    tasks = [t for t in bench.task_ids() if t != first]
    sources = input_state.source_digests(bench, tasks)
    code = {a: str(stored[a]["dagster/code_version"]) for a in INPUT_ASSETS}
    up = input_state.partition_input_version
    n = 0
    for task in tasks:
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
            input_state.SOURCE_KEY: sources[task],
            "resolved_sha": sha,
            "repo": f"inline: inline:{task}",
            "digest": b.digest,
            "record_path": dg.MetadataValue.path(str(path)),
        }
        cv = input_state.CODE_VERSION_TAG
        iv = input_state.INPUT_VERSION_TAG
        _report(instance, "task_bindings", task, md_b, b.digest, {cv: code["task_bindings"]})
        o = _plain(stored["oracle_snapshots"])
        o_dv = str(stored["oracle_snapshots"]["data_version"])
        _report(
            instance,
            "oracle_snapshots",
            task,
            o,
            o_dv,
            {cv: code["oracle_snapshots"], iv + "task_bindings": up(b.digest)},
        )
        g = {**_plain(stored["sanitized_graphs"]), "source_sha": sha}
        _report(
            instance,
            "sanitized_graphs",
            task,
            g,
            str(stored["sanitized_graphs"]["data_version"]),
            {
                cv: code["sanitized_graphs"],
                iv + "task_bindings": up(b.digest),
                iv + "oracle_snapshots": up(o_dv),
            },
        )
        _report(
            instance,
            "task_environments",
            task,
            _plain(stored["task_environments"]),
            str(stored["task_environments"]["data_version"]),
            {cv: code["task_environments"], iv + "task_bindings": up(b.digest)},
        )
        n += 4
    return n


def _plain(md: dict[str, Any]) -> dict[str, Any]:
    """Metadata values only (no tags, no conveniences), paths as path values."""
    out: dict[str, Any] = {}
    for k, v in md.items():
        if k.startswith("dagster/") or k in ("data_version", "run_id"):
            continue
        out[k] = dg.MetadataValue.path(v) if k.endswith("_path") else v
    return out


def replayed_fields(
    bench: Benchmark, task: str, arm: str, run: int, generation: str, pred: Any, outcome: dict
) -> dict[str, Any]:
    """A replayed cell record's fields apart from its identity: what the prediction and the demo
    task's expected outcome say (shared with ``bench/decide_scale.py``)."""
    spec = bench.config.arms[arm]
    resolved = bool(outcome["verify"] and outcome["oracle"] and pred.model_patch.strip())
    kind = None
    if not resolved:
        kind = ErrorKind.VERIFY_FAILED if not outcome["verify"] else ErrorKind.ORACLE_FAILED
    u = pred.usage
    return dict(
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
    )


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
    folder = artifacts.generation(generation)
    write_generation_header(
        instance,
        folder,
        generation,
        candidate,
        bench.task_ids(),
        bench.root,
        tree_digest(bench.root, exclude=WATCH_EXCLUDE),
    )
    run_id = f"{generation}-recorded-by-bench-scale"
    planned: dict[str, list[ManifestCell]] = {t: [] for t in bench.task_ids()}
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
        ids = identities[task]
        record_id = new_record_id()
        record = CellRecord(
            record_id=record_id,
            **replayed_fields(bench, task, arm, run, generation, pred, outcome),
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
        store_event(
            instance, asset, pk, cell_metadata(record, path, lineage), record.data_version, run_id
        )
        planned[task].append(
            ManifestCell(
                task=task,
                cell=record.cell,
                asset=asset,
                role=spec.role,
                identity_digest=record.identity_digest,
                action="run",
                kind=str(row["kind"]),
            )
        )
        n += 1
    flush_events(instance)
    for task, cells in planned.items():
        write_task(folder, TaskManifest(generation=generation, task=task, cells=cells))
    return n


def write_generation_header(
    instance: dg.DagsterInstance,
    folder: Path,
    generation: str,
    candidate: str,
    tasks: list[str],
    root: Path,
    tasks_digest: str,
) -> None:
    """A generation's manifest header, with the overlay and skills digests the instance's latest
    ``candidate_overlay`` and ``incumbent_skills`` name (shared with ``bench/decide_scale.py``)."""
    write_header(
        folder,
        ManifestHeader(
            generation=generation,
            candidate=candidate,
            overlay_digest=str(latest_metadata(instance, "candidate_overlay", None)["digest"]),
            skills_digest=str(latest_metadata(instance, "incumbent_skills", None)["digest"]),
            tasks=tasks,
            tasks_dir=str(root),
            tasks_digest=tasks_digest,
            created_at=now_iso(),
        ),
    )


_PENDING: list[Any] = []


def store_event(
    instance: dg.DagsterInstance, asset: str, pk: str, md: dict, dv: str, run: str
) -> None:
    """A cell materialization under run id ``run``, as a paid cell's run records it (no run is
    created: only the event; a runless report has no run id, and a decision accepts no cell
    without one); written by :func:`flush_events` (shared with ``bench/decide_scale.py``)."""
    from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
    from dagster._core.events.log import EventLogEntry

    mat = dg.AssetMaterialization(asset, partition=pk, metadata=md, tags={DV_TAG: dv})
    event = DagsterEvent(
        event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
        event_specific_data=StepMaterializationData(mat),
        job_name="__ASSET_JOB",
    )
    _PENDING.append(
        EventLogEntry(
            user_message="",
            level=20,
            job_name=event.job_name,
            run_id=run,
            error_info=None,
            timestamp=time.time(),
            step_key=None,
            dagster_event=event,
        )
    )
    if len(_PENDING) >= 500:
        flush_events(instance)


def flush_events(instance: dg.DagsterInstance) -> None:
    """Write the pending events as the sqlite event log's ``store_event`` does (index shard:
    event, its tags, the asset's latest), in one transaction instead of one connection and two
    commits per event: setup only, 9,000 to 18,000 events."""
    from dagster._core.storage.sqlalchemy_compat import db_result

    storage: Any = instance.event_log_storage
    if not _PENDING:
        return
    with storage.index_transaction() as conn:
        for event in _PENDING:
            stmt = storage.prepare_insert_event(event)
            with db_result(conn, stmt) as result:
                event_id = result.inserted_primary_key[0]
            storage._store_asset_event_tags(conn, [event], [event_id])
            storage._store_asset_event(conn, event, event_id)
    _PENDING.clear()


INPUT_PHASE = """
import sys, json, warnings
from pathlib import Path
warnings.filterwarnings("ignore")
import dagster as dg
from bench_assets.tasks.catalog import load_benchmark
from bench_assets.kernel.store import ArtifactStore
from bench_assets.driver.inputs import (
    input_job_tasks, input_jobs, run_pool_granularity, stale_input_tasks)
from bench_assets.driver.instance import sync_instance
from bench_assets.driver.runqueue import InProcessExecutor
from bench_assets.driver.transaction import verify_stored_inputs
root, art = sys.argv[1], sys.argv[2]
bench = load_benchmark(root)
instance = dg.DagsterInstance.get()
log = lambda m: print(m, file=sys.stderr)
sync_instance(instance, bench)
tasks = bench.task_ids()
verify_stored_inputs(instance, bench, ArtifactStore(Path(art)), log, tasks=tasks)
stale = stale_input_tasks(instance, bench, tasks)
jobs = input_jobs([t for t in tasks if t in stale], tags={},
    batched=run_pool_granularity(instance), slots=bench.config.limits.graph_builds)
rebuilt = []
with InProcessExecutor(instance, tasks_dir=str(bench.root), artifact_root=art) as ex:
    for job in jobs:
        ex.submit(job)
    while ex.pending():
        for done in ex.poll(1.0):
            if not done.ok:
                raise done.failure
            rebuilt += input_job_tasks(done.job)
print(json.dumps({"stale": len(stale), "runs": len(jobs), "rebuilt": rebuilt}))
"""


# ------------------------------------------------------------------------------------------------
# One size


@dataclass
class SizeResult:
    tasks: int
    cells: int
    times: dict[str, float] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    setup: dict[str, float] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)


def _counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {"run": 0, "reuse": 0}
    for r in rows:
        out[r["action"]] += 1
    return out


def decision_evidence(stdout: str) -> tuple[str, int]:
    """The verdict of ``wfbench decide --json`` and the number of evidence cells its decision
    document names."""
    md = json.loads(stdout)["decision"]
    doc = json.loads(Path(str(md["decision_path"])).read_text(encoding="utf-8"))
    return str(md["decision"]), len(doc["lineage"])


FRESH, UNCHANGED, EDITED, DECIDE_ROW, PLAN_AFTER = (
    "fresh plan",
    "inputs, unchanged",
    "inputs, 1 task edited",
    "decide",
    "plan after g0001",
)
ROWS = [FRESH, UNCHANGED, EDITED, DECIDE_ROW, PLAN_AFTER]
TODAY_ROWS = {
    FRESH: "plan (fresh)",
    UNCHANGED: "inputs (repeat)",
    EDITED: "inputs (repeat)",
    DECIDE_ROW: "decide g0001",
    PLAN_AFTER: "plan (after g0001)",
}


def run_size(n: int, work: Path, *, real_inputs: bool) -> SizeResult:
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

    def row(label: str, t: Timed) -> Timed:
        res.times[label] = t.wall_s
        res.peaks[label] = t.peak_mb
        return t

    timed(f"{n}: sync", wfbench("sync", "--tasks", str(root)), env)
    fresh = row(FRESH, timed(f"{n}: {FRESH}", wfbench("plan", "--json", "--tasks", str(root)), env))
    plan = json.loads(fresh.stdout)
    built = fresh.stderr.count("building its inputs directly")
    res.checks["fresh plan: tasks whose inputs were built"] = built
    res.notes[FRESH] = f"{built} built"
    instance = dg.DagsterInstance.get()
    artifacts = ArtifactStore(art)
    start = time.perf_counter()
    if real_inputs:
        timed(f"{n}: inputs", wfbench("inputs", "--tasks", str(root)), env)
    else:
        timed(
            f"{n}: inputs of t00000",
            wfbench("inputs", "--tasks", str(root), "--task", task_id(0)),
            env,
        )
        record_inputs(instance, load_benchmark(root), artifacts)
    res.setup["inputs"] = time.perf_counter() - start

    def input_phase(label: str) -> dict[str, Any]:
        t = row(
            label,
            timed(f"{n}: {label}", [sys.executable, "-c", INPUT_PHASE, str(root), str(art)], env),
        )
        out: dict[str, Any] = json.loads(t.stdout.strip().splitlines()[-1])
        res.notes[label] = f"{out['runs']} runs"
        return out

    out = input_phase(UNCHANGED)
    res.checks["unchanged: input runs launched"] = out["runs"]
    bench = load_benchmark(root)
    start = time.perf_counter()
    k = record_generation(
        instance, bench, artifacts, plan, generation="g0001", candidate="c0001-test-first"
    )
    res.setup[f"record g0001 ({k} cells)"] = time.perf_counter() - start
    decided = row(
        DECIDE_ROW,
        timed(
            f"{n}: {DECIDE_ROW}",
            wfbench("decide", "--generation", "g0001", "--json", "--tasks", str(root)),
            env,
        ),
    )
    verdict, evidence = decision_evidence(decided.stdout)
    res.checks["decision g0001"] = verdict
    res.checks["decision g0001: evidence cells"] = evidence
    res.notes[DECIDE_ROW] = f"{verdict}, {evidence} cells"
    if verdict == "insufficient_evidence" or evidence != k:
        raise RuntimeError(
            f"{n}: decide g0001 decided {verdict} on {evidence} evidence cell(s) of the {k} "
            "recorded: the row would time a decision that read no evidence"
        )
    after = row(
        PLAN_AFTER,
        timed(f"{n}: {PLAN_AFTER}", wfbench("plan", "--json", "--tasks", str(root)), env),
    )
    res.checks["plan after g0001 (run/reuse)"] = _counts(json.loads(after.stdout))
    edited = task_id(1)
    task_file = root / edited / "task.yaml"
    spec = yaml.safe_load(task_file.read_text())
    task_file.write_text(yaml.safe_dump({**spec, "prompt": spec["prompt"] + "\nBe brief.\n"}))
    out = input_phase(EDITED)
    res.checks["edited: tasks rebuilt"] = out["rebuilt"]
    res.notes[EDITED] = f"{out['runs']} run, {len(out['rebuilt'])} task"
    return res


def run_today(
    checkout: Path, sizes: list[int], work: Path, real_inputs_max: int, fresh_max: int
) -> list[dict]:
    """Today's ``bench/scale.py --json`` (in ``checkout``) on the same sizes, plus today's
    ``wfbench plan --json`` on each never-built suite of at most ``fresh_max`` tasks (its own
    bench measures ``plan (empty)`` only after ``wfbench inputs``)."""
    argv = [
        sys.executable,
        str(checkout / "bench" / "scale.py"),
        "--sizes",
        ",".join(str(n) for n in sizes),
        "--real-inputs-max",
        str(real_inputs_max),
        "--workdir",
        str(work / "today"),
        "--json",
    ]
    script = (checkout / "bench" / "scale.py").read_text(encoding="utf-8")
    if 'add_argument("--no-orchestration"' in script:  # the issue-time script's extra rows
        argv.append("--no-orchestration")
    _log(f"today's code: {' '.join(argv)}")
    proc = subprocess.run(argv, cwd=checkout, stdout=subprocess.PIPE, check=True)
    results: list[dict] = json.loads(proc.stdout)
    for r in results:
        n = int(r["tasks"])
        if n > fresh_max or FRESH in r["times"]:  # a script with this one's rows timed it
            continue
        t = today_fresh_plan(checkout, n, work / "today-fresh")
        r["times"]["plan (fresh)"], r["peaks"]["plan (fresh)"] = t.wall_s, t.peak_mb
    return results


def today_fresh_plan(checkout: Path, n: int, work: Path) -> Timed:
    """Today's ``wfbench plan --json`` on a fresh instance and a never-built suite of ``n``."""
    root = make_suite(n, work / f"suite{n}")
    home = work / f"home{n}"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    shutil.copy(checkout / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "WFBENCH_ARTIFACTS": str(work / f"art{n}"),
        "WFBENCH_TASKS": str(root),
    }
    cli = [sys.executable, "-m", "bench_assets.cli"]
    subprocess.run([*cli, "sync", "--tasks", str(root)], cwd=checkout, env=env, check=True)
    return timed(
        f"today {n}: fresh plan", [*cli, "plan", "--json", "--tasks", str(root)], env, cwd=checkout
    )


# ------------------------------------------------------------------------------------------------
# Report


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _cell(times: dict, peaks: dict, key: str) -> str:
    return f"{times[key]:.2f} ({peaks[key]:.0f})" if key in times else "-"


def _today_key(today: dict, label: str) -> str:
    """The row's name in today's results: its own (a checkout with this script's rows, e.g.
    the previous stop's) or what the issue-time script called it."""
    return label if label in today["times"] else TODAY_ROWS[label]


def report(results: list[SizeResult], today: list[dict]) -> str:
    by_n = {int(t["tasks"]): t for t in today}
    sizes = [r.tasks for r in results]
    head = f"{'wall s (peak MB)':<24}"
    for n in sizes:
        head += f"{f'{n} today':>18}{f'{n} new':>18}"
    head += f"{'growth new':>12}{'growth today':>14}{'new/today':>11}   note (new)"
    lines = [
        "Scale of wfbench (synthetic suites, copies of the demo task, 9 cells each):",
        head,
        "-" * len(head),
    ]
    first, last = results[0], results[-1]
    for label in ROWS:
        line = f"{label:<24}"
        for r in results:
            t = by_n.get(r.tasks)
            today_cell = _cell(t["times"], t["peaks"], _today_key(t, label)) if t else "-"
            line += f"{today_cell:>18}{_cell(r.times, r.peaks, label):>18}"
        g = (
            f"{last.times[label] / first.times[label]:.1f}x"
            if len(results) > 1 and label in first.times and label in last.times
            else "-"
        )
        tf, tl = by_n.get(first.tasks), by_n.get(last.tasks)
        key = _today_key(tl, label) if tl else TODAY_ROWS[label]
        gt = (
            f"{tl['times'][key] / tf['times'][key]:.1f}x"
            if len(results) > 1 and tf and tl and key in tf["times"] and key in tl["times"]
            else "-"
        )
        vs_today = (
            f"{last.times[label] / tl['times'][key]:.2f}x"
            if tl and key in tl["times"] and label in last.times
            else "-"
        )
        notes = "; ".join(r.notes.get(label, "") for r in results if r.notes.get(label))
        line += f"{g:>12}{gt:>14}{vs_today:>11}   {notes}"
        lines.append(line)
    if any(UNCHANGED not in t["times"] for t in today):
        lines.append(
            "today's 'inputs' rows are `wfbench inputs` (every task re-materialized in process, "
            "one run per task): a lower bound of its generation's input phase, which launches one "
            "queued run per task whatever changed"
        )
    lines.append("'-' = not run at that size")
    lines.append("checks:")
    for r in results:
        lines.append(
            f"  {r.tasks:>5} tasks: " + "; ".join(f"{k}: {v}" for k, v in r.checks.items())
        )
    lines.append("setup (not harness cost, seconds):")
    for r in results:
        lines.append(
            f"  {r.tasks:>5} tasks: " + ", ".join(f"{k} {v:.0f}" for k, v in r.setup.items())
        )
    big = next((r for r in results if r.tasks == 1000), None)
    small = next((r for r in results if r.tasks == 100), None)
    if big is not None:
        lines.append("targets (1,000 tasks):")
        for label, target in ((FRESH, 10.0), (UNCHANGED, 10.0), (DECIDE_ROW, 10.0)):
            s = big.times.get(label)
            if s is not None:
                lines.append(f"  {label}: {s:.2f} s <= {target} s: {_met(s <= target)}")
        runs = big.checks.get("unchanged: input runs launched")
        lines.append(f"  unchanged input runs launched: {runs} == 0: {_met(runs == 0)}")
        rebuilt = big.checks.get("edited: tasks rebuilt")
        lines.append(f"  edited: rebuilt {rebuilt} == ['t00001']: {_met(rebuilt == ['t00001'])}")
        if small is not None:
            for label in ROWS:
                if label in small.times and label in big.times:
                    ratio = big.times[label] / small.times[label]
                    lines.append(
                        f"  growth {label} 1000/100 {ratio:.1f}x <= {TARGET_GROWTH}x: "
                        f"{_met(ratio <= TARGET_GROWTH)}"
                    )
    return "\n".join(lines)


def main() -> None:
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000", help="comma-separated task counts")
    ap.add_argument("--real-inputs-max", type=int, default=100)
    ap.add_argument("--workdir", type=Path, default=None, help="keep suites and instances here")
    ap.add_argument("--today", type=Path, default=None, help="a checkout of main's HEAD to compare")
    ap.add_argument("--today-json", type=Path, default=None, help="its saved `--json` results")
    ap.add_argument(
        "--today-fresh-max",
        type=int,
        default=100,
        help="time today's fresh plan up to this size (398 s at 1,000 tasks on a quiet machine)",
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--report-only",
        type=Path,
        default=None,
        help="print the table from a saved `--json` run (with --today-json) instead of measuring",
    )
    args = ap.parse_args()
    if args.report_only is not None:
        saved = [SizeResult(**r) for r in json.loads(args.report_only.read_text())]
        today_saved = json.loads(args.today_json.read_text()) if args.today_json else []
        print(report(saved, today_saved))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    os.chdir(REPO)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="wfbench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    today: list[dict] = []
    if args.today_json is not None:
        today = json.loads(args.today_json.read_text())
    elif args.today is not None:
        today = run_today(
            args.today.resolve(), sizes, work, args.real_inputs_max, args.today_fresh_max
        )
    results = []
    for n in sizes:
        results.append(run_size(n, work, real_inputs=n <= args.real_inputs_max))
        print(report(results, today), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps([r.__dict__ for r in results], indent=2, default=str))
    else:
        print(report(results, today))
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
