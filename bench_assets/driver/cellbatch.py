"""Cells paid in batches: which cells share a ``cell_batch`` run, what that run does, and what the
driver reads back from it.

A queued run per cell pays a run worker's start-up (a process importing Dagster and the code
location: seconds on a quiet machine, tens of seconds under load) before its agent starts, for
cells that take a few seconds (replays) to minutes (issue 24, item 5). A ``cell_batch`` run holds
one ``agent_sessions`` slot and the launcher starts it like any run; inside it each cell is still
its own materialization, an in-process run of its cell asset tagged with its generation and
partition and ``wfbench/cell_batch`` (this run's id), one after another, so the pool's limit on
concurrent sessions holds and the UI lists one run per cell.

:func:`cell_groups` splits one task's unpaid cells into batches that still fill every
``agent_sessions`` slot; :func:`batch_job` makes one ``cell_batch`` run of a batch;
:func:`pay_batch` is what that run executes (the :data:`cell_batch` job, defined here because its
op drives Dagster: the code location ``bench_assets/definitions.py`` loads it); and
:func:`batch_outcomes` turns the batch's per-cell runs into one
:class:`~bench_assets.driver.runs.Finished` per cell as each ends, so the generation loop sees
cells, not batches.
"""

from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg

from bench_assets.defs.resources import BenchResource
from bench_assets.driver.instance import StepFailed
from bench_assets.driver.runs import Finished, Job, assets_by_name, run_failure

CELL_BATCH_JOB = "cell_batch"
CELL_BATCH_TAG = "wfbench/cell_batch"
"""Tag of each per-cell run a ``cell_batch`` run starts: the batch run's id."""

MAX_CELL_BATCH = 6
"""Cells per ``cell_batch`` run at most: a batch pays one run start-up, but its cells run one
after another in one slot, so batches stay small enough that the last one does not leave the
other slots idle long."""

TASK_TAG = "dagster/partition/task"
CELL_TAG = "dagster/partition/cell"


def cell_groups(
    jobs: Sequence[Any], *, slots: int, max_size: int = MAX_CELL_BATCH
) -> list[list[Any]]:
    """One task's cell jobs in batches that fill ``slots`` sessions: ``ceil(n / slots)`` cells per
    batch, at most ``max_size`` (order kept). Fewer cells than slots gives one cell per batch."""
    if not jobs:
        return []
    size = max(1, min(max_size, -(-len(jobs) // max(1, slots))))
    return [list(jobs[i : i + size]) for i in range(0, len(jobs), size)]


def batch_job(cells: Sequence[Any]) -> Any:
    """The ``cell_batch`` run of ``cells`` (cell jobs of one task: one cell asset each, their
    partition in the tags); the batch run carries the tags the cells share (the generation)."""
    entries = []
    for job in cells:
        (asset,) = job.assets
        cfg = dict(job.op_config.get(asset, {}))
        entries.append(
            {
                "asset": asset,
                "task": job.tags[TASK_TAG],
                "cell": job.tags[CELL_TAG],
                "force": bool(cfg.get("force", False)),
                "generation": str(cfg.get("generation", "")),
                "adopt_record_id": str(cfg.get("adopt_record_id", "")),
                "tags": dict(job.tags),
            }
        )
    shared = {
        k: v
        for k, v in cells[0].tags.items()
        if k not in (TASK_TAG, CELL_TAG) and all(j.tags.get(k) == v for j in cells)
    }
    task = cells[0].tags[TASK_TAG]
    return Job(
        (),
        None,
        op_config={pay_cells.name: {"cells": entries}},
        tags=shared,
        label=f"{task}: batch of {len(cells)} cells",
        job=CELL_BATCH_JOB,
        cells=tuple(cells),
    )


def pay_batch(
    instance: dg.DagsterInstance,
    cells: list[dict[str, Any]],
    *,
    tasks_dir: str,
    artifact_root: str,
    batch_run_id: str,
    progress: Callable[[str], None],
) -> list[str]:
    """Materialize each cell of a batch, an in-process run each, in order; returns the cells
    (``task cell``) whose run failed. An interrupt (the batch canceled) propagates."""
    from bench_assets.driver.instance import materialize

    names = tuple(sorted({c["asset"] for c in cells}))
    assets = dict(zip(names, assets_by_name(tasks_dir, names), strict=True))
    resources = {"bench": BenchResource(tasks_dir=tasks_dir, artifact_root=artifact_root)}
    failed = []
    for i, c in enumerate(cells, 1):
        label = f"{c['task']} {c['cell']}"
        progress(f"[{i}/{len(cells)}] {label}")
        config = {"force": c["force"], "generation": c["generation"]}
        if c["adopt_record_id"]:
            config["adopt_record_id"] = c["adopt_record_id"]
        try:
            materialize(
                instance,
                [assets[c["asset"]]],
                resources,
                partition_key=str(dg.MultiPartitionKey({"task": c["task"], "cell": c["cell"]})),
                op_config={c["asset"]: config},
                tags={**c["tags"], CELL_BATCH_TAG: batch_run_id},
            )
        except StepFailed as e:
            progress(f"{label}: {e}")
            failed.append(label)
    return failed


def batch_outcomes(
    instance: dg.DagsterInstance,
    batches: dict[str, Any],
    reported: dict[str, set[str]],
    ended: dict[str, Any],
) -> tuple[list[Any], list[Any]]:
    """The cells of running or ended ``cell_batch`` runs whose own run ended since last asked,
    and the cells to submit again.

    ``batches``: batch run id -> its job (``Job.cells``); ``reported``: per batch, the cells
    (labels) already answered (updated here); ``ended``: the batch runs that ended, by id — every
    cell of those is answered now: from its own run when it ended, else as canceled (the batch
    was) or as an infra failure of the batch (the batch died before the cell's run ended; a
    cell run left unfinished is marked failed, its process is gone). A cell whose run never
    started is not answered but returned to be submitted again: it paid nothing, so it is
    neither a retry nor a failure the outage breaker counts — except, in a batch that died
    before starting any cell (e.g. its launch timed out), the first one: it is answered as
    failed, as its own run failing at launch would have been, so one failed launch is one
    systemic failure (not a whole batch's: a streak of them trips the breaker) and a launch
    that keeps failing still ends in the breaker.
    """
    if not batches:
        return [], []
    runs = instance.get_runs(dg.RunsFilter(tags={CELL_BATCH_TAG: list(batches)}))
    by_cell = {
        (r.tags[CELL_BATCH_TAG], r.tags.get(TASK_TAG), r.tags.get(CELL_TAG)): r for r in runs
    }
    started = {r.tags[CELL_BATCH_TAG] for r in runs}
    out: list[Any] = []
    again: list[Any] = []
    for batch_id, batch in batches.items():
        done = reported.setdefault(batch_id, set())
        end = ended.get(batch_id)
        for job in batch.cells:
            if job.label in done:
                continue
            run = by_cell.get((batch_id, job.tags[TASK_TAG], job.tags[CELL_TAG]))
            if run is not None and run.is_finished:
                ok = run.status == dg.DagsterRunStatus.SUCCESS
                canceled = run.status == dg.DagsterRunStatus.CANCELED
                failure = None
                if canceled:
                    failure = StepFailed(run.run_id, "RunCanceled", "run canceled")
                elif not ok:
                    failure = run_failure(instance, run.run_id)
                out.append(Finished(job, run.run_id, ok, failure, canceled=canceled))
            elif (
                end is not None
                and run is None
                and end.status != dg.DagsterRunStatus.CANCELED
                and (batch_id in started or any(j.label in done for j in batch.cells))
            ):
                again.append(job)
            elif end is not None:
                if run is not None:
                    instance.report_run_failed(
                        run, f"wfbench: its cell_batch run {batch_id} ended before it did"
                    )
                if end.status == dg.DagsterRunStatus.CANCELED:
                    failure = StepFailed(batch_id, "RunCanceled", "run canceled")
                    out.append(Finished(job, batch_id, False, failure, canceled=True))
                else:
                    why = run_failure(instance, batch_id)
                    failure = StepFailed(
                        batch_id,
                        why.cls_name,
                        f"its cell_batch run {batch_id} ended before the cell did: {why.message}",
                    )
                    out.append(Finished(job, run.run_id if run else "", False, failure))
            else:
                continue
            done.add(job.label)
    for batch_id in ended:
        reported.pop(batch_id, None)
    return out, again


class BatchCell(dg.Config):
    """One cell of a batch: the cell asset, its partition, the cell's run config and tags."""

    asset: str
    task: str
    cell: str
    force: bool = False
    generation: str = ""
    adopt_record_id: str = ""
    tags: dict[str, str] = {}
    """The cell run's own tags (generation, partition, sequential look)."""


class CellBatchConfig(dg.Config):
    """The cells one ``cell_batch`` run pays, in order."""

    cells: list[BatchCell]


@dg.op(
    pool="agent_sessions",
    description=(
        "Pay a batch of cells of one task one after another in this run's process: the batch "
        "pays one run start-up and holds one agent_sessions slot, and each cell is still its own "
        "materialization (an in-process run tagged wfbench/cell_batch with this run's id)."
    ),
)
def pay_cells(
    context: dg.OpExecutionContext, config: CellBatchConfig, bench: BenchResource
) -> None:
    """Materialize every cell of the batch. A cell that fails is that cell's own failed run
    (the driver reads it there and may re-pay it) and the batch goes on; an interrupt (the batch
    canceled) stops it. The batch fails at the end when any cell did, naming them.
    """
    failed = pay_batch(
        context.instance,
        [c.model_dump() for c in config.cells],
        tasks_dir=str(bench.load_root()),
        artifact_root=str(bench.artifacts().root),
        batch_run_id=context.run_id,
        progress=context.log.info,
    )
    if failed:
        raise dg.Failure(
            f"{len(failed)} of {len(config.cells)} cell(s) failed: {', '.join(failed)} "
            "(each in its own run)"
        )


@dg.job(
    name=CELL_BATCH_JOB,
    description=(
        "A generation's cells of one task, paid one after another in one run (wfbench evolve "
        "submits them; batches run in parallel up to the agent_sessions pool's limit)."
    ),
)
def cell_batch() -> None:
    """One batch of per-cell materializations."""
    pay_cells()
