"""The weekly trigger: a Dagster schedule starting a generation at each tick of ``schedule.cron``.

A generation spans unpartitioned, per-task and per-cell assets, and one run holds assets of one
partitioning only (dagster-notes Q5). So the schedule launches the unpartitioned
``weekly_generation`` job, whose one op drives the whole generation (``wfbench evolve``'s code):
every stage is its own materialization run, visible in the UI, tagged ``wfbench/generation``.

The cron and time zone come from bench.yaml (``schedule.cron``, ``schedule.timezone``) when the
code location loads, so the Schedules page shows them and the next tick. Dagster's scheduler
(in the daemon) keeps the cursor: each tick starts one run (``run_key`` = the tick), and turning
the schedule on does not start a run for a tick already past. Each tick re-reads bench.yaml and
skips, saying why, when the benchmark is invalid, ``enabled`` is false, or the cron changed since
the code location loaded (reload it to pick up the new cron).

The job's op drives Dagster (it launches a whole generation's runs), so the job and its schedule
are the driver's: the code location ``bench_assets/definitions.py`` loads them, and ``defs/``
never imports the driver.
"""

import dagster as dg

from bench_assets.config.models import ScheduleConfig
from bench_assets.defs.resources import BenchResource, location_bench_config
from bench_assets.tasks.catalog import load_benchmark

SCHEDULE_NAME = "weekly_generation_schedule"


@dg.op(description="Run one generation: plan, pay only for what must run, decide, report.")
def run_generation(context: dg.OpExecutionContext, bench: BenchResource) -> dict[str, object]:
    """Drive a whole generation from inside a run (the daemon path).

    :mod:`bench_assets.driver.evolve` is imported here, when the run starts, so that loading the
    code location (every run worker does) does not import the generation's whole driver.
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
    description=f"One weekly evolution generation (started by {SCHEDULE_NAME}).",
    tags={"wfbench/kind": "generation"},
)
def weekly_generation() -> None:
    """The generation driver job."""
    run_generation()


def read_schedule(tasks_dir: str | None = None) -> tuple[ScheduleConfig, str | None]:
    """bench.yaml's schedule, and why the default is used instead (``None`` when it was read)."""
    cfg, problem = location_bench_config(tasks_dir)
    return (cfg.schedule, None) if cfg is not None else (ScheduleConfig(), problem)


def build_weekly_schedule(tasks_dir: str | None = None) -> dg.ScheduleDefinition:
    """The weekly schedule, with bench.yaml's cron and time zone (its defaults if unreadable)."""
    loaded, problem = read_schedule(tasks_dir)
    where = f"; bench.yaml unreadable, default cron in use: {problem}" if problem else ""

    @dg.schedule(
        name=SCHEDULE_NAME,
        cron_schedule=loaded.cron,
        execution_timezone=loaded.timezone,
        job=weekly_generation,
        default_status=(
            dg.DefaultScheduleStatus.RUNNING if loaded.enabled else dg.DefaultScheduleStatus.STOPPED
        ),
        description=(
            f"Starts a generation at every tick of bench.yaml schedule.cron ({loaded.cron}, "
            f"{loaded.timezone}){where}. Turn it off here, or with schedule.enabled: false in "
            "bench.yaml."
        ),
        tags={"wfbench/kind": "generation"},
    )
    def weekly_generation_schedule(
        context: dg.ScheduleEvaluationContext, bench: BenchResource
    ) -> dg.RunRequest | dg.SkipReason:
        try:
            now = load_benchmark(bench.load_root(), []).config.schedule
        except Exception as e:  # invalid tasks/: the sync sensor reports the details
            return dg.SkipReason(f"benchmark invalid, no generation started: {str(e)[:300]}")
        if not now.enabled:
            return dg.SkipReason("schedule.enabled is false in bench.yaml")
        if (now.cron, now.timezone) != (loaded.cron, loaded.timezone):
            return dg.SkipReason(
                f"bench.yaml now says cron {now.cron!r} ({now.timezone}) but the code location "
                f"loaded {loaded.cron!r} ({loaded.timezone}); reload the code location "
                "(Deployment → Reload) so the schedule follows bench.yaml"
            )
        stamp = context.scheduled_execution_time.isoformat()
        return dg.RunRequest(run_key=f"generation-{stamp}", tags={"wfbench/tick": stamp})

    return weekly_generation_schedule
