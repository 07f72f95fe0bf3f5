"""Operations on a Dagster instance shared by the CLI and the generation driver.

Partition sync and pool limits, in-process materialization (of any assets, and of the cells and the
decision), and reads of the latest cells and decisions. Materializing a benchmark's inputs is
:mod:`bench_assets.driver.inputs`' (``materialize_inputs``), beside the input phase it serves. The
CLI imports this lazily so that ``wfbench validate`` never pays for importing Dagster.

Why one file over 500 lines: the decision's materialization (one run, with the fallback run and
the refusal of an unfinished generation when the completeness check stops it) grew it to about
525, and ``driver/`` already has the 12 modules a room may hold (``tests/test_rooms.py``); the
decision path is the in-process materialization this module exists for.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg

from bench_assets.decision.documents import (
    AggregateSet,
    CellView,
    DecisionDocument,
    load_cell,
    load_decision,
)
from bench_assets.decision.ledger import LedgerEntry
from bench_assets.defs.partitions import TASKS_PARTITIONS_NAME
from bench_assets.defs.resources import latest_metadata, latest_metadata_by_partition
from bench_assets.driver import services
from bench_assets.generation.apply import ApplyResult
from bench_assets.kernel.errors import GenerationUnfinished, InputError, WfbenchError, error_class
from bench_assets.kernel.gcpause import gc_paused
from bench_assets.kernel.store import ArtifactStore, default_artifact_root
from bench_assets.tasks.catalog import Benchmark
from bench_assets.tasks.sync import SyncPlan, plan_sync

AGENT_POOL = "agent_sessions"
GRAPH_POOL = "graph_build"


def sync_instance(
    instance: dg.DagsterInstance, bench: Benchmark
) -> tuple[SyncPlan, dict[str, int]]:
    """Make the task partitions equal to ``bench``'s tasks and apply its pool limits.

    Writes only what changed: one insert of the new partition keys, one delete per removed key,
    and a pool limit only when it differs from the instance's (a repeated sync writes nothing).
    """
    current = list(instance.get_dynamic_partitions(TASKS_PARTITIONS_NAME))
    plan = plan_sync(current, bench.task_ids())
    if plan.add:
        instance.add_dynamic_partitions(TASKS_PARTITIONS_NAME, plan.add)
    for key in plan.delete:
        instance.delete_dynamic_partition(TASKS_PARTITIONS_NAME, key)
    limits = {
        AGENT_POOL: bench.config.limits.agent_sessions,
        GRAPH_POOL: bench.config.limits.graph_builds,
    }
    storage = instance.event_log_storage
    for pool, n in limits.items():
        info = storage.get_concurrency_info(pool)
        if info.slot_count != n or info.limit != n or info.using_default_limit:
            storage.set_concurrency_slots(pool, n)
    return plan, limits


QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
"""Run config keeping Dagster's step-by-step DEBUG log off the terminal (the CLI shows progress)."""


def materialize(
    instance: dg.DagsterInstance,
    assets: list[Any],
    resources: dict[str, Any],
    *,
    partition_key: str | None = None,
    op_config: dict[str, dict[str, Any]] | None = None,
    tags: dict[str, str] | None = None,
) -> None:
    """One quiet in-process run of ``assets``; a failed step raises :class:`StepFailed`."""
    run_quietly(
        lambda run_config: dg.materialize(
            assets,
            instance=instance,
            partition_key=partition_key,
            resources=resources,
            run_config=run_config,
            tags=tags,
            raise_on_error=False,
        ),
        op_config,
    )


def run_quietly(
    execute: Callable[[dict[str, Any]], dg.ExecuteInProcessResult],
    op_config: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Run ``execute(run_config)`` (an in-process run, ``raise_on_error=False``) with the quiet
    run config and ``op_config``, keeping a Ctrl-C that arrives meanwhile; a failed step raises
    :class:`StepFailed`. What :func:`materialize` and a ``cell_batch``'s cells share."""
    run_config: dict[str, Any] = dict(QUIET)
    if op_config:
        run_config["ops"] = {name: {"config": cfg} for name, cfg in op_config.items()}
    with _interrupts_kept():
        result = execute(run_config)
    _run(result)


@contextmanager
def _interrupts_kept() -> Iterator[None]:
    """Raise ``KeyboardInterrupt`` after a run during which Ctrl-C or SIGTERM arrived (Dagster
    would otherwise drop one that arrives after a step's last checkpoint, e.g. while it writes
    the step's events: the run then succeeds and the generation would go on paying cells)."""
    pipe = services.SignalPipe().open()
    try:
        yield
    finally:
        got = pipe.interrupted()
        pipe.close()
    if got:
        raise KeyboardInterrupt


_INTERRUPTS = {"DagsterExecutionInterruptedError", "KeyboardInterrupt"}


def _run(result: dg.ExecuteInProcessResult) -> None:
    """Re-raise the first step failure as the original wfbench error when there is one."""
    if result.success:
        return
    for event in result.all_events:
        info = getattr(event.event_specific_data, "error", None)
        while info is not None:
            if info.cls_name in _INTERRUPTS:
                # Ctrl-C/SIGTERM caught by Dagster (in a step, or setting up or tearing down
                # resources): stop the whole command rather than record an infra error.
                raise KeyboardInterrupt
            info = info.cause
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data is not None:
            chain = []
            info = event.step_failure_data.error
            while info is not None:
                chain.append(info)
                info = info.cause
            ours = [c for c in chain if c.cls_name and error_class(c.cls_name) is not None]
            chosen = ours[0] if ours else chain[-1] if chain else None
            name = chosen.cls_name if chosen is not None else "Error"
            message = chosen.message.strip() if chosen is not None else "step failed"
            raise StepFailed(event.step_key or "?", name or "Error", message)
    raise StepFailed("?", "Error", "run failed")


class StepFailed(Exception):
    """A materialization step failed; carries the original error's class name and message."""

    def __init__(self, step: str, cls_name: str, message: str) -> None:
        self.step, self.cls_name, self.message = step, cls_name, message
        super().__init__(step, cls_name, message)  # picklable across worker processes

    def __str__(self) -> str:
        return f"{self.step} failed: {self.message}"

    @property
    def error_class(self) -> type[WfbenchError] | None:
        """The :mod:`bench_assets.kernel.errors` class the step failed with; None if not one of
        them."""
        return error_class(self.cls_name)


def materialize_cells(
    instance: dg.DagsterInstance,
    task_ids: list[str],
    *,
    tasks_dir: str,
    artifact_root: str,
    force: bool,
    generation: str,
    candidate: str,
    progress: Callable[[str], None],
) -> list[dict[str, object]]:
    """Materialize the candidate overlay and every cell of ``task_ids``, one run per cell.

    Returns the latest metadata of each cell (task, cell, asset added).
    """
    from bench_assets.defs.cells import bench_cell_keys, build_cell_assets, candidate_overlay
    from bench_assets.defs.resources import BenchResource

    resources = {"bench": BenchResource(tasks_dir=tasks_dir, artifact_root=artifact_root)}
    comparator_keys, candidate_keys = bench_cell_keys(tasks_dir)
    comparator_cells, candidate_cells = build_cell_assets(*bench_cell_keys(tasks_dir, top_ups=True))
    if candidate_keys:
        progress("candidate_overlay ...")
        materialize(
            instance,
            [candidate_overlay],
            resources,
            op_config={"candidate_overlay": {"candidate": candidate}},
        )
    plan = [(t, c, comparator_cells) for t in task_ids for c in comparator_keys]
    plan += [(t, c, candidate_cells) for t in task_ids for c in candidate_keys]
    out: list[dict[str, object]] = []
    for i, (task, cell, asset) in enumerate(plan, 1):
        key = dg.MultiPartitionKey({"task": task, "cell": cell})
        name = asset.key.to_user_string()
        materialize(
            instance,
            [asset],
            resources,
            partition_key=str(key),
            op_config={name: {"force": force, "generation": generation}},
        )
        md = latest_metadata(instance, name, str(key))
        verdict = "resolved" if md.get("resolved") else str(md.get("error_kind"))
        tag = " (reused)" if md.get("reused") else ""
        progress(f"[{i}/{len(plan)}] {task} {cell}: {verdict}{tag}")
        out.append({"task": task, "cell": cell, "asset": name, **md})
    return out


def latest_cells(
    instance: dg.DagsterInstance, task_ids: list[str], tasks_dir: str
) -> list[CellView]:
    """Every cell partition's latest materialization with its record (record gone: left out).

    One bulk lookup per cell asset (:func:`latest_metadata_by_partition`), not one per cell.
    """
    from bench_assets.defs.cells import bench_cell_keys

    comparator_keys, candidate_keys = bench_cell_keys(tasks_dir, top_ups=True)
    out: list[CellView] = []
    for name, keys in (("comparator_cells", comparator_keys), ("candidate_cells", candidate_keys)):
        wanted = {
            str(dg.MultiPartitionKey({"task": task, "cell": cell})): (task, cell)
            for task in task_ids
            for cell in keys
        }
        found = latest_metadata_by_partition(instance, name, wanted)
        for pk, (task, cell) in wanted.items():
            md = found.get(pk)
            view = load_cell(task, cell, name, md) if md else None
            if view is not None:
                out.append(view)
    return out


@gc_paused()
def materialize_decision(
    instance: dg.DagsterInstance,
    task_ids: list[str],
    *,
    tasks_dir: str,
    artifact_root: str,
    generation: str,
    aborted: bool,
    progress: Callable[[str], None],
    aggregate: bool = True,
    refuse_unfinished: bool = False,
) -> dict[str, dict[str, object]]:
    """Aggregate every task, then decide and report; returns the decision's metadata.

    One run of ``aggregates``, ``promotion_decision`` and ``benchmark_report`` (a run's start-up
    and its event-log shard cost about a second, as much as deciding 100 tasks). When a planned
    cell has no acceptable evidence the aggregates' blocking ``aggregates_complete`` check stops
    that run before the decision; then the decision is made in a second run — its missing cells
    reach the gate as missing evidence, which can only yield ``insufficient_evidence`` — or, with
    ``refuse_unfinished``, nothing is decided and :class:`GenerationUnfinished` lists the cells
    (``wfbench decide --generation``). ``aggregate=False``: the aggregates are current already
    (a sequential look just materialized them and nothing was paid since).
    """
    from bench_assets.defs.decision import aggregates, benchmark_report, promotion_decision
    from bench_assets.defs.resources import BenchResource

    resources = {"bench": BenchResource(tasks_dir=tasks_dir, artifact_root=artifact_root)}
    gen_tags = {"wfbench/generation": generation} if generation else {}
    op_config = {"promotion_decision": {"generation": generation, "aborted": aborted}}
    deciding: list[Any] = [promotion_decision, benchmark_report]
    if aggregate:
        progress("aggregates, promotion_decision, benchmark_report ...")
        complete = _through_completeness(
            instance, [aggregates, *deciding], resources, op_config=op_config, tags=gen_tags
        )
        aset = _aggregates_progress(instance, task_ids, progress)
        if complete:
            return _decision_metadata(instance)
        if refuse_unfinished:
            listed = "; ".join(f"{r.task} {r.cell}: {r.reason}" for r in aset.refused[:5])
            raise GenerationUnfinished(
                f"generation {generation} is unfinished: {len(aset.refused)} planned cell(s) "
                f"have no acceptable evidence ({listed}); run `wfbench evolve` to finish it"
            )
    progress("promotion_decision, benchmark_report ...")
    materialize(instance, deciding, resources, op_config=op_config, tags=gen_tags)
    return _decision_metadata(instance)


def _decision_metadata(instance: dg.DagsterInstance) -> dict[str, dict[str, object]]:
    return {
        "decision": latest_metadata(instance, "promotion_decision", None),
        "report": latest_metadata(instance, "benchmark_report", None),
    }


def _through_completeness(
    instance: dg.DagsterInstance,
    assets: list[Any],
    resources: dict[str, Any],
    **kwargs: Any,
) -> bool:
    """:func:`materialize` a run that starts with ``aggregates``; False when its blocking
    ``aggregates_complete`` check failed (the assets after it did not run), any other failure
    raises."""
    try:
        materialize(instance, assets, resources, **kwargs)
    except StepFailed as e:
        if "aggregates_complete" not in e.message and "AssetCheck" not in e.cls_name:
            raise
        return False
    return True


def materialize_aggregates(
    instance: dg.DagsterInstance,
    task_ids: list[str],
    *,
    tasks_dir: str,
    artifact_root: str,
    generation: str,
    progress: Callable[[str], None],
) -> None:
    """Aggregate every task of a sequential look in one run of ``aggregates``.

    The tasks are the generation's (its manifest's) or, without one, every task partition;
    ``task_ids`` (the same tasks) names the incomplete ones. One unpartitioned materialization
    reads every cell in bulk (not one partition per task: at 1,000 tasks that cost a minute of
    Dagster events). A task whose cells are incomplete fails the ``aggregates_complete`` check
    but does not stop the look: its missing cells reach the gate as missing evidence.
    """
    from bench_assets.defs.decision import aggregates
    from bench_assets.defs.resources import BenchResource

    resources = {"bench": BenchResource(tasks_dir=tasks_dir, artifact_root=artifact_root)}
    tags = {"wfbench/generation": generation} if generation else None
    _through_completeness(instance, [aggregates], resources, tags=tags)
    _aggregates_progress(instance, task_ids, progress)


def _aggregates_progress(
    instance: dg.DagsterInstance, task_ids: list[str], progress: Callable[[str], None]
) -> AggregateSet:
    """The aggregate set just written, its incomplete tasks shown (the first few by name)."""
    from bench_assets.decision.documents import load_aggregate_set

    md = latest_metadata(instance, "aggregates", None)
    aset = load_aggregate_set(Path(str(md["record_path"])))
    wanted = set(task_ids)
    incomplete = [a for a in aset.tasks if a.task in wanted and a.missing_cells]
    for agg in incomplete[:MAX_INCOMPLETE_SHOWN]:
        progress(f"aggregates[{agg.task}]: INCOMPLETE (missing {', '.join(agg.missing_cells)})")
    if len(incomplete) > MAX_INCOMPLETE_SHOWN:
        progress(f"... and {len(incomplete) - MAX_INCOMPLETE_SHOWN} more incomplete task(s)")
    progress(
        f"aggregates: {len(task_ids)} task(s) in one run, {len(task_ids) - len(incomplete)} "
        "complete"
    )
    return aset


MAX_INCOMPLETE_SHOWN = 20
"""Incomplete tasks named one per line (the rest are counted; ``wfbench explain`` lists all)."""


RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


def partition_blocks(ordered: list[str], wanted: list[str]) -> list[tuple[str, str]]:
    """(first, last) of each contiguous run of ``wanted`` keys in the partitions' ``ordered`` keys.

    A range run covers every key between its ends in the partitions definition's order, so
    ``wanted`` keys separated by an unwanted one need two ranges.

    Raises:
        InputError: A wanted key is not a partition (the partitions are not in sync).
    """
    want = set(wanted)
    unknown = sorted(want - set(ordered))
    if unknown:
        raise InputError(
            f"task partition(s) {', '.join(unknown[:5])} do not exist; run `wfbench sync`"
        )
    blocks: list[tuple[str, str]] = []
    start: str | None = None
    prev: str | None = None
    for key in ordered:
        if key in want:
            start = key if start is None else start
            prev = key
        elif start is not None and prev is not None:
            blocks.append((start, prev))
            start = None
    if start is not None and prev is not None:
        blocks.append((start, prev))
    return blocks


def decision_records(instance: dg.DagsterInstance, limit: int = 200) -> list[dict[str, object]]:
    """Metadata of recent promotion_decision materializations, newest first."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("promotion_decision")), limit=limit
    ).records
    out = []
    for r in records:
        if r.asset_materialization is None:
            continue
        md: dict[str, object] = {k: v.value for k, v in r.asset_materialization.metadata.items()}
        md["run_id"] = r.run_id
        out.append(md)
    return out


def apply_latest(artifacts_root: str, generation: str) -> ApplyResult:
    """Apply the latest (or the given generation's) decision, if it is a generation's promote.

    The decision is taken from the ledger, not from the latest materialization: the newest
    decision entry (of ``generation`` if given). Refused (``ApplyRefused``, exit 2, nothing
    written) unless, besides :func:`bench_assets.generation.apply.apply_overlay`'s own checks:

    * the entry is generation-backed (an ad-hoc decision is never applied; the message says how
      to get a generation's), and its generation has a complete evidence manifest naming the
      same candidate and overlay;
    * its ``decision.json`` is the document the ledger recorded (same digest: not edited since);
    * every evidence cell it cites verifies against that manifest — its record unchanged since it
      was recorded, made for the planned identity (a candidate cell: for the decided overlay) —
      as :func:`bench_assets.decision.manifest.accept` checks it.
    """
    from bench_assets.decision import ledger as ledger_mod
    from bench_assets.generation import apply as apply_mod
    from bench_assets.kernel.errors import ApplyRefused

    root = Path(artifacts_root).resolve() if artifacts_root else default_artifact_root()
    store = ArtifactStore(root)
    entries = [
        e
        for e in ledger_mod.read(store.ledger())
        if e.decision != apply_mod.APPLIED and (not generation or e.generation == generation)
    ]
    if not entries:
        which = f" for generation {generation}" if generation else ""
        raise ApplyRefused(f"no promotion decision{which} in the ledger {store.ledger()}")
    entry = entries[-1]
    if entry.basis != "generation":
        raise ApplyRefused(
            f"the latest decision (ledger entry #{entry.seq}: {entry.decision} of "
            f"{entry.candidate}) is ad hoc (`wfbench decide` without --generation): only a "
            "generation's promote is applied; run `wfbench evolve` to evaluate the candidate in "
            "a generation (it resumes an unfinished one), then `wfbench apply`"
        )
    doc = _verified_decision(store, entry)
    return apply_mod.apply_overlay(
        Path(doc.skills_dir),
        Path(doc.overlay_files),
        expected=doc.target_base_digests,
        decision=doc.verdict,
        ledger=store.ledger(),
        decision_json=doc.model_dump(mode="json"),
        generation=doc.generation,
        candidate=doc.candidate,
        kind=entry.basis,
    )


def _verified_decision(store: ArtifactStore, entry: LedgerEntry) -> DecisionDocument:
    """The decision document of a generation-backed ledger entry, checked as
    :func:`apply_latest` says; ``ApplyRefused`` naming the first fault."""
    import json

    from bench_assets.decision.manifest import Candidate, accept, accept_current, load_complete
    from bench_assets.kernel.errors import ApplyRefused
    from bench_assets.kernel.hashing import sha256_json

    where = f"ledger entry #{entry.seq} ({entry.generation})"
    path = Path(str(entry.payload.get("decision_path", "")))
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ApplyRefused(f"{where}: its decision document {path} cannot be read: {e}") from None
    if sha256_json(body) != entry.decision_digest:
        raise ApplyRefused(f"{path}: not the decision {where} recorded (edited since)")
    doc = load_decision(path)
    try:
        manifest = load_complete(store.generation(str(entry.generation)))
    except InputError as e:
        raise ApplyRefused(f"{where}: {e}") from None
    if manifest is None or doc.generation != entry.generation:
        raise ApplyRefused(
            f"{where}: generation {entry.generation} has no evidence manifest; only a finished "
            "generation's promote is applied"
        )
    header = manifest.header
    if (doc.candidate, doc.overlay_digest) != (header.candidate, header.overlay_digest):
        raise ApplyRefused(
            f"{where}: decides on {doc.candidate} (overlay {doc.overlay_digest[:12]}), but "
            f"{entry.generation} evaluated {header.candidate} (overlay "
            f"{header.overlay_digest[:12]})"
        )
    planned = {(c.task, c.cell): c for c in manifest.cells()}
    for ev in doc.decision.evidence:
        # A pooled comparator run is an earlier record of a planned cell with its identity.
        cell = (ev.pooled_from or "") if ev.pooled else f"{ev.arm}.r{ev.run}"
        lin = doc.lineage_of(ev.task, ev.arm, ev.run)
        run_id = ev.pooled_run_id if ev.pooled else (lin.run_id if lin else None)
        found = [
            Candidate(
                run_id=run_id or "",
                data_version=ev.data_version,
                record_path=str(store.cell(ev.task, cell, ev.record_id) / "record.json"),
            )
        ]
        mc = planned.get((ev.task, cell))
        if mc is None:
            why = "not a cell the generation planned"
        elif ev.pooled:
            why = accept_current(mc.identity_digest, found)[1]
        else:
            why = accept(mc, header.generation, found)[1]
        if why:
            raise ApplyRefused(f"{where}: evidence cell {ev.task} {cell} does not verify: {why}")
    return doc
