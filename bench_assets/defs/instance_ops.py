"""Operations on a Dagster instance used by the CLI: partition sync and pool limits.

Kept in ``defs/`` because it is the only code besides assets that talks to Dagster; the CLI
imports it lazily so that ``wfbench validate`` never pays for importing Dagster.
"""

from collections.abc import Callable

import dagster as dg

from bench_assets.catalog import Benchmark
from bench_assets.defs.partitions import TASKS_PARTITIONS_NAME
from bench_assets.sync import SyncPlan, plan_sync

AGENT_POOL = "agent_sessions"
GRAPH_POOL = "graph_build"


def sync_instance(
    instance: dg.DagsterInstance, bench: Benchmark
) -> tuple[SyncPlan, dict[str, int]]:
    """Make the task partitions equal to ``bench``'s tasks and apply its pool limits."""
    current = list(instance.get_dynamic_partitions(TASKS_PARTITIONS_NAME))
    plan = plan_sync(current, bench.task_ids())
    if plan.add:
        instance.add_dynamic_partitions(TASKS_PARTITIONS_NAME, plan.add)
    for key in plan.delete:
        instance.delete_dynamic_partition(TASKS_PARTITIONS_NAME, key)
    limits = {
        AGENT_POOL: bench.config.limits.agent_sessions,
        GRAPH_POOL: bench.config.limits.graph_builds,
    }
    for pool, n in limits.items():
        instance.event_log_storage.set_concurrency_slots(pool, n)
    return plan, limits


INPUT_ASSETS = ("task_bindings", "oracle_snapshots", "sanitized_graphs")
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
"""Run config keeping Dagster's step-by-step DEBUG log off the terminal (the CLI shows progress)."""


def _latest_metadata(
    instance: dg.DagsterInstance, key: str, partition: str | None
) -> dict[str, object]:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey(key), asset_partitions=[partition] if partition else None
        ),
        limit=1,
    ).records
    if not records or records[0].asset_materialization is None:
        return {}
    md = records[0].asset_materialization.metadata
    out: dict[str, object] = {k: v.value for k, v in md.items()}
    tags = records[0].asset_materialization.tags or {}
    out["data_version"] = tags.get("dagster/data_version")
    return out


def materialize_inputs(
    instance: dg.DagsterInstance,
    task_ids: list[str],
    *,
    tasks_dir: str,
    artifact_root: str,
    progress: Callable[[str], None],
) -> dict[str, dict[str, dict[str, object]]]:
    """Materialize ``incumbent_skills`` and the three input assets of every task, one run each.

    Returns, per task (and ``""`` for the skills), the latest metadata of each asset, with
    ``data_version`` and ``previous_data_version`` (None when it was never materialized) added.
    """
    from bench_assets.defs.inputs import (
        incumbent_skills,
        oracle_snapshots,
        sanitized_graphs,
        task_bindings,
    )
    from bench_assets.defs.resources import BenchResource

    resources = {"bench": BenchResource(tasks_dir=tasks_dir, artifact_root=artifact_root)}
    out: dict[str, dict[str, dict[str, object]]] = {}
    progress("incumbent_skills ...")
    _run(
        dg.materialize(
            [incumbent_skills],
            instance=instance,
            resources=resources,
            run_config=QUIET,
            raise_on_error=False,
        )
    )
    before = _latest_metadata(instance, "incumbent_skills", None).get("data_version")
    out[""] = {"incumbent_skills": _latest_metadata(instance, "incumbent_skills", None)}
    out[""]["incumbent_skills"]["previous_data_version"] = before
    for i, task_id in enumerate(task_ids, 1):
        progress(f"[{i}/{len(task_ids)}] {task_id}: binding, oracle snapshot, sanitized graph ...")
        previous = {
            k: _latest_metadata(instance, k, task_id).get("data_version") for k in INPUT_ASSETS
        }
        result = dg.materialize(
            [task_bindings, oracle_snapshots, sanitized_graphs],
            instance=instance,
            partition_key=task_id,
            resources=resources,
            run_config=QUIET,
            raise_on_error=False,
        )
        _run(result)
        out[task_id] = {k: _latest_metadata(instance, k, task_id) for k in INPUT_ASSETS}
        for k in INPUT_ASSETS:
            out[task_id][k]["previous_data_version"] = previous[k]
    return out


def _run(result: dg.ExecuteInProcessResult) -> None:
    """Re-raise the first step failure as the original wfbench error when there is one."""
    if result.success:
        return
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data is not None:
            chain = []
            info = event.step_failure_data.error
            while info is not None:
                chain.append(info)
                info = info.cause
            ours = [c for c in chain if c.cls_name and _is_wfbench_error(c.cls_name)]
            chosen = ours[0] if ours else chain[-1] if chain else None
            name = chosen.cls_name if chosen is not None else "Error"
            message = chosen.message.strip() if chosen is not None else "step failed"
            raise StepFailed(event.step_key or "?", name or "Error", message)
    raise StepFailed("?", "Error", "run failed")


class StepFailed(Exception):
    """A materialization step failed; carries the original error's class name and message."""

    def __init__(self, step: str, cls_name: str, message: str) -> None:
        self.step, self.cls_name, self.message = step, cls_name, message
        super().__init__(f"{step} failed: {message}")


def _is_wfbench_error(cls_name: str) -> bool:
    from bench_assets import errors

    cls = getattr(errors, cls_name, None)
    return isinstance(cls, type) and issubclass(cls, errors.WfbenchError)
