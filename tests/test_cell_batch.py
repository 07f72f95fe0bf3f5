"""Cells paid in batches (issue 24, item 5): how a task's cells are grouped into ``cell_batch``
runs, and how the driver answers each cell of a batch from its own run."""

import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.remote_origin import (
    RegisteredCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)

from bench_assets.defs.cells import bench_cell_keys, build_cell_assets
from bench_assets.defs.partitions import TASKS_PARTITIONS_NAME
from bench_assets.driver.cellbatch import (
    CELL_BATCH_JOB,
    CELL_BATCH_TAG,
    STEAL_SCOPE_TAG,
    batch_job,
    batch_outcomes,
    cell_assets_in_batch,
    cell_groups,
    claims,
    pay_batch,
    pay_cells,
    stealable,
    void_claim,
)
from bench_assets.driver.runqueue import InProcessExecutor
from bench_assets.driver.runs import Job


def cell_job(task: str, cell: str, **config: object) -> Job:
    tags = {
        "wfbench/generation": "g0001",
        "dagster/partition/task": task,
        "dagster/partition/cell": cell,
    }
    return Job(
        ("comparator_cells",),
        str(dg.MultiPartitionKey({"task": task, "cell": cell})),
        op_config={"comparator_cells": {"generation": "g0001", **config}},
        tags=tags,
        label=f"{task} {cell}",
    )


def test_a_tasks_cells_fill_every_slot_in_bounded_batches() -> None:
    jobs = [cell_job("t", f"a.r{i}") for i in range(12)]
    assert [len(g) for g in cell_groups(jobs, slots=2)] == [6, 6]
    assert [len(g) for g in cell_groups(jobs, slots=2, max_size=4)] == [4, 4, 4]
    assert [len(g) for g in cell_groups(jobs[:2], slots=3)] == [1, 1]
    assert [len(g) for g in cell_groups(jobs[:5], slots=2)] == [3, 2]
    assert [j.label for g in cell_groups(jobs, slots=5) for j in g] == [j.label for j in jobs]
    assert cell_groups([], slots=2) == []


def test_a_batch_job_carries_each_cells_config_and_tags() -> None:
    cells = [cell_job("t", "a.r0", force=True), cell_job("t", "a.r1", adopt_record_id="rec1")]
    job = batch_job(cells)
    assert job.job == CELL_BATCH_JOB and job.assets == () and job.cells == tuple(cells)
    assert job.tags == {"wfbench/generation": "g0001"}, "only the tags every cell shares"
    entries = job.op_config[pay_cells.name]["cells"]
    assert [(e["cell"], e["force"], e["adopt_record_id"]) for e in entries] == [
        ("a.r0", True, ""),
        ("a.r1", False, "rec1"),
    ]
    assert entries[0]["tags"]["dagster/partition/cell"] == "a.r0"


def test_the_in_process_executor_runs_a_batchs_cells_one_by_one() -> None:
    ex = InProcessExecutor(None, tasks_dir="", artifact_root="")  # type: ignore[arg-type]
    ex.submit(batch_job([cell_job("t", "a.r0"), cell_job("t", "a.r1")]))
    assert ex.pending() == 2 and [j.label for j in ex._queue] == ["t a.r0", "t a.r1"]


def _run(
    instance: dg.DagsterInstance, status: dg.DagsterRunStatus, run_id: str = "", **tags: str
) -> dg.DagsterRun:
    run = dg.DagsterRun(
        job_name="j",
        run_id=run_id or str(uuid.uuid4()),
        status=status,
        tags=tags,
        remote_job_origin=ORIGIN if status == dg.DagsterRunStatus.QUEUED else None,
    )
    instance.add_run(run)
    return run


@pytest.fixture(scope="module")
def instance() -> Iterator[dg.DagsterInstance]:
    """One instance for this module's tests (each uses its own run ids): an instance's start-up
    is most of such a test's time."""
    with dg.instance_for_test() as inst:
        yield inst


ORIGIN = RemoteJobOrigin(
    repository_origin=RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("loc"), "repo"),
    job_name=CELL_BATCH_JOB,
)
"""Where a queued run's job comes from (Dagster wants one for a queued run)."""


def _cell_run(
    instance: dg.DagsterInstance, claim: str, status: dg.DagsterRunStatus, executor: str, cell: str
) -> dg.DagsterRun:
    """A cell's run as a batch creates it: its claim as run id, the batch running it as tag."""
    tags = {CELL_BATCH_TAG: executor, "dagster/partition/task": "t", "dagster/partition/cell": cell}
    return _run(instance, status, claim, **tags)


def _now(instance: dg.DagsterInstance, *runs: dg.DagsterRun) -> dict[str, dg.DagsterRun]:
    out = {}
    for r in runs:
        now = instance.get_run_by_id(r.run_id)
        assert now is not None
        out[r.run_id] = now
    return out


def test_each_cell_of_a_batch_is_answered_once_from_its_own_run_or_the_batchs_end(
    instance: dg.DagsterInstance,
) -> None:
    S = dg.DagsterRunStatus
    cells = [cell_job("t", f"a.r{i}") for i in range(3)]
    batch = batch_job(cells)
    (c0, _), (c1, _), (c2, _) = claims(batch)
    running = _run(instance, S.STARTED)
    first = _cell_run(instance, c0, S.SUCCESS, running.run_id, "a.r0")
    second = _cell_run(instance, c1, S.STARTED, running.run_id, "a.r1")
    reported: dict[str, set[str]] = {}
    batches = {running.run_id: batch}
    out, again, closed = batch_outcomes(instance, batches, reported, _now(instance, running))
    assert [(f.job.label, f.run_id, f.ok) for f in out] == [("t a.r0", first.run_id, True)]
    assert again == [] and closed == []
    assert batch_outcomes(instance, batches, reported, _now(instance, running)) == (
        [],
        [],
        [],
    ), "once"

    # The batch dies while a.r1 runs and before a.r2 started: a.r1's run is marked failed
    # and it is a failure of the batch (infra), not a silent success; a.r2 paid nothing and
    # is submitted again, neither a failure nor a retry, and its claim is taken back.
    instance.report_run_failed(running)
    out, again, closed = batch_outcomes(instance, batches, reported, _now(instance, running))
    assert [(f.job.label, f.ok, f.canceled, f.run_id) for f in out] == [
        ("t a.r1", False, False, second.run_id)
    ]
    assert "ended before the cell did" in str(out[0].failure)
    assert [j.label for j in again] == ["t a.r2"]
    marked = instance.get_run_by_id(second.run_id)
    assert marked is not None and marked.status == S.FAILURE
    assert closed == [running.run_id] and running.run_id not in reported
    assert not void_claim(instance, c2, running.run_id), "a batch can no longer claim a.r2"

    # A batch that dies before its first cell (its launch timed out): one failed launch is
    # one failed cell, as a run per cell failing at launch was; the others go again.
    batch = batch_job(cells)
    dead = _run(instance, S.FAILURE)
    out, again, _ = batch_outcomes(instance, {dead.run_id: batch}, {}, _now(instance, dead))
    assert [(f.job.label, f.ok, f.run_id) for f in out] == [("t a.r0", False, "")]
    assert [j.label for j in again] == ["t a.r1", "t a.r2"]

    # A canceled batch: its cells are canceled (the generation stopped them).
    canceled = _run(instance, S.CANCELED)
    out, again, _ = batch_outcomes(
        instance, {canceled.run_id: batch_job(cells[:2])}, {}, _now(instance, canceled)
    )
    assert [(f.job.label, f.canceled) for f in out] == [("t a.r0", True), ("t a.r1", True)]


def test_a_cell_another_batch_took_is_answered_from_that_batchs_run(
    instance: dg.DagsterInstance,
) -> None:
    """Work-stealing: batch B pays a cell of batch A. A ending does not answer that cell (it
    waits for B), and B dying while it runs the cell is that cell's infra failure."""
    S = dg.DagsterRunStatus
    cells = [cell_job("t", f"a.r{i}") for i in range(2)]
    batch = batch_job(cells)
    (c0, _), (c1, _) = claims(batch)
    owner = _run(instance, S.STARTED)
    thief = _run(instance, S.STARTED)
    _cell_run(instance, c0, S.SUCCESS, owner.run_id, "a.r0")
    taken = _cell_run(instance, c1, S.STARTED, thief.run_id, "a.r1")
    instance.report_run_canceled(owner)  # its own cell paid, the other skipped: it ended
    reported: dict[str, set[str]] = {}
    batches = {owner.run_id: batch}
    out, again, closed = batch_outcomes(instance, batches, reported, _now(instance, owner))
    assert [f.job.label for f in out] == ["t a.r0"] and again == []
    assert closed == [], "the batch stays pending while another batch pays its cell"
    instance.report_run_failed(thief)
    out, again, closed = batch_outcomes(instance, batches, reported, _now(instance, owner))
    assert [(f.job.label, f.ok, f.canceled, f.run_id) for f in out] == [
        ("t a.r1", False, False, taken.run_id)
    ]
    assert thief.run_id in str(out[0].failure) and closed == [owner.run_id]


def test_a_queued_batch_whose_cells_were_all_taken_is_canceled_before_its_launch(
    instance: dg.DagsterInstance,
) -> None:
    S = dg.DagsterRunStatus
    batch = batch_job([cell_job("t", "a.r0"), cell_job("t", "a.r1")])
    (c0, _), (c1, _) = claims(batch)
    queued = _run(instance, S.QUEUED)
    _cell_run(instance, c0, S.SUCCESS, "other", "a.r0")
    batches = {queued.run_id: batch}
    reported: dict[str, set[str]] = {}
    out, _, _ = batch_outcomes(instance, batches, reported, _now(instance, queued))
    assert [f.job.label for f in out] == ["t a.r0"]
    assert _now(instance, queued)[queued.run_id].status == S.QUEUED, "a.r1 is still its own"
    _cell_run(instance, c1, S.STARTED, "other", "a.r1")
    batch_outcomes(instance, batches, reported, _now(instance, queued))
    assert _now(instance, queued)[queued.run_id].status == S.CANCELED


def _batch_run(
    instance: dg.DagsterInstance, batch: Job, status: dg.DagsterRunStatus, generation: str
) -> dg.DagsterRun:
    run = dg.DagsterRun(
        job_name=CELL_BATCH_JOB,
        run_id=str(uuid.uuid4()),
        status=status,
        tags={STEAL_SCOPE_TAG: generation},
        remote_job_origin=ORIGIN if status == dg.DagsterRunStatus.QUEUED else None,
        run_config={
            "resources": {"bench": {"config": {"tasks_dir": "T", "artifact_root": "A"}}},
            "ops": {
                pay_cells.name: {
                    "config": {"cells": list(batch.op_config[pay_cells.name]["cells"])}
                }
            },
        },
    )
    instance.add_run(run)
    return run


def test_a_free_slot_takes_queued_batches_cells_first_then_running_batches_last_cells(
    instance: dg.DagsterInstance,
) -> None:
    S = dg.DagsterRunStatus
    me = _batch_run(instance, batch_job([cell_job("t", "x.r0")]), S.STARTED, "g0001")
    running = batch_job([cell_job("t", f"r.r{i}") for i in range(3)])
    _batch_run(instance, running, S.STARTED, "g0001")
    old = batch_job([cell_job("u", f"q.r{i}") for i in range(2)])
    _batch_run(instance, old, S.QUEUED, "g0001")
    new = batch_job([cell_job("v", "n.r0")])
    _batch_run(instance, new, S.QUEUED, "g0001")
    _batch_run(instance, batch_job([cell_job("w", "o.r0")]), S.QUEUED, "g0002")
    _batch_run(instance, batch_job([cell_job("w", "d.r0")]), S.SUCCESS, "g0001")
    _cell_run(instance, claims(old)[0][0], S.STARTED, "other", "q.r0")  # taken already
    _cell_run(instance, claims(running)[0][0], S.STARTED, "other", "r.r0")
    assert [(e["task"], e["cell"]) for e in stealable(instance, me)] == [
        ("u", "q.r1"),
        ("v", "n.r0"),
        ("t", "r.r2"),
        ("t", "r.r1"),
    ]
    assert stealable(instance, dg.DagsterRun(job_name=CELL_BATCH_JOB)) == [], "no generation"


def test_a_batchs_cells_hold_no_second_agent_sessions_slot() -> None:
    """With pools per run, an active in-process cell run whose op is in the pool counts against
    it beside the batch that holds the slot; the cells a batch pays are in no pool."""
    tasks = str(Path(__file__).resolve().parent.parent / "tasks")
    in_batch = cell_assets_in_batch(tasks)
    assert sorted(in_batch) == ["candidate_cells", "comparator_cells"]
    assert [a.op.pool for a in in_batch.values()] == [None, None]
    located = build_cell_assets(*bench_cell_keys(tasks, top_ups=True))
    assert [a.op.pool for a in located] == ["agent_sessions", "agent_sessions"]


def test_a_batch_whose_cells_were_all_taken_ends_without_taking_others(
    instance: dg.DagsterInstance,
) -> None:
    S = dg.DagsterRunStatus
    batch = batch_job([cell_job("cache-invalidation", "baseline.r0")])
    entries = list(batch.op_config[pay_cells.name]["cells"])
    instance.add_dynamic_partitions(TASKS_PARTITIONS_NAME, ["cache-invalidation"])
    _cell_run(instance, entries[0]["claim"], S.SUCCESS, "other", "baseline.r0")
    asked: list[int] = []
    lines: list[str] = []
    failed = pay_batch(
        instance,
        entries,
        tasks_dir=str(Path(__file__).resolve().parent.parent / "tasks"),
        artifact_root="",
        batch_run_id="me",
        progress=lines.append,
        steal=lambda: asked.append(1) or [],  # type: ignore[func-returns-value]
    )
    assert failed == [] and asked == [] and "claimed by another batch" in lines[-1]
