"""Cells paid in batches (issue 24, item 5): how a task's cells are grouped into ``cell_batch``
runs, and how the driver answers each cell of a batch from its own run."""

import uuid

import dagster as dg

from bench_assets.driver.cellbatch import (
    CELL_BATCH_JOB,
    CELL_BATCH_TAG,
    batch_job,
    batch_outcomes,
    cell_groups,
    pay_cells,
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


def _run(instance: dg.DagsterInstance, status: dg.DagsterRunStatus, **tags: str) -> dg.DagsterRun:
    run = dg.DagsterRun(job_name="j", run_id=str(uuid.uuid4()), status=status, tags=tags)
    instance.add_run(run)
    return run


def test_each_cell_of_a_batch_is_answered_once_from_its_own_run_or_the_batchs_end() -> None:
    S = dg.DagsterRunStatus
    cells = [cell_job("t", f"a.r{i}") for i in range(3)]
    batch = batch_job(cells)
    with dg.instance_for_test() as instance:
        running = _run(instance, S.STARTED)

        def child(cell: str, status: dg.DagsterRunStatus) -> dg.DagsterRun:
            return _run(
                instance,
                status,
                **{
                    CELL_BATCH_TAG: running.run_id,
                    "dagster/partition/task": "t",
                    "dagster/partition/cell": cell,
                },
            )

        first = child("a.r0", S.SUCCESS)
        second = child("a.r1", S.STARTED)
        reported: dict[str, set[str]] = {}
        out, again = batch_outcomes(instance, {running.run_id: batch}, reported, {})
        assert [(f.job.label, f.run_id, f.ok) for f in out] == [("t a.r0", first.run_id, True)]
        assert again == []
        assert batch_outcomes(instance, {running.run_id: batch}, reported, {}) == ([], []), "once"

        # The batch dies while a.r1 runs and before a.r2 started: a.r1's run is marked failed
        # and it is a failure of the batch (infra), not a silent success; a.r2 paid nothing and
        # is submitted again, neither a failure nor a retry.
        ended = running.with_status(S.FAILURE)
        out, again = batch_outcomes(
            instance, {running.run_id: batch}, reported, {running.run_id: ended}
        )
        assert [(f.job.label, f.ok, f.canceled, f.run_id) for f in out] == [
            ("t a.r1", False, False, second.run_id)
        ]
        assert "ended before the cell did" in str(out[0].failure)
        assert [j.label for j in again] == ["t a.r2"]
        marked = instance.get_run_by_id(second.run_id)
        assert marked is not None and marked.status == S.FAILURE
        assert running.run_id not in reported

        # A batch that dies before its first cell (its launch timed out): one failed launch is
        # one failed cell, as a run per cell failing at launch was; the others go again.
        dead = _run(instance, S.FAILURE)
        out, again = batch_outcomes(instance, {dead.run_id: batch}, {}, {dead.run_id: dead})
        assert [(f.job.label, f.ok, f.run_id) for f in out] == [("t a.r0", False, "")]
        assert [j.label for j in again] == ["t a.r1", "t a.r2"]

        # A canceled batch: its cells are canceled (the generation stopped them).
        canceled = _run(instance, S.CANCELED)
        out, again = batch_outcomes(
            instance, {canceled.run_id: batch_job(cells[:2])}, {}, {canceled.run_id: canceled}
        )
        assert [(f.job.label, f.canceled) for f in out] == [("t a.r0", True), ("t a.r1", True)]
