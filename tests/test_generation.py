"""Generations end to end: the weekly trigger, the daemon-path job, evolve, breaker, cron."""

import datetime as dt
import json
from pathlib import Path

import dagster as dg
import pytest
import yaml
from click.testing import CliRunner
from dagster._utils.schedules import cron_string_iterator  # what the Schedules page computes

from bench_assets.cli import main
from bench_assets.config.cron import latest_tick, matches, next_tick, validate_cron
from bench_assets.defs.resources import BenchResource
from bench_assets.driver import automation
from bench_assets.driver.cellbatch import CELL_BATCH_TAG
from bench_assets.driver.evolve import evolve
from tests.conftest import write_yaml
from tests.test_dagster_cells import replay_bench

SAT_0300 = dt.datetime(2026, 11, 28, 3, 0, tzinfo=dt.UTC)  # a Saturday


FRI_1200 = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)


def test_cron_ticks() -> None:
    assert SAT_0300.strftime("%A") == "Saturday"
    assert matches("0 3 * * 6", SAT_0300)
    assert not matches("0 3 * * 6", SAT_0300 - dt.timedelta(minutes=1))
    assert latest_tick("0 3 * * 6", SAT_0300 + dt.timedelta(hours=5)) == SAT_0300
    assert latest_tick("0 3 * * 6", SAT_0300 - dt.timedelta(minutes=1)) == SAT_0300 - dt.timedelta(
        days=7
    )
    assert matches("0 9 1 * mon", dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC))  # dom OR dow
    assert matches("0 9 1 * mon", dt.datetime(2026, 12, 7, 9, 0, tzinfo=dt.UTC))


def test_a_cron_that_never_fires_is_rejected() -> None:
    with pytest.raises(ValueError, match="never fires"):
        validate_cron("0 0 31 2 *")
    validate_cron("0 0 29 2 *")  # leap days do come


def test_the_weekly_schedule_is_a_dagster_schedule_with_bench_yaml_cron(tmp_path: Path) -> None:
    """The next tick after a Friday is that week's Saturday 03:00 UTC, as the UI computes it."""
    root = replay_bench(tmp_path)
    sched = automation.build_weekly_schedule(str(root))
    assert isinstance(sched, dg.ScheduleDefinition)
    assert (sched.cron_schedule, sched.execution_timezone) == ("0 3 * * 6", "UTC")
    assert sched.default_status == dg.DefaultScheduleStatus.RUNNING
    assert FRI_1200.strftime("%A") == "Friday"
    assert next_tick("0 3 * * 6", FRI_1200) == SAT_0300
    # Dagster's own tick arithmetic (what the Schedules page shows) agrees.
    ticks = cron_string_iterator(FRI_1200.timestamp(), sched.cron_schedule, "UTC")
    assert next(ticks) == SAT_0300

    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["schedule"] = {"cron": "30 6 * * 1", "timezone": "Europe/Berlin"}
    write_yaml(root / "bench.yaml", data)
    berlin = automation.build_weekly_schedule(str(root))
    assert (berlin.cron_schedule, berlin.execution_timezone) == ("30 6 * * 1", "Europe/Berlin")
    # Monday 06:30 in Berlin is 05:30 UTC in winter.
    assert next_tick("30 6 * * 1", FRI_1200, "Europe/Berlin") == dt.datetime(
        2026, 11, 30, 5, 30, tzinfo=dt.UTC
    )


def _tick(root: Path, sched_root: Path, when: dt.datetime):
    sched = automation.build_weekly_schedule(str(sched_root))
    ctx = dg.build_schedule_context(
        scheduled_execution_time=when, resources={"bench": BenchResource(tasks_dir=str(root))}
    )
    result = sched(ctx)
    assert isinstance(result, dg.RunRequest | dg.SkipReason), result
    return result


def test_the_schedule_starts_one_generation_per_tick_and_skips_saying_why(tmp_path: Path) -> None:
    root = replay_bench(tmp_path)
    req = _tick(root, root, SAT_0300)
    assert isinstance(req, dg.RunRequest), req
    assert req.run_key == f"generation-{SAT_0300.isoformat()}"
    assert req.tags["wfbench/tick"] == SAT_0300.isoformat()

    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["schedule"] = {"cron": "0 4 * * 6"}
    write_yaml(root / "bench.yaml", data)
    stale = automation.build_weekly_schedule(str(tmp_path / "elsewhere"))  # default cron loaded
    assert stale.cron_schedule == "0 3 * * 6"
    moved = _tick(root, tmp_path / "elsewhere", SAT_0300)
    assert isinstance(moved, dg.SkipReason) and "reload the code" in (moved.skip_message or "")

    data["schedule"] = {"cron": "0 3 * * 6", "enabled": False}
    write_yaml(root / "bench.yaml", data)
    assert automation.build_weekly_schedule(str(root)).default_status == (
        dg.DefaultScheduleStatus.STOPPED
    )
    off = _tick(root, root, SAT_0300)
    assert isinstance(off, dg.SkipReason) and "enabled" in (off.skip_message or "")


def test_daemon_path_runs_a_whole_generation_then_pays_only_what_changed(tmp_path: Path) -> None:
    root = replay_bench(tmp_path)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["runs"] = 2
    data["reuse"] = {"canaries": 1}
    write_yaml(root / "bench.yaml", data)
    lines = [json.loads(x) for x in (root / "replays" / "w.jsonl").read_text().splitlines()]
    for f in ("w.jsonl", "b.jsonl"):
        rows = [json.loads(x) for x in (root / "replays" / f).read_text().splitlines()]
        rows.append({**rows[0], "run": 1})
        (root / "replays" / f).write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert lines
    second = root / "candidates" / "c2"
    (second / "files" / "plan").mkdir(parents=True)
    (second / "files" / "plan" / "SKILL.md").write_text("---\nname: plan\n---\nBudget.\n")
    write_yaml(second / "candidate.yaml", {"id": "c2", "title": "plan budget"})
    art = tmp_path / "art"
    with dg.instance_for_test() as instance:
        result = automation.weekly_generation.execute_in_process(
            instance=instance,
            resources={"bench": BenchResource(tasks_dir=str(root), artifact_root=str(art))},
        )
        assert result.success
        g1 = result.output_for_node("run_generation")
        assert (g1["generation"], g1["candidate"]) == ("g0001", "c1")
        assert g1["paid_cells"] == 6 and g1["reused_cells"] == 0
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"wfbench/generation": "g0001"}))
        assert len(runs) >= 6 + 3, "every stage ran as its own tagged run"
        g2 = evolve(str(root), artifact_root=str(art), instance=instance)
        # Only the candidate cells (2), one gate canary of workflow (cand's pairs_with) on the
        # one task and one canary of baseline are paid.
        assert (g2.generation, g2.candidate, g2.paid_cells, g2.reused_cells) == (
            "g0002",
            "c2",
            4,
            2,
        )
        paid = {(p.arm, p.kind) for p in g2.plan if p.action == "run"}
        assert paid == {("cand", "candidate"), ("baseline", "canary"), ("workflow", "canary")}
        launched = instance.get_runs(filters=dg.RunsFilter(tags={"wfbench/generation": "g0002"}))
        cell_runs = [r for r in launched if "dagster/partition/cell" in r.tags]
        assert len(cell_runs) == 4, "no run is launched for a cell that is only reused"
        body = json.loads(
            Path(
                str(
                    [
                        md
                        for md in [
                            dict(
                                instance.fetch_materializations(
                                    dg.AssetKey("promotion_decision"), limit=1
                                )
                                .records[0]
                                .asset_materialization.metadata
                            )
                        ]
                    ][0]["decision_path"].value
                )
            ).read_text()
        )
        reused = [e for e in body["decision"]["evidence"] if e["reused"]]
        assert reused and all(e["generation"] == "g0001" for e in reused)


# A failing `command` session sometimes leaves a bwrap Popen collected unwaited under load (see
# test_systemic_failures_are_retried_within_the_generation); not what this test is about.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_outage_breaker_aborts_the_generation(tmp_path: Path, monkeypatch) -> None:
    root = replay_bench(tmp_path)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["runs"] = 3
    data["limits"] = {"outage_streak": 3, "agent_sessions": 1}
    for arm in ("baseline", "workflow"):
        data["arms"][arm]["agent"] = {"adapter": "command", "argv": ["sh", "-c", "exit 1"]}
    write_yaml(root / "bench.yaml", data)
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(tmp_path / "art"))
    result = CliRunner().invoke(main, ["evolve", "--tasks", str(root), "--json"])
    assert result.exit_code == 1, result.output
    body = json.loads(result.stdout)
    assert body["aborted"] is True
    assert body["decision"] == "insufficient_evidence"


@pytest.mark.slow
# A failing `command` session sometimes leaves a bwrap Popen collected unwaited (seen in
# test_outage_breaker_aborts_the_generation under load too); not what this test is about.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_systemic_failures_are_retried_within_the_generation(tmp_path: Path) -> None:
    """Issue 13 (E4): an excluded (systemic) cell is re-paid up to ``policy.retries`` times."""
    root = replay_bench(tmp_path)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["limits"] = {"outage_streak": 100, "agent_sessions": 1}
    data["policy"] = {**(data.get("policy") or {}), "retries": 1}
    data["arms"]["baseline"]["agent"] = {"adapter": "command", "argv": ["sh", "-c", "exit 1"]}
    write_yaml(root / "bench.yaml", data)
    with dg.instance_for_test() as instance:
        result = evolve(
            str(root), artifact_root=str(tmp_path / "art"), instance=instance, in_process=True
        )
    baseline = [c for c in result.cells if c["cell"] == "baseline.r0"]
    assert len(baseline) == 2, "the failing cell is paid once and retried once, not more"
    others = [c for c in result.cells if c["cell"] != "baseline.r0"]
    assert others and all(c["error_kind"] is None or c["cell"] != "baseline.r0" for c in others)
    assert sum(1 for c in result.cells if c["cell"] == "workflow.r0") == 1, "valid cells: no retry"


def test_spend_cap_counts_reported_cost_bounds_unknown_cost_and_trips() -> None:
    from bench_assets.generation.queue import SpendCap

    off = SpendCap(None)
    assert not any(off.observe("c", None, None) for _ in range(3))
    cap = SpendCap(1.0)
    assert not cap.observe("a.r0", 0.4, None)
    assert not cap.observe("a.r1", None, 0.5)  # unknown cost, bounded by the arm's budget
    assert cap.observe("a.r2", 0.2, None)
    assert cap.reason == (
        "spend cap reached: $1.1000 of $1 spent by 3 paid cell(s), "
        "1 counted at their session budget"
    )
    unbounded = SpendCap(5.0)
    assert unbounded.observe("b.r0", None, None), "unknown is not zero"
    assert "cell b.r0 reported no cost" in unbounded.reason


def test_spend_cap_stops_scheduling_and_fails_the_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M8: limits.max_spend_usd stops new cells like the breaker, says why, exits 1."""
    root = replay_bench(tmp_path)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["limits"] = {"max_spend_usd": 1.0, "agent_sessions": 1}
    write_yaml(root / "bench.yaml", data)
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(tmp_path / "art"))
    result = CliRunner().invoke(main, ["evolve", "--tasks", str(root), "--json"])
    assert result.exit_code == 1, result.output
    body = json.loads(result.stdout)
    assert body["aborted"] is True
    assert body["decision"] == "insufficient_evidence"
    assert body["stop_reason"].startswith("spend cap reached: $1.4000 of $1 spent by 2 paid cell")


def test_turn_and_budget_limits_never_trip_the_outage_breaker() -> None:
    """M2: five looping sessions in a row are the arm's failures, not an outage."""
    from bench_assets.generation.queue import OutageBreaker
    from bench_assets.kernel.errorkinds import ErrorKind

    breaker = OutageBreaker(5)
    for kind in [ErrorKind.TURN_LIMIT] * 5 + [ErrorKind.BUDGET_LIMIT] * 5:
        assert not breaker.observe(kind)
    for _ in range(5):
        breaker.observe(ErrorKind.INFRA_ERROR)
    assert breaker.tripped


QUEUED_INSTANCE = """\
telemetry: {enabled: false}
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config: {dequeue_interval_seconds: 1}
concurrency:
  runs: {max_concurrent_runs: 8}
  pools: {granularity: run, default_limit: 2}
"""


def _overlap(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one moment."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    best = now = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def test_cells_run_as_queued_runs_bounded_by_the_agent_sessions_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The production path: every paid cell is a Dagster run that went through the run queue
    (a daemon started for the generation), tagged with its generation, and the agent_sessions
    pool (limit 1 here) never let two sessions overlap."""
    root = replay_bench(tmp_path)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["runs"] = 2
    data["limits"] = {"agent_sessions": 1}
    write_yaml(root / "bench.yaml", data)
    for f in ("w.jsonl", "b.jsonl"):
        rows = [json.loads(x) for x in (root / "replays" / f).read_text().splitlines()]
        rows.append({**rows[0], "run": 1})
        (root / "replays" / f).write_text("".join(json.dumps(r) + "\n" for r in rows))
    home = tmp_path / "queued_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(QUEUED_INSTANCE)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.delenv("WFBENCH_IN_PROCESS")
    instance = dg.DagsterInstance.get()
    try:
        res = evolve(
            str(root), artifact_root=str(tmp_path / "art"), instance=instance, progress=print
        )
        assert (res.generation, res.paid_cells, res.reused_cells) == ("g0001", 6, 0)
        assert res.decision == "insufficient_evidence" or res.decision in (
            "promote",
            "keep_incumbent",
        )
        records = instance.get_run_records(
            filters=dg.RunsFilter(tags={"wfbench/generation": "g0001"})
        )
        cells = [r for r in records if "dagster/partition/cell" in r.dagster_run.tags]
        assert len(cells) == 6, "one run per paid cell"
        batches = set()
        for r in cells:
            assert r.dagster_run.status == dg.DagsterRunStatus.SUCCESS
            # A cell's run went through the run coordinator's queue, or (several cells of a task
            # in one run start-up) is an in-process run of a cell_batch run that did.
            queued = r.dagster_run.tags.get(CELL_BATCH_TAG, r.dagster_run.run_id)
            batches.add(queued)
            enqueued = instance.get_records_for_run(
                queued, of_type=dg.DagsterEventType.RUN_ENQUEUED
            ).records
            assert enqueued, "the run went through the run coordinator's queue"
        assert len(batches) < len(cells), "cells of a task share a run start-up"
        spans = [(r.start_time, r.end_time) for r in cells if r.start_time and r.end_time]
        assert len(spans) == 6 and _overlap(spans) == 1, "agent_sessions pool limit 1 held"
        assert all(c["run_id"] for c in res.cells), "every paid cell names its run"
    finally:
        instance.dispose()
