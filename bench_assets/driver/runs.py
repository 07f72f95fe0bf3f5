"""What the driver pays for and how it ended: the words every module that runs jobs shares.

A :class:`Job` is one run to pay (assets of one partition, or a named job of the code location: an
``input_batch`` of :mod:`bench_assets.driver.inputs`, a ``cell_batch`` of
:mod:`bench_assets.driver.cellbatch`); a :class:`Finished` is how one ended; :func:`run_failure`
reads a failed run's error from its events; :func:`assets_by_name` names the asset definitions an
in-process run materializes. The executors (:mod:`bench_assets.driver.runqueue`) take jobs and
answer with :class:`Finished`; the batch modules build jobs and read their runs back. This module
stands below all of them, so none of them imports another to learn these words.
"""

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg

from bench_assets.driver.instance import StepFailed
from bench_assets.kernel.errors import error_class


@dataclass(frozen=True)
class Job:
    """One materialization: assets of one partitioning, one partition, its config and tags."""

    assets: tuple[str, ...]
    partition: str | None
    op_config: Mapping[str, Any] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    label: str = ""
    job: str | None = None
    """A job of the code location to run instead of the asset job (``assets`` then empty)."""
    cells: tuple["Job", ...] = ()
    """For a ``cell_batch`` run: the cell jobs it pays, each answered on its own by
    :meth:`bench_assets.driver.runqueue.Executor.poll` (:mod:`bench_assets.driver.cellbatch`); the
    batch itself is never answered."""


@dataclass(frozen=True)
class Finished:
    """A job that ended: its run, whether it succeeded, and why not."""

    job: Job
    run_id: str
    ok: bool
    failure: StepFailed | None = None
    canceled: bool = False


def cancel_failure(run_id: str) -> StepFailed:
    """How a canceled run (or the batch run a cell ran in) failed its job."""
    return StepFailed(run_id, "RunCanceled", "run canceled")


def run_failure(instance: dg.DagsterInstance, run_id: str) -> StepFailed:
    """A failed run's step error: the wfbench error in its cause chain, else the innermost."""
    for kind in (dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE):
        for rec in instance.get_records_for_run(run_id, of_type=kind).records:
            ev = rec.event_log_entry.dagster_event
            err = getattr(ev.event_specific_data, "error", None) if ev else None
            chain = []
            while err is not None:
                chain.append(err)
                err = err.cause
            if chain:
                ours = [c for c in chain if c.cls_name and error_class(c.cls_name) is not None]
                chosen = ours[0] if ours else chain[-1]
                step = (ev.step_key if ev else None) or run_id
                return StepFailed(step, chosen.cls_name or "Error", chosen.message.strip())
    return StepFailed(run_id, "RunFailure", f"run {run_id} failed without a step error")


class RunWatch:
    """The runs a poll loop waits on, by id, read in bulk at a cost that follows what changed.

    A generation's driver polls its open runs twice a second: every queued batch, and every open
    cell's claim (:mod:`bench_assets.driver.cellbatch`) — at 1,000 tasks about 9,000 ids, whose
    plain read by id took ~0.4 s of CPU per poll. A watch reads every id asked for in full at the
    first call and every :data:`FULL_EVERY_S` after it; in between, the ids not asked for at the
    previous read in full, and of the others only the runs the instance updated since the previous
    read began (less :data:`MARGIN_S`, for the clocks of the processes that write run updates). A
    run created or changed between two reads is therefore seen at the next one; an update by a
    writer whose clock lags by more than the margin, at the next full read at the latest.
    """

    FULL_EVERY_S = 30.0
    MARGIN_S = 10.0

    def __init__(
        self,
        instance: dg.DagsterInstance,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.instance = instance
        self._clock, self._wall = clock, wall
        self._known: dict[str, dg.DagsterRun] = {}
        self._full_at: float | None = None
        self._since: datetime | None = None
        self._asked: set[str] = set()

    def read(self, ids: Collection[str]) -> dict[str, dg.DagsterRun]:
        """The runs of ``ids`` that exist, by id (an id with no run is absent)."""
        wanted = set(ids)
        began = self._wall()
        now = self._clock()
        if self._since is None or self._full_at is None or now - self._full_at >= self.FULL_EVERY_S:
            found = self.instance.get_runs(dg.RunsFilter(run_ids=list(wanted))) if wanted else []
            self._known = {r.run_id: r for r in found}
            self._full_at = now
        else:
            after = self._since - timedelta(seconds=self.MARGIN_S)
            changed = list(self.instance.get_runs(dg.RunsFilter(updated_after=after)))
            new = list(wanted - self._asked)  # first asked for now: read in full
            if new:
                changed += self.instance.get_runs(dg.RunsFilter(run_ids=new))
            self._known = {i: r for i, r in self._known.items() if i in wanted}
            for r in changed:
                if r.run_id in wanted:
                    self._known[r.run_id] = r
        self._since = began
        self._asked = wanted
        return {i: self._known[i] for i in wanted if i in self._known}


def assets_by_name(tasks_dir: str, names: tuple[str, ...]) -> list[Any]:
    """The asset definitions named (cell assets built with the cell keys of ``tasks_dir``)."""
    from bench_assets.defs import decision, inputs
    from bench_assets.defs.cells import bench_cell_keys, build_cell_assets, candidate_overlay

    known: dict[str, Any] = {
        a.key.to_user_string(): a
        for a in (
            inputs.incumbent_skills,
            inputs.task_bindings,
            inputs.oracle_snapshots,
            inputs.sanitized_graphs,
            inputs.task_environments,
            candidate_overlay,
            decision.aggregates,
            decision.promotion_decision,
            decision.benchmark_report,
            *build_cell_assets(*bench_cell_keys(tasks_dir, top_ups=True)),
        )
    }
    return [known[n] for n in names]
