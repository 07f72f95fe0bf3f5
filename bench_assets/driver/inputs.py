"""A generation's input phase: which tasks' inputs are stale, and the runs that build them.

:func:`materialize_inputs` builds every input (``wfbench inputs``); :func:`input_status` reads the
input assets' latest materializations in bulk and applies
:func:`bench_assets.inputs.input_state.stale_reasons`; :func:`input_jobs` turns the stale tasks into
``input_batch`` runs of bounded batches (one run start-up and one ``graph_build`` slot per batch,
each task partition still its own materialization), which run :func:`materialize_task_inputs` in
their own process. Used by ``wfbench evolve`` (:mod:`bench_assets.driver.evolve`), ``wfbench plan``
(:mod:`bench_assets.driver.plan`) and ``wfbench inputs``. The ``input_batch`` job
(:data:`input_batch`) is defined here, beside the function its op runs, because its op drives
Dagster: the code location ``bench_assets/definitions.py`` loads it.
"""

from collections.abc import Callable
from typing import Any

import dagster as dg

from bench_assets.defs.resources import (
    BenchResource,
    latest_metadata,
    latest_metadata_by_partition,
)
from bench_assets.driver.instance import StepFailed, materialize
from bench_assets.driver.runs import Job
from bench_assets.inputs.input_state import INPUT_ASSETS
from bench_assets.tasks.catalog import Benchmark


def materialize_task_inputs(
    instance: dg.DagsterInstance,
    task_ids: list[str],
    *,
    tasks_dir: str,
    artifact_root: str,
    progress: Callable[[str], None],
    tags: dict[str, str] | None = None,
) -> None:
    """The input assets of each task, one in-process run per task partition, in order.

    What ``wfbench inputs`` runs, and what one ``input_batch`` run (a batch of a generation's
    stale tasks, :func:`build_task_inputs`) runs inside its own process. The first
    failure stops the batch (:class:`StepFailed`), so the generation fails closed before any
    cell is paid.
    """
    from bench_assets.defs.inputs import (
        oracle_snapshots,
        sanitized_graphs,
        task_bindings,
        task_environments,
    )

    resources = {"bench": BenchResource(tasks_dir=tasks_dir, artifact_root=artifact_root)}
    for i, task_id in enumerate(task_ids, 1):
        progress(
            f"[{i}/{len(task_ids)}] {task_id}: binding, oracle snapshot, sanitized graph, "
            "environment ..."
        )
        materialize(
            instance,
            [task_bindings, oracle_snapshots, sanitized_graphs, task_environments],
            resources,
            partition_key=task_id,
            tags=tags,
        )


def materialize_inputs(
    instance: dg.DagsterInstance,
    task_ids: list[str],
    *,
    tasks_dir: str,
    artifact_root: str,
    progress: Callable[[str], None],
) -> dict[str, dict[str, dict[str, object]]]:
    """Materialize ``incumbent_skills`` and the input assets of every task, one run each.

    Returns, per task (and ``""`` for the skills), the latest metadata of each asset, with
    ``data_version`` and ``previous_data_version`` (None when it was never materialized) added.
    """
    from bench_assets.defs.inputs import incumbent_skills

    resources = {"bench": BenchResource(tasks_dir=tasks_dir, artifact_root=artifact_root)}
    out: dict[str, dict[str, dict[str, object]]] = {}
    progress("incumbent_skills ...")
    before = latest_metadata(instance, "incumbent_skills", None).get("data_version")
    materialize(instance, [incumbent_skills], resources)
    out[""] = {"incumbent_skills": latest_metadata(instance, "incumbent_skills", None)}
    out[""]["incumbent_skills"]["previous_data_version"] = before

    previous = {a: latest_metadata_by_partition(instance, a, task_ids) for a in INPUT_ASSETS}
    materialize_task_inputs(
        instance, task_ids, tasks_dir=tasks_dir, artifact_root=artifact_root, progress=progress
    )
    now = {a: latest_metadata_by_partition(instance, a, task_ids) for a in INPUT_ASSETS}
    for task_id in task_ids:
        out[task_id] = {k: dict(now[k].get(task_id, {})) for k in INPUT_ASSETS}
        for k in INPUT_ASSETS:
            out[task_id][k]["previous_data_version"] = (
                previous[k].get(task_id, {}).get("data_version")
            )
    return out


def stale_input_tasks(
    instance: dg.DagsterInstance, bench: Benchmark, task_ids: list[str]
) -> dict[str, str]:
    """``{task: why}`` for the tasks of ``task_ids`` whose inputs must be materialized
    (:func:`input_status`); fresh tasks are absent. Builds nothing, writes nothing."""
    return input_status(instance, bench, task_ids)[0]


def input_status(
    instance: dg.DagsterInstance, bench: Benchmark, task_ids: list[str]
) -> tuple[dict[str, str], dict[str, dict[str, dict[str, Any]]]]:
    """(stale tasks and why, the input assets' latest metadata by asset and task).

    :func:`bench_assets.inputs.input_state.stale_reasons` over the input assets' latest
    materializations read in bulk (a few queries per asset, whatever the number of tasks) and
    the source digests of the tasks whose four inputs all exist (a task missing one is stale
    without reading its folder).
    """
    from bench_assets.defs.inputs import CODE_VERSIONS
    from bench_assets.inputs import input_state

    stored = {a: latest_metadata_by_partition(instance, a, task_ids) for a in INPUT_ASSETS}
    complete = [t for t in task_ids if all(t in stored[a] for a in INPUT_ASSETS)]
    stale = input_state.stale_reasons(
        task_ids,
        stored,
        code_versions=CODE_VERSIONS,
        sources=input_state.source_digests(bench, complete),
    )
    return stale, stored


def input_summary(stale: dict[str, str], n_tasks: int) -> str:
    """One progress line: how many tasks' inputs are stale, an example why, the rest reused."""
    line = f"inputs: {len(stale)} of {n_tasks} task(s) stale"
    if stale:
        task = next(iter(stale))
        line += f" (e.g. {task}: {stale[task]})"
    if len(stale) < n_tasks:
        line += f"; {n_tasks - len(stale)} reused without an input run"
    return line


def run_pool_granularity(instance: dg.DagsterInstance) -> bool:
    """Whether the instance's pools apply per run (``concurrency.pools.granularity: run``).

    An ``input_batch`` run holds one ``graph_build`` slot for its batch; its per-task runs then
    claim none. Under ``op`` granularity (Dagster's behaviour when none is configured) each of
    those steps would wait for a second slot of the pool its batch already holds, so the
    generation submits one run per task instead.
    """
    from dagster._core.instance.config import PoolGranularity

    granularity = instance.get_concurrency_config().pool_config.pool_granularity
    return granularity == PoolGranularity.RUN


MAX_BATCH = 25
"""Tasks per ``input_batch`` run at most: a batch pays one run start-up, but its tasks' cells
wait for the whole batch, so batches stay small enough for cells to start early."""


def input_jobs(stale: list[str], *, tags: dict[str, str], batched: bool, slots: int) -> list[Any]:
    """The runs that build ``stale`` tasks' inputs: ``input_batch`` runs of bounded batches
    (:func:`bench_assets.inputs.input_state.batches` over the ``graph_build`` pool's ``slots``), or
    one asset run per task when ``batched`` is false (see :func:`run_pool_granularity`)."""
    from bench_assets.inputs.input_state import batches

    if not batched:
        return [Job(INPUT_ASSETS, t, tags=tags, label=f"inputs {t}") for t in stale]
    groups = batches(stale, slots=slots, max_size=MAX_BATCH)
    return [
        Job(
            (),
            None,
            op_config={build_task_inputs.name: {"tasks": group}},
            tags=tags,
            label=f"inputs batch {i}/{len(groups)} ({group[0]}"
            + (f" .. {group[-1]}, {len(group)} tasks)" if len(group) > 1 else ")"),
            job=INPUT_BATCH_JOB,
        )
        for i, group in enumerate(groups, 1)
    ]


def input_job_tasks(job: Any) -> list[str] | None:
    """The tasks whose inputs a job of :func:`input_jobs` builds; None for any other job."""

    if job.job == INPUT_BATCH_JOB:
        return list(job.op_config[build_task_inputs.name]["tasks"])
    if job.job is None and tuple(job.assets) == INPUT_ASSETS:
        return [str(job.partition)]
    return None


INPUT_BATCH_JOB = "input_batch"
BATCH_TAG = "wfbench/input_batch"
"""Tag of each per-task run an ``input_batch`` run starts: the batch run's id."""


class InputBatchConfig(dg.Config):
    """The tasks one ``input_batch`` run materializes the inputs of, in order."""

    tasks: list[str]


@dg.op(
    pool="graph_build",
    description=(
        "Materialize the input assets (task_bindings, oracle_snapshots, sanitized_graphs, "
        "task_environments) of a batch of tasks whose inputs are stale, one task partition after "
        "another, in this run's process: the batch pays one run start-up, holds one graph_build "
        "slot, and each task partition is still its own materialization (an in-process run "
        "tagged wfbench/input_batch with this run's id), with its own data version and lineage."
    ),
)
def build_task_inputs(
    context: dg.OpExecutionContext, config: InputBatchConfig, bench: BenchResource
) -> None:
    """Materialize every task of the batch; the first failure fails the batch with its error
    (the original wfbench error class, so the generation reports it as the task's own run would).
    """
    tags = {BATCH_TAG: context.run_id}
    generation = context.run.tags.get("wfbench/generation")
    if generation:
        tags["wfbench/generation"] = generation
    try:
        materialize_task_inputs(
            context.instance,
            list(config.tasks),
            tasks_dir=str(bench.load_root()),
            artifact_root=str(bench.artifacts().root),
            progress=context.log.info,
            tags=tags,
        )
    except StepFailed as e:
        cls = e.error_class
        if cls is None:
            raise
        raise cls(e.message) from None


@dg.job(
    name=INPUT_BATCH_JOB,
    description=(
        "A generation's input builds for a batch of tasks (wfbench evolve submits one per batch "
        "of stale tasks; batches run in parallel up to the graph_build pool's limit)."
    ),
)
def input_batch() -> None:
    """One batch of per-task input materializations."""
    build_task_inputs()
