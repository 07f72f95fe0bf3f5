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

**A free slot takes the next unpaid cell** (work-stealing): each cell of a batch carries a claim,
a fresh run id, and its in-process run is created with that id, so creating the run is the claim
(the run storage refuses a second run with the same id, in sqlite and PostgreSQL alike). A batch
pays its own cells in order, skipping any another batch claimed; when it has paid at least one,
it goes on with the unclaimed cells of the generation's other active batches (:func:`stealable`:
queued batches first, oldest first, then running batches' cells from their last), so no slot
idles while cells remain, and a queued batch whose cells were all taken is canceled by the driver
before it costs a launch. The driver answers each cell from the run its claim names, whichever
batch ran it; a cell it must decide without a run (its batch died or was canceled before anyone
claimed it) is first claimed by the driver itself with a canceled placeholder run
(:func:`void_claim`), so no batch can start it after the driver gave up on it.
"""

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg
from dagster._core.errors import DagsterRunAlreadyExists

from bench_assets.defs.resources import BenchResource
from bench_assets.driver.instance import StepFailed, run_quietly
from bench_assets.driver.runs import Finished, Job, RunWatch, cancel_failure, run_failure

CELL_BATCH_JOB = "cell_batch"
CELL_BATCH_TAG = "wfbench/cell_batch"
"""Tag of each per-cell run a ``cell_batch`` run starts: the batch run's id."""
CLAIM_VOID_TAG = "wfbench/cell_claim_void"
"""Tag of a canceled placeholder run the driver created to take back a cell's claim: the id of
the batch the cell was in (:func:`void_claim`)."""
STEAL_SCOPE_TAG = "wfbench/generation"
"""Batches sharing this tag's value (a generation) take each other's unclaimed cells."""

MAX_CELL_BATCH = 6
"""Cells per ``cell_batch`` run at most: a batch pays one run start-up, and its cells run one
after another in one slot; a batch that runs long does not hold the others' cells back (free
slots take its unclaimed cells), but a batch still pays only the cells it is given or takes."""

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
                "claim": str(uuid.uuid4()),
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


def cell_assets_in_batch(tasks_dir: str) -> dict[str, Any]:
    """The cell assets a batch materializes, by name, with no concurrency pool: the batch run
    holds the cell's ``agent_sessions`` slot. With ``pools.granularity: run`` the run queue counts
    every active run whose plan names a pool, in-process runs included, so a cell run in the pool
    made each running batch count twice and kept a freed slot idle until some other run ended
    (issue 24: the cell phase at 1.19-1.65x its ideal with batches)."""
    from bench_assets.defs.cells import bench_cell_keys, build_cell_assets

    keys = bench_cell_keys(tasks_dir, top_ups=True)
    return {a.key.to_user_string(): a for a in build_cell_assets(*keys, pool=None)}


def claims(batch: Any) -> list[tuple[str, Any]]:
    """A ``cell_batch`` job's cell jobs, each with its claim (the run id its cell run gets)."""
    entries = batch.op_config[pay_cells.name]["cells"]
    return [(str(e.get("claim") or ""), j) for e, j in zip(entries, batch.cells, strict=True)]


EPHEMERAL_JOB = "__ephemeral_asset_job__"
"""The job name of a cell's in-process run (the one ``dg.materialize`` gives)."""


def pay_batch(
    instance: dg.DagsterInstance,
    cells: list[dict[str, Any]],
    *,
    tasks_dir: str,
    artifact_root: str,
    batch_run_id: str,
    progress: Callable[[str], None],
    steal: Callable[[], list[dict[str, Any]]] | None = None,
) -> list[str]:
    """Materialize each cell of a batch, an in-process run each whose run id is the cell's claim,
    in order, skipping a cell another batch claimed first; then, when this batch paid at least one
    of its own and ``steal`` is given, the unclaimed cells ``steal`` returns, one at a time, until
    it returns none. Returns the cells (``task cell``) whose run failed. An interrupt (the batch
    canceled) propagates."""

    assets = cell_assets_in_batch(tasks_dir)
    resources = {"bench": BenchResource(tasks_dir=tasks_dir, artifact_root=artifact_root)}
    jobs: dict[str, Any] = {}  # one asset job per cell asset, built once per batch
    failed: list[str] = []

    def pay(c: dict[str, Any], where: str) -> bool:
        """Claim and pay one cell; False when another batch claimed it first."""
        name = c["asset"]
        if name not in jobs:
            defs = dg.Definitions(
                jobs=[dg.define_asset_job(EPHEMERAL_JOB)],
                assets=[assets[name]],
                resources=resources,
            )
            jobs[name] = defs.resolve_job_def(EPHEMERAL_JOB)
        label = f"{c['task']} {c['cell']}"
        progress(f"{where} {label}")
        config = {"force": c["force"], "generation": c["generation"]}
        if c["adopt_record_id"]:
            config["adopt_record_id"] = c["adopt_record_id"]
        try:
            run_quietly(
                lambda run_config: jobs[name].execute_in_process(
                    run_config=run_config,
                    instance=instance,
                    partition_key=str(dg.MultiPartitionKey({"task": c["task"], "cell": c["cell"]})),
                    tags={**c["tags"], CELL_BATCH_TAG: batch_run_id},
                    run_id=c.get("claim") or None,
                    raise_on_error=False,
                ),
                {name: config},
            )
        except DagsterRunAlreadyExists:
            progress(f"{label}: claimed by another batch")
            return False
        except StepFailed as e:
            progress(f"{label}: {e}")
            failed.append(label)
        return True

    own = [pay(c, f"[{i}/{len(cells)}]") for i, c in enumerate(cells, 1)]
    if any(own) and steal is not None:
        # A batch none of whose cells was left for it was launched after the others took them
        # (or the driver is canceling it): it ends rather than start another's cell.
        while candidates := steal():
            if not any(pay(c, "[taken]") for c in candidates):
                continue  # every candidate was claimed meanwhile: look again
    return failed


STEAL_LOOKAHEAD = 8
"""Queued batches a free slot looks at for an unclaimed cell (oldest first)."""


def stealable(instance: dg.DagsterInstance, run: dg.DagsterRun) -> list[dict[str, Any]]:
    """The unclaimed cells a batch that paid its own may take, in the order a free slot should
    take them: those of the generation's queued batches, oldest batch first and each in its order
    (the queue would run them next), then those of its running batches from their last (their
    own run reaches those last). Only batches with the same :data:`STEAL_SCOPE_TAG` value and the
    same resource config (tasks folder, artifact root) as ``run``."""
    scope = run.tags.get(STEAL_SCOPE_TAG)
    if not scope:
        return []
    S = dg.DagsterRunStatus

    def batches(statuses: list[dg.DagsterRunStatus], limit: int | None) -> list[dg.DagsterRun]:
        found = instance.get_runs(
            dg.RunsFilter(
                job_name=CELL_BATCH_JOB, statuses=statuses, tags={STEAL_SCOPE_TAG: scope}
            ),
            limit=limit,
            ascending=True,
        )
        mine = run.run_config.get("resources")
        return [
            r for r in found if r.run_id != run.run_id and r.run_config.get("resources") == mine
        ]

    def entries(r: dg.DagsterRun) -> list[dict[str, Any]]:
        config: Any = r.run_config
        ops = config.get("ops") or {}
        cells: list[dict[str, Any]] = (
            (ops.get(pay_cells.name) or {}).get("config", {}).get("cells", [])
        )
        return [e for e in cells if e.get("claim")]

    order = [e for r in batches([S.QUEUED], STEAL_LOOKAHEAD) for e in entries(r)]
    order += [e for r in batches([S.STARTING, S.STARTED], None) for e in reversed(entries(r))]
    if not order:
        return []
    claimed = {
        r.run_id for r in instance.get_runs(dg.RunsFilter(run_ids=[e["claim"] for e in order]))
    }
    return [e for e in order if e["claim"] not in claimed]


def void_claim(instance: dg.DagsterInstance, claim: str, batch_id: str) -> bool:
    """Take back an unclaimed cell's claim before the driver answers it without a run (its batch
    ended before anyone started it): a canceled placeholder run with the claim as its id, so no
    batch that read the claim earlier can still start the cell. False when a batch claimed it
    first (its own run then answers for the cell)."""
    try:
        instance.add_run(
            dg.DagsterRun(
                job_name=CELL_BATCH_JOB,
                run_id=claim,
                status=dg.DagsterRunStatus.CANCELED,
                tags={CLAIM_VOID_TAG: batch_id},
            )
        )
    except DagsterRunAlreadyExists:
        return False
    return True


def batch_outcomes(
    instance: dg.DagsterInstance,
    batches: dict[str, Any],
    reported: dict[str, set[str]],
    runs: dict[str, dg.DagsterRun],
    watch: RunWatch | None = None,
) -> tuple[list[Any], list[Any], list[str]]:
    """The cells of ``cell_batch`` runs whose own run ended since last asked, the cells to submit
    again, and the batches every cell of which is answered now that they ended.

    ``batches``: batch run id -> its job (``Job.cells``, claims in its config); ``reported``:
    per batch, the cells (labels) already answered (updated here); ``runs``: the batch runs as
    they are now, by id; ``watch``: reads the open cells' claims (each poll, in bulk: a
    :class:`~bench_assets.driver.runs.RunWatch` reads only what changed). A cell is answered
    from the run its claim names, whichever batch ran it; a run left unfinished by the batch
    that ran it, which ended, is marked failed (its process is gone) and answered as canceled
    (the batch was) or as an infra failure of that batch. A cell whose batch ended before anyone
    claimed it: its claim is voided (:func:`void_claim`), then it is answered as canceled (its
    batch was) or returned to be submitted again: it paid nothing, so it is neither a retry nor
    a failure the outage breaker counts — except, in a batch that died before starting any cell
    (e.g. its launch timed out), the first one: it is answered as failed, as its own run failing
    at launch would have been, so one failed launch is one systemic failure (not a whole
    batch's: a streak of them trips the breaker) and a launch that keeps failing still ends in
    the breaker. A queued batch whose cells were all claimed by other batches is canceled here,
    before it costs a launch.
    """
    if not batches:
        return [], [], []
    S = dg.DagsterRunStatus
    open_cells = [
        (bid, claim, job)
        for bid, batch in batches.items()
        for claim, job in claims(batch)
        if job.label not in reported.setdefault(bid, set())
    ]
    ids = [claim for _, claim, _ in open_cells if claim]
    cell_runs = (watch or RunWatch(instance)).read(ids)  # a new watch reads every id
    # The batches running the unfinished cell runs, as they are now (a batch not this driver's
    # own is read from the instance).
    executors = {
        r.tags.get(CELL_BATCH_TAG, "") for r in cell_runs.values() if not r.is_finished
    } - {""}
    status = dict(runs)
    missing = [x for x in executors if x not in status]
    if missing:
        status.update({r.run_id: r for r in instance.get_runs(dg.RunsFilter(run_ids=missing))})
    ended = {bid: r for bid, r in status.items() if r.is_finished}
    unclaimed_ended = {
        bid for bid, claim, _ in open_cells if claim not in cell_runs and bid in ended
    }
    started = (
        {
            r.tags[CELL_BATCH_TAG]
            for r in instance.get_runs(dg.RunsFilter(tags={CELL_BATCH_TAG: list(unclaimed_ended)}))
        }
        if unclaimed_ended
        else set()
    )
    out: list[Any] = []
    again: list[Any] = []
    for bid, claim, job in open_cells:
        done = reported[bid]
        run = cell_runs.get(claim)
        end = ended.get(bid)
        if run is not None and run.is_finished:
            ok = run.status == S.SUCCESS
            canceled = run.status == S.CANCELED
            failure = None
            if canceled:
                failure = cancel_failure(run.run_id)
            elif not ok:
                failure = run_failure(instance, run.run_id)
            out.append(Finished(job, run.run_id, ok, failure, canceled=canceled))
        elif run is not None:
            executor = run.tags.get(CELL_BATCH_TAG, "")
            gone = ended.get(executor)
            if gone is None:
                continue  # still running in its batch
            now = instance.get_run_by_id(run.run_id)  # read again before failing it
            if now is not None and now.is_finished:
                continue  # it ended after all: answered at the next poll
            instance.report_run_failed(
                run, f"wfbench: its cell_batch run {executor} ended before it did"
            )
            if gone.status == S.CANCELED:
                failure = cancel_failure(executor)
                out.append(Finished(job, run.run_id, False, failure, canceled=True))
            else:
                why = run_failure(instance, executor)
                failure = StepFailed(
                    executor,
                    why.cls_name,
                    f"its cell_batch run {executor} ended before the cell did: {why.message}",
                )
                out.append(Finished(job, run.run_id, False, failure))
        elif end is not None:
            if claim and not void_claim(instance, claim, bid):
                continue  # a batch claimed it just now: its run answers for it
            if end.status == S.CANCELED:
                failure = cancel_failure(bid)
                out.append(Finished(job, bid, False, failure, canceled=True))
            elif bid in started or any(j.label in done for _, j in claims(batches[bid])):
                again.append(job)
            else:
                why = run_failure(instance, bid)
                failure = StepFailed(
                    bid,
                    why.cls_name,
                    f"its cell_batch run {bid} ended before the cell did: {why.message}",
                )
                out.append(Finished(job, "", False, failure))
        else:
            continue
        done.add(job.label)
    # A queued batch with nothing left to pay: canceled while still queued (a launch that found
    # its cells taken would only end; its cells are answered from their own runs).
    for bid, batch in batches.items():
        r = runs.get(bid)
        if r is None or r.status != S.QUEUED:
            continue
        left = [c for c, j in claims(batch) if j.label not in reported[bid]]
        if all(c in cell_runs for c in left):
            now = instance.get_run_by_id(bid)
            if now is not None and now.status == S.QUEUED:
                instance.report_run_canceled(now, "wfbench: other batches took all of its cells")
    closed = [
        bid for bid in ended if bid in batches and len(reported[bid]) == len(batches[bid].cells)
    ]
    for bid in closed:
        reported.pop(bid, None)
    return out, again, closed


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
    claim: str = ""
    """The run id of the cell's run: whichever batch creates it first pays the cell."""


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
        steal=lambda: stealable(context.instance, context.run),
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
