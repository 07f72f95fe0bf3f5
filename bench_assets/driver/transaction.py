"""What makes a generation a transaction (used by :mod:`bench_assets.driver.evolve`).

* its **evidence set**: :func:`manifest_cells` turns a task's plan into the manifest cells the
  decision will consume, :func:`candidates` lists a partition's materializations for
  :func:`bench_assets.decision.manifest.accept` (``wfbench decide --generation`` refuses while any
  planned cell has none: the aggregate set it verifies lists them);
* **resume**: :func:`unfinished` finds a planned generation without a decision,
  :func:`orphan_record` a record a killed run wrote but Dagster never recorded,
  :func:`paid_attempts` how many sessions a cell already paid (its retries survive a crash), and
  :func:`clear_orphans` ends runs a dead driver left queued or started and frees the pool slots
  they held;
* **inputs that cannot change under it**: :func:`verify_stored_inputs` re-verifies stored oracle
  snapshots and templates before anything is paid, and :func:`require_tasks_unchanged` aborts a
  generation whose benchmark files were edited while it ran.
"""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg

from bench_assets.cells.records import load_record
from bench_assets.decision import ledger as ledger_mod
from bench_assets.decision.manifest import (
    Candidate,
    ManifestCell,
    ManifestHeader,
    load_header,
)
from bench_assets.defs.resources import latest_metadata_by_partition, partition_materializations
from bench_assets.driver.runqueue import Executor
from bench_assets.generation.planner import PlannedCell
from bench_assets.inputs.build import discard_stored, stored_input_faults
from bench_assets.inputs.oracle import OracleSnapshot
from bench_assets.kernel.errors import InputError, RecordCorrupt
from bench_assets.kernel.hashing import tree_manifest
from bench_assets.kernel.store import ArtifactStore
from bench_assets.tasks.catalog import Benchmark

GEN_TAG = "wfbench/generation"
"""The run tag naming the generation a run belongs to (the UI filters a generation by it)."""


def candidates(instance: dg.DagsterInstance, cell: ManifestCell) -> list[Candidate]:
    """The partition's materializations, newest first, as evidence candidates."""
    key = str(dg.MultiPartitionKey({"task": cell.task, "cell": cell.cell}))
    found = (
        Candidate.from_metadata(md) for md in partition_materializations(instance, cell.asset, key)
    )
    return [c for c in found if c is not None]


def orphan_record(
    artifacts: ArtifactStore, cell: ManifestCell, generation: str, known: list[Candidate]
) -> str:
    """A finished record of this cell, identity and generation that Dagster never recorded.

    A cell's commit point is its ``record.json``; a kill between that write and Dagster's event
    log leaves the session paid but unrecorded. Its record id, or ``""`` when there is none. A
    record some materialization already names is never adopted (if it was refused as evidence,
    e.g. edited after it was written, adopting it would launder it).
    """
    folder = artifacts.cells_root() / cell.task / cell.cell
    named = {str(Path(c.record_path).resolve()) for c in known}
    for path in sorted(folder.glob("*/record.json"), reverse=True):
        if str(path.resolve()) in named:
            continue
        try:
            rec = load_record(path)
        except RecordCorrupt:
            continue
        if (
            rec.generation == generation
            and rec.identity_digest == cell.identity_digest
            and not rec.ad_hoc
        ):
            return rec.record_id
    return ""


def paid_attempts(artifacts: ArtifactStore, cell: ManifestCell, generation: str) -> int:
    """How many sessions of this cell and identity ``generation`` paid for: its finished records
    on disk (also those a killed run wrote but Dagster never recorded). A resumed generation
    counts its retries from these, so a crash neither cancels nor renews them."""
    folder = artifacts.cells_root() / cell.task / cell.cell
    n = 0
    for path in folder.glob("*/record.json"):
        try:
            rec = load_record(path)
        except RecordCorrupt:
            continue
        if (
            rec.generation == generation
            and rec.identity_digest == cell.identity_digest
            and not rec.ad_hoc
        ):
            n += 1
    return n


def manifest_cells(plan: list[PlannedCell], prior: dict[Any, Any]) -> list[ManifestCell]:
    """The evidence a task's plan commits the decision to."""
    out = []
    for pc in plan:
        if pc.identity_digest is None:
            raise ValueError(f"{pc.task} {pc.cell}: planned without its identity")
        before = prior.get((pc.task, pc.arm, pc.run)) if pc.action == "reuse" else None
        out.append(
            ManifestCell(
                task=pc.task,
                cell=pc.cell,
                asset="candidate_cells" if pc.role == "candidate" else "comparator_cells",
                role=pc.role,
                identity_digest=pc.identity_digest,
                action="reuse" if before is not None else "run",
                kind=pc.kind,
                source_run_id=before.run_id if before is not None else None,
                source_data_version=before.data_version if before is not None else None,
            )
        )
    return out


WATCH_EXCLUDE = frozenset({"__pycache__", ".pytest_cache", ".git", "candidates"})
"""Not watched for edits during a generation: build litter, and candidate overlays (the one this
generation evaluates is snapshotted by the ``candidate_overlay`` asset at its start)."""


def tasks_changes(root: Path, folder: Path) -> list[str]:
    """Files of the benchmark directory added, removed or edited since the generation started."""
    path = folder / "tasks-files.json"
    if not path.exists():  # a generation planned before its files were recorded
        return []
    before = {e["path"]: e for e in json.loads(path.read_text(encoding="utf-8"))}
    now = {e["path"]: e for e in tree_manifest(root, exclude=WATCH_EXCLUDE)}
    return sorted(p for p in set(before) | set(now) if before.get(p) != now.get(p))


def require_tasks_unchanged(root: Path, folder: Path, ex: Executor | None = None) -> None:
    """Abort the generation (cancelling its runs) if its benchmark files changed under it.

    Cells must be graded with the files their records name; a task edited mid-generation would
    grade later cells with the edited ``verify`` while their records claim the old digests.
    """
    changed = tasks_changes(root, folder)
    if changed:
        if ex is not None:
            ex.cancel_all()
        raise InputError(
            f"{root}: changed during the generation ({', '.join(changed[:5])}"
            f"{' …' if len(changed) > 5 else ''}); its cells must be graded with the files it "
            "started with: restore them and run `wfbench evolve` to resume, or remove "
            f"{folder} to abandon the generation"
        )


def verify_stored_inputs(
    instance: dg.DagsterInstance,
    bench: Benchmark,
    artifacts: ArtifactStore,
    progress: Callable[[str], None],
    tasks: list[str] | None = None,
) -> None:
    """Before anything is paid: each task's (of ``tasks``, default every task) stored oracle
    snapshot and template still verify.

    A corrupted one is discarded, so this generation's input run builds it again from the task
    (and fails closed, naming the file, if the task's own files no longer match its binding).
    """
    task_ids = tasks if tasks is not None else bench.task_ids()
    oracles = latest_metadata_by_partition(instance, "oracle_snapshots", task_ids)
    graphs = latest_metadata_by_partition(instance, "sanitized_graphs", task_ids)
    checked: set[tuple[str | None, str | None]] = set()
    for task in task_ids:
        oracle_md, graph_md = oracles.get(task, {}), graphs.get(task, {})
        # Content-addressed: tasks sharing an oracle snapshot or template are checked once.
        key = (oracle_md.get("digest"), graph_md.get("sanitized_sha"))
        if key in checked:
            continue
        checked.add(key)
        snapshot = None
        if oracle_md.get("record_path") and Path(str(oracle_md["record_path"])).is_file():
            text = Path(str(oracle_md["record_path"])).read_text(encoding="utf-8")
            try:
                snapshot = OracleSnapshot.model_validate_json(text)
            except ValueError:
                snapshot = None
        sha = str(graph_md["sanitized_sha"]) if graph_md.get("sanitized_sha") else None
        for path, why in stored_input_faults(artifacts, snapshot, sha):
            progress(f"{task}: stored input {path} failed verification ({why}); rebuilding it")
            discard_stored(path)


def unfinished(artifacts: ArtifactStore) -> ManifestHeader | None:
    """The newest planned generation that has no decision in the ledger yet (to resume)."""
    root = artifacts.root / "generations"
    if not root.is_dir():
        return None
    decided = set()
    if artifacts.ledger().exists():
        decided = {e.generation for e in ledger_mod.read(artifacts.ledger()) if e.generation}
    for folder in sorted(root.iterdir(), reverse=True):
        header = load_header(folder)
        if header is not None and header.generation not in decided:
            return header
    return None


def clear_orphans(instance: dg.DagsterInstance, progress: Callable[[str], None]) -> None:
    """End runs a dead generation left behind (we hold the writer lock: none is live).

    Queued runs are canceled; started ones are terminated through the run launcher, and any that
    cannot be reached (their worker died with the old driver) are marked failed, so the UI and
    the next plan see no phantom in-flight cell.
    """
    pending = [
        dg.DagsterRunStatus.QUEUED,
        dg.DagsterRunStatus.NOT_STARTED,
        dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.STARTED,
        dg.DagsterRunStatus.CANCELING,
    ]
    runs = [
        r for r in instance.get_runs(filters=dg.RunsFilter(statuses=pending)) if GEN_TAG in r.tags
    ]
    for run in runs:
        try:
            instance.run_coordinator.cancel_run(run.run_id)
        except Exception:  # the launcher cannot reach a worker that died with the old driver
            pass
        again = instance.get_run_by_id(run.run_id)
        if again is not None and not again.is_finished:
            instance.report_run_failed(
                again, "wfbench: the generation driver that launched this run is gone"
            )
    if runs:
        progress(f"ended {len(runs)} run(s) left by an interrupted generation")
    freed = free_leaked_slots(instance)
    if freed:
        progress(f"freed the pool slots {freed} ended run(s) still held")


def free_leaked_slots(instance: dg.DagsterInstance) -> int:
    """Free the pool slots (``agent_sessions``, ``graph_build``, ...) of runs that have ended.

    A run killed with its process (``kill -9`` of an in-process ``evolve``, of a run worker)
    never releases the slot it claimed, and marking it failed does not either: with a pool of 1
    the resumed generation's first cell would wait for it forever. Returns how many runs held
    one."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return 0
    holders: set[str] = set(storage.get_concurrency_run_ids())
    for pool in storage.get_concurrency_keys():
        info = storage.get_concurrency_info(pool)
        holders |= info.active_run_ids | {step.run_id for step in info.pending_steps}
    freed = 0
    for run_id in sorted(holders):
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            storage.free_concurrency_slots_for_run(run_id)
            freed += 1
    return freed
