"""The weekly trigger: a sensor that starts a generation at each tick of ``schedule.cron``.

A Dagster schedule can launch only one partitioning per run (dagster-notes Q5), while a
generation spans unpartitioned, per-task and per-cell assets. So the trigger launches the
``weekly_generation`` job, whose one op drives the whole generation (``wfbench evolve``'s code):
every stage is its own materialization run, visible in the UI, tagged ``wfbench/generation``.
The sensor evaluates the cron from bench.yaml itself (UTC) and remembers the last tick it handled
in its cursor, so each tick starts exactly one generation; on first start it records the latest
past tick without firing (no surprise run for last week).
"""

import datetime as dt

import dagster as dg

from bench_assets.catalog import load_benchmark
from bench_assets.cron import latest_tick
from bench_assets.defs.resources import BenchResource


@dg.op(description="Run one generation: plan, pay only for what must run, decide, report.")
def run_generation(context: dg.OpExecutionContext, bench: BenchResource) -> dict[str, object]:
    """Drive a whole generation from inside a run (the daemon path).

    The one call from ``defs/`` up into the driver: imported here, at run time, so that loading
    the code location never imports the driver.
    """
    from bench_assets.driver.evolve import NothingToEvaluate, evolve

    try:
        res = evolve(
            str(bench.load_root()),
            artifact_root=str(bench.artifacts().root),
            progress=context.log.info,
            instance=context.instance,
        )
    except NothingToEvaluate as e:
        context.log.info(f"nothing to evaluate: {e}")
        return {"generation": None}
    summary: dict[str, object] = {
        "generation": res.generation,
        "candidate": res.candidate,
        "decision": res.decision,
        "paid_cells": res.paid_cells,
        "reused_cells": res.reused_cells,
        "aborted": res.aborted,
    }
    context.add_output_metadata(summary)
    if res.aborted or res.unusable:
        raise dg.Failure(
            description=f"generation {res.generation} failed: "
            + ("outage breaker tripped" if res.aborted else res.unusable),
            metadata={k: str(v) for k, v in summary.items()},
        )
    return summary


@dg.job(
    description="One weekly evolution generation (started by weekly_generation_sensor).",
    tags={"wfbench/kind": "generation"},
)
def weekly_generation() -> None:
    """The generation driver job."""
    run_generation()


@dg.sensor(
    job=weekly_generation,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=(
        "Starts a generation at every tick of bench.yaml schedule.cron (UTC; default Saturdays "
        "03:00). Turn it off here, or with schedule.enabled: false in bench.yaml."
    ),
)
def weekly_generation_sensor(
    context: dg.SensorEvaluationContext, bench: BenchResource
) -> dg.SensorResult | dg.SkipReason:
    """Request a generation when a new cron tick has passed."""
    try:
        schedule = load_benchmark(bench.load_root()).config.schedule
    except Exception as e:  # invalid tasks/: the sync sensor reports the details
        return dg.SkipReason(f"benchmark invalid, no generation started: {str(e)[:300]}")
    if not schedule.enabled:
        return dg.SkipReason("schedule.enabled is false in bench.yaml")
    stamp, reason = due_tick(schedule.cron, now(), context.cursor)
    if stamp is None:
        return dg.SkipReason(reason)
    if context.cursor is None:
        return dg.SensorResult(skip_reason=reason, cursor=stamp)
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"generation-{stamp}", tags={"wfbench/tick": stamp})],
        cursor=stamp,
    )


def now() -> dt.datetime:
    """The sensor's clock (tests replace it to simulate a Saturday 03:00)."""
    return dt.datetime.now(dt.UTC)


def due_tick(cron: str, when: dt.datetime, cursor: str | None) -> tuple[str | None, str]:
    """The tick to act on (ISO string) and why; ``(None, reason)`` when nothing is due.

    With no cursor (first evaluation) the latest past tick is returned only to be recorded.
    """
    tick = latest_tick(cron, when)
    if tick is None:
        return None, f"cron {cron!r} has no tick in the past year"
    stamp = tick.isoformat()
    if cursor is None:
        return stamp, f"first evaluation: recorded {stamp}; the next tick starts a generation"
    if stamp <= cursor:
        return None, f"no new tick since {cursor} (cron {cron}, UTC)"
    return stamp, f"tick {stamp}"
