"""The ``cell_batch`` job: several cells of one task paid in one queued run, one run per cell.

A queued run per cell pays a run worker's start-up (a process importing Dagster and the code
location: seconds on a quiet machine, tens of seconds under load) before its agent starts, for
cells that take a few seconds (replays) to minutes. A ``cell_batch`` run holds one
``agent_sessions`` slot and the launcher starts it like any run; inside it each cell is still
its own materialization, an in-process run of its cell asset tagged with its generation and
partition and ``wfbench/cell_batch`` (this run's id), one after another, so the pool's limit on
concurrent sessions holds and the UI lists one run per cell. The driver submits these batches
(:mod:`bench_assets.driver.paying`) and follows each cell's run as it ends.
"""

import dagster as dg

from bench_assets.defs.resources import BenchResource

CELL_BATCH_JOB = "cell_batch"
CELL_BATCH_TAG = "wfbench/cell_batch"
"""Tag of each per-cell run a ``cell_batch`` run starts: the batch run's id."""


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

    Drives per-cell runs, so (like ``input_batch``) it imports the driver at run time.
    """
    from bench_assets.driver.cellbatch import pay_batch

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
