"""The driver's poll reads its open runs in bulk at a cost that follows what changed
(:class:`bench_assets.driver.runs.RunWatch`): every update is still seen, a new id at once, an
update whose writer's clock lags at the next full read at the latest."""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import pytest

from bench_assets.driver.runs import RunWatch

S = dg.DagsterRunStatus


@pytest.fixture(scope="module")
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


def _run(instance: dg.DagsterInstance) -> str:
    run = dg.DagsterRun(job_name="j", run_id=str(uuid.uuid4()), status=S.NOT_STARTED)
    instance.add_run(run)
    return run.run_id


class Clock:
    def __init__(self, lag_s: float = 0.0) -> None:
        self.t = 0.0
        self.lag_s = lag_s

    def mono(self) -> float:
        return self.t

    def wall(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.lag_s)


class Counting:
    """The instance, with the filters of every ``get_runs`` call recorded."""

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self.instance = instance
        self.calls: list[dg.RunsFilter] = []

    def get_runs(self, filters: dg.RunsFilter, **kw: Any) -> Any:
        self.calls.append(filters)
        return self.instance.get_runs(filters, **kw)


def test_every_update_is_seen_and_only_changes_are_read_between_full_reads(
    instance: dg.DagsterInstance,
) -> None:
    ids = [_run(instance) for _ in range(20)]
    clock = Clock()
    counting = Counting(instance)
    watch = RunWatch(counting, clock=clock.mono, wall=clock.wall)  # type: ignore[arg-type]
    first = watch.read(ids)
    assert set(first) == set(ids) and all(r.status == S.NOT_STARTED for r in first.values())
    instance.report_run_canceled(instance.get_run_by_id(ids[3]))  # type: ignore[arg-type]
    clock.t += 1
    second = watch.read(ids)
    assert second[ids[3]].status == S.CANCELED
    assert all(second[i].status == S.NOT_STARTED for i in ids if i != ids[3])
    last = counting.calls[-1]
    assert last.run_ids is None and last.updated_after is not None  # not 20 ids again

    claim = str(uuid.uuid4())  # an id with no run yet is absent, then seen once created
    clock.t += 1
    assert claim not in watch.read([*ids, claim])
    instance.add_run(dg.DagsterRun(job_name="j", run_id=claim, status=S.STARTED))
    clock.t += 1
    assert watch.read([*ids, claim])[claim].status == S.STARTED
    assert set(watch.read(ids[:5])) == set(ids[:5])  # ids no longer asked for are dropped


def test_an_update_by_a_lagging_clock_is_seen_at_the_next_full_read(
    instance: dg.DagsterInstance,
) -> None:
    ids = [_run(instance) for _ in range(3)]
    clock = Clock(lag_s=RunWatch.MARGIN_S + 60)  # the writers' clocks run 70 s behind ours
    watch = RunWatch(instance, clock=clock.mono, wall=clock.wall)
    watch.read(ids)
    instance.report_run_canceled(instance.get_run_by_id(ids[0]))  # type: ignore[arg-type]
    clock.t += 1
    assert watch.read(ids)[ids[0]].status == S.NOT_STARTED  # missed: older than the margin
    clock.t += RunWatch.FULL_EVERY_S
    assert watch.read(ids)[ids[0]].status == S.CANCELED  # the full read sees it
