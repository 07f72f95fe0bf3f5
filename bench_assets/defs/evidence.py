"""What a decision may rest on: each cell's evidence, verified the same way on every path.

With a generation's manifest, :func:`collect_manifest_inputs` accepts exactly the planned cells
(:func:`bench_assets.decision.manifest.accept`). Without one — ``wfbench decide`` without
``--generation``, ``promotion_decision`` materialized from the UI — :func:`collect_current_inputs`
verifies the latest records against the identity each cell's arm has *now*
(:func:`current_identities`, :func:`bench_assets.decision.manifest.accept_current`): the content
digest must equal the data version, the identity (overlay, skills, inputs, agent, grader, ...) the
one a materialization would compute at this moment, so another candidate's cell is never evidence.
And :func:`verify_evidence` lets the decision check the aggregates' rows again, so an aggregate
older than the overlay it is asked about lends it nothing. A cell that fails is refused, with the
reason (:class:`~bench_assets.decision.documents.RefusedCell`).
"""

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import dagster as dg

from bench_assets.cells.cellkeys import identity_digest, parse_cell_key
from bench_assets.cells.pipeline import CellInputs, cell_identity, make_adapter
from bench_assets.decision import aggregate as agg_mod
from bench_assets.decision import manifest as manifest_mod
from bench_assets.decision.documents import RefusedCell
from bench_assets.decision.manifest import ManifestCell, TaskManifest
from bench_assets.defs.cells import Upstream, load_cell_inputs, prefetched_upstream
from bench_assets.defs.resources import (
    BenchResource,
    materialization_ids_by_partition,
    metadata_by_storage_id,
    partition_materializations_by_partition,
)
from bench_assets.inputs import binding as binding_mod
from bench_assets.kernel.errors import WfbenchError
from bench_assets.kernel.store import ArtifactStore
from bench_assets.tasks.catalog import Benchmark


def _input(
    record: Any, data_version: str, run_id: str, reused: bool, source_run_id: str | None
) -> agg_mod.AggregateInput:
    """One evidence row; ``data_version`` is the record's digest, already compared with the
    materialization's by :func:`bench_assets.decision.manifest.accept` (not hashed again)."""
    return agg_mod.AggregateInput(
        record=record,
        reused=reused,
        run_id=run_id,
        source_run_id=source_run_id if reused else None,
        source_generation=record.generation if reused else None,
        data_version=data_version,
    )


K = TypeVar("K")
R = TypeVar("R")
Judge = Callable[[K, manifest_mod.Candidate], tuple[R | None, str]]

HISTORY_JUDGED = 25
"""A partition's newest materializations a decision looks through for its evidence."""


def first_acceptable(
    instance: dg.DagsterInstance,
    asset: str,
    wanted: Mapping[str, K],
    judge: "Judge[K, R]",
    considers: Callable[[K, str], bool] = lambda _cell, _run: True,
) -> dict[str, tuple[R | None, str]]:
    """Per partition of ``asset`` in ``wanted``, the newest of its last :data:`HISTORY_JUDGED`
    materializations that ``judge`` accepts for the cell it stands for, or why none is: the
    reason the last one judged was refused, else
    :data:`~bench_assets.decision.manifest.NO_MATERIALIZATION`. Exactly what ``judge`` (say
    :func:`~bench_assets.decision.manifest.accept`) answers given the partition's whole list,
    newest first, but read in rounds: the newest materialization each open cell still
    ``considers`` (by run id, before reading anything), then the next one of the cells that
    refused it, and so on. A generation's evidence is almost always the newest, so a decision
    reads one event per cell, not every generation's (a year of weekly generations is 25 per
    cell). Event logs that are not SQL are read whole, as before
    (:func:`partition_materializations_by_partition`).
    """
    out: dict[str, tuple[R | None, str]] = {
        key: (None, manifest_mod.NO_MATERIALIZATION) for key in wanted
    }
    ids = materialization_ids_by_partition(instance, asset, wanted, HISTORY_JUDGED)
    if ids is None:
        found = partition_materializations_by_partition(instance, asset, wanted, HISTORY_JUDGED)
        for key, cell in wanted.items():
            for md in found.get(key, []):
                c = manifest_mod.Candidate.from_metadata(md)
                if c is None or not considers(cell, c.run_id):
                    continue
                out[key] = judge(cell, c)
                if out[key][0] is not None:
                    break
        return out
    queue = {
        key: [i for i, run in ids.get(key, []) if considers(cell, run)]
        for key, cell in wanted.items()
    }
    open_ = [key for key in wanted if queue[key]]
    while open_:
        batch = {queue[key].pop(0): key for key in open_}
        mds = metadata_by_storage_id(instance, asset, batch)
        for storage_id, key in batch.items():
            meta = mds.get(storage_id)
            c = None if meta is None else manifest_mod.Candidate.from_metadata(meta)
            if c is not None:
                out[key] = judge(wanted[key], c)
        open_ = [key for key in batch.values() if out[key][0] is None and queue[key]]
    return out


def _inputs_now(
    instance: dg.DagsterInstance,
    up: Upstream,
    bench: BenchResource,
    b: Benchmark,
    task: str,
    candidate: bool,
) -> CellInputs | str:
    """A task's cell inputs as a materialization would load them now, or why there are none."""
    try:
        got = load_cell_inputs(instance, bench, task, candidate, upstream=up, benchmark=b)
    except (WfbenchError, OSError, ValueError) as e:
        return f"the inputs of {task} cannot be read: {e}"
    if got.binding.task_file_digest != binding_mod.task_file_digest(b.task(task)):
        return f"{task}/task.yaml changed since it was bound; run `wfbench inputs`"
    return got


def current_identities(
    instance: dg.DagsterInstance,
    bench: BenchResource,
    b: Benchmark,
    planned: dict[str, list[tuple[str, str]]],
) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], str]]:
    """The identity digest each planned ``(asset, cell)`` of each task has now, and why a cell
    has none.

    "Now" is what a materialization of the cell would compute at this moment: bench.yaml as it
    is, and the latest ``task_bindings``, ``oracle_snapshots``, ``sanitized_graphs``,
    ``task_environments``, ``incumbent_skills`` and ``candidate_overlay`` (so a candidate cell's
    identity names the overlay the decision is about). A task whose inputs cannot be read, or
    whose task file changed since it was bound, gives its cells no identity: they cannot be
    evidence.

    Returns:
        ``{(task, cell): identity digest}`` and ``{(task, cell): why it has none}``.
    """
    ids: dict[tuple[str, str], str] = {}
    why: dict[tuple[str, str], str] = {}
    adapters: dict[str, Any] = {}
    up = prefetched_upstream(instance, planned)
    for task, cells in planned.items():
        # One load per task: the inputs with the overlay serve comparator cells too (their
        # identity leaves the overlay out); without a candidate cell, or an overlay, without it.
        with_overlay = (
            _inputs_now(instance, up, bench, b, task, True)
            if any(asset == "candidate_cells" for asset, _ in cells)
            else None
        )
        without: CellInputs | str | None = None
        for asset, cell in cells:
            arm, run = parse_cell_key(cell)
            spec = b.config.arms.get(arm)
            if spec is None:
                why[task, cell] = f"arm {arm!r} is not in bench.yaml"
                continue
            got = with_overlay
            if asset != "candidate_cells" and not isinstance(got, CellInputs):
                without = without or _inputs_now(instance, up, bench, b, task, False)
                got = without
            assert got is not None
            if isinstance(got, str):
                why[task, cell] = got
                continue
            try:
                adapter = adapters.get(arm) or adapters.setdefault(arm, make_adapter(b, spec))
                ids[task, cell] = identity_digest(cell_identity(b, task, arm, run, got, adapter))
            except (WfbenchError, OSError, ValueError) as e:
                why[task, cell] = f"no identity for {arm} now: {e}"
    return ids, why


def collect_current_inputs(
    instance: dg.DagsterInstance,
    bench: BenchResource,
    b: Benchmark,
    planned: dict[str, list[tuple[str, str]]],
    generation: str | None = None,
) -> tuple[dict[str, list[agg_mod.AggregateInput]], dict[str, dict[str, str]]]:
    """The evidence of a decision without a manifest (ad hoc): per planned cell, its newest
    materialization that a generation would accept too — the record unchanged since it was
    recorded, made for the identity the cell's arm has now (:func:`current_identities`; so
    never another candidate's cell), not an ad-hoc cell — whatever generation paid for it.

    Read per cell asset in rounds, newest first (:func:`first_acceptable`). Within a
    generation (one planned before manifests existed), a record another generation paid for is
    reused evidence.

    Returns:
        The accepted inputs per task, and per task ``{cell: why it is not evidence}``.
    """
    expected, no_identity = current_identities(instance, bench, b, planned)
    wanted: dict[str, dict[str, tuple[str, str]]] = {}
    for task, cells in planned.items():
        for asset, cell in cells:
            if (task, cell) not in no_identity:
                key = str(dg.MultiPartitionKey({"task": task, "cell": cell}))
                wanted.setdefault(asset, {})[key] = (task, cell)

    def judge(
        cell: tuple[str, str], c: manifest_mod.Candidate
    ) -> tuple[manifest_mod.Current | None, str]:
        return manifest_mod.accept_current(expected[cell], [c])

    found: dict[tuple[str, str], tuple[manifest_mod.Current | None, str]] = {}
    for asset, keys in wanted.items():
        judged = first_acceptable(instance, asset, keys, judge)
        found |= {keys[key]: verdict for key, verdict in judged.items()}
    out: dict[str, list[agg_mod.AggregateInput]] = {task: [] for task in planned}
    refused: dict[str, dict[str, str]] = {task: {} for task in planned}
    for task, cells in planned.items():
        for _asset, cell in cells:
            if (task, cell) in no_identity:
                refused[task][cell] = no_identity[task, cell]
                continue
            ok, why = found[task, cell]
            if ok is None:
                refused[task][cell] = why
                continue
            c = ok.candidate
            carried = bool(generation) and ok.record.generation != generation
            reused = c.reused_from_run is not None or carried
            out[task].append(
                _input(
                    ok.record, str(c.data_version), c.run_id, reused, c.reused_from_run or c.run_id
                )
            )
    return out, refused


def accept_manifest_cells(
    instance: dg.DagsterInstance, cells: Iterable[ManifestCell], generation: str
) -> dict[tuple[str, str], tuple[manifest_mod.Accepted | None, str]]:
    """Every planned cell's verified evidence (:func:`bench_assets.decision.manifest.accept`), or
    why there is none, per ``(task, cell)``.

    Per cell asset, the cells' materializations are listed in a few queries and read in rounds
    (:func:`first_acceptable`: one event per cell when the newest is the evidence, where one
    query per cell cost seconds); each record is read and digested once per process
    (:func:`bench_assets.cells.records.load_verified`).
    """
    wanted: dict[str, dict[str, ManifestCell]] = {}
    for mc in cells:
        key = str(dg.MultiPartitionKey({"task": mc.task, "cell": mc.cell}))
        wanted.setdefault(mc.asset, {})[key] = mc

    def judge(
        mc: ManifestCell, c: manifest_mod.Candidate
    ) -> tuple[manifest_mod.Accepted | None, str]:
        return manifest_mod.accept(mc, generation, [c])

    out: dict[tuple[str, str], tuple[manifest_mod.Accepted | None, str]] = {}
    for asset, keys in wanted.items():
        judged = first_acceptable(instance, asset, keys, judge, manifest_mod.considers)
        out |= {(keys[key].task, keys[key].cell): verdict for key, verdict in judged.items()}
    return out


def collect_manifest_inputs(
    instance: dg.DagsterInstance, tasks: Iterable[TaskManifest]
) -> tuple[dict[str, list[agg_mod.AggregateInput]], dict[str, dict[str, str]]]:
    """Exactly the cells the generation's manifest names for each task, each verified.

    Returns, per task, the accepted evidence and, per cell without acceptable evidence, why
    (missing, corrupted, another identity — e.g. another candidate's cell —, not paid in this
    generation). See :mod:`bench_assets.decision.manifest`. All tasks' cells are read in one bulk
    lookup per cell asset (:func:`accept_manifest_cells`).
    """
    tasks = list(tasks)
    out: dict[str, list[agg_mod.AggregateInput]] = {t.task: [] for t in tasks}
    refused: dict[str, dict[str, str]] = {t.task: {} for t in tasks}
    accepted: dict[tuple[str, str], tuple[manifest_mod.Accepted | None, str]] = {}
    by_generation: dict[str, list[ManifestCell]] = {}
    for tm in tasks:
        by_generation.setdefault(tm.generation, []).extend(tm.cells)
    for generation, cells in by_generation.items():
        accepted |= accept_manifest_cells(instance, cells, generation)
    for tm in tasks:
        for mc in tm.cells:
            ok, why = accepted[mc.task, mc.cell]
            if ok is None:
                refused[tm.task][mc.cell] = why
                continue
            out[tm.task].append(_input(ok.record, ok.data_version, ok.run_id, ok.reused, ok.run_id))
    return out, refused


def verify_evidence(
    instance: dg.DagsterInstance,
    b: Benchmark,
    artifacts: ArtifactStore,
    aggs: list[agg_mod.TaskAggregate],
    manifest: manifest_mod.Manifest | None,
) -> tuple[list[agg_mod.TaskAggregate], list[RefusedCell]]:
    """The aggregates' evidence rows that the decision citing them verifies itself.

    An aggregate may be older than the decision (the UI can materialize ``promotion_decision``
    alone, after a new ``candidate_overlay``), so every row is checked again, as its aggregate
    should have: with a manifest, :func:`~bench_assets.decision.manifest.accept` against the planned
    cell; without one (ad hoc), :func:`~bench_assets.decision.manifest.accept_current` against the
    identity the cell's arm has now. A row that fails is dropped from its task (the gate sees a
    missing cell) and returned with the reason.
    """
    expected: dict[tuple[str, str], str] = {}
    no_identity: dict[tuple[str, str], str] = {}
    if manifest is None:
        roles = {name: arm.role for name, arm in b.config.arms.items()}
        planned = {
            a.task: [
                (
                    "candidate_cells" if roles.get(e.arm) == "candidate" else "comparator_cells",
                    e.cell,
                )
                for e in a.evidence
            ]
            for a in aggs
        }
        res = BenchResource(tasks_dir=str(b.root), artifact_root=str(artifacts.root))
        expected, no_identity = current_identities(instance, res, b, planned)
    out: list[agg_mod.TaskAggregate] = []
    refused: list[RefusedCell] = []
    for a in aggs:
        cells = (
            {c.cell: c for c in manifest.tasks[a.task].cells}
            if manifest is not None and a.task in manifest.tasks
            else {}
        )
        kept = []
        for e in a.evidence:
            found = [
                manifest_mod.Candidate(
                    run_id=e.run_id or "",
                    data_version=e.data_version,
                    record_path=str(artifacts.cell(a.task, e.cell, e.record_id) / "record.json"),
                )
            ]
            why = ""
            if manifest is not None:
                mc = cells.get(e.cell)
                ok = manifest_mod.accept(mc, manifest.header.generation, found)[1] if mc else None
                why = "not a cell the generation planned" if mc is None else ok or ""
            elif (a.task, e.cell) in no_identity:
                why = no_identity[a.task, e.cell]
            else:
                why = manifest_mod.accept_current(expected[a.task, e.cell], found)[1]
            if why:
                refused.append(
                    RefusedCell(task=a.task, cell=e.cell, reason=f"stale aggregate: {why}")
                )
            else:
                kept.append(e)
        if len(kept) == len(a.evidence):
            out.append(a)
            continue
        dropped = {e.cell for e in a.evidence} - {e.cell for e in kept}
        out.append(
            a.model_copy(
                update={"evidence": kept, "missing_cells": sorted({*a.missing_cells, *dropped})}
            )
        )
    return out, refused
