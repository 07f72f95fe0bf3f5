"""Sensors: keep the ``tasks`` partitions equal to the validated task folders."""

import dagster as dg

from bench_assets.defs.partitions import TASKS_PARTITIONS_NAME, task_partitions
from bench_assets.defs.resources import BenchResource
from bench_assets.tasks.catalog import collect_issues
from bench_assets.tasks.sync import plan_sync


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=(
        "Adds a task partition for every valid task folder and deletes partitions of removed "
        "tasks. While any benchmark file is invalid it changes nothing and reports the problems."
    ),
)
def tasks_sync_sensor(
    context: dg.SensorEvaluationContext, bench: BenchResource
) -> dg.SensorResult | dg.SkipReason:
    """Sync task partitions with ``tasks/``."""
    issues, loaded = collect_issues(bench.load_root())
    if loaded is None:
        shown = "\n".join(str(i) for i in issues[:20])
        return dg.SkipReason(f"tasks/ is invalid; partitions left unchanged:\n{shown}")
    current = list(context.instance.get_dynamic_partitions(TASKS_PARTITIONS_NAME))
    plan = plan_sync(current, loaded.task_ids())
    if plan.empty:
        return dg.SkipReason(f"{len(current)} task partitions already in sync")
    requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
    if plan.add:
        requests.append(task_partitions.build_add_request(plan.add))
    if plan.delete:
        requests.append(task_partitions.build_delete_request(plan.delete))
    return dg.SensorResult(dynamic_partitions_requests=requests)
