"""A whole generation (``wfbench evolve``, and the weekly job's op), driven through run queue.

Order: next generation id and candidate (:mod:`bench_assets.driver.plan`) → sync partitions →
containment preflight → ``incumbent_skills`` and ``candidate_overlay`` (in process: cheap and
unpartitioned) → which tasks' inputs are stale, in bulk (``stale_input_tasks``: source digests, code
versions, upstream data versions; a task whose inputs are fresh gets no input run and is planned at
once) → the stale tasks' inputs (``task_bindings``, ``oracle_snapshots``, ``sanitized_graphs``,
``task_environments``) in batches, one ``input_batch`` run each (pool ``graph_build``) → as soon as
a task's inputs succeed its cells are planned and one run per cell that must be paid is submitted
(pool ``agent_sessions``), so later tasks' graphs build while earlier tasks' sessions run → the
outage breaker and the spend cap (``limits.max_spend_usd``) watch results as they end and cancel
every queued or running cell when either trips → aggregates, decision, report, ledger (in process) →
apply (if enabled). No run is launched for a cell that would only be reused: its previous
materialization is the evidence. Every run is tagged ``wfbench/generation``.

Runs go through :class:`~bench_assets.driver.runqueue.QueueExecutor` (the instance's run
coordinator and launcher, so the UI shows them live and its pools bound concurrency across every
source), or :class:`~bench_assets.driver.runqueue.InProcessExecutor` for tests and debugging.
"""

import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from bench_assets.agents.preflight import require_live_agents
from bench_assets.cells.pipeline import remove_stale_work
from bench_assets.decision.manifest import (
    Manifest,
    ManifestHeader,
    TaskManifest,
    header_path,
    load_manifest,
    write_header,
    write_task,
)
from bench_assets.decision.manifest import now_iso as manifest_now
from bench_assets.defs.resources import latest_metadata
from bench_assets.driver import services
from bench_assets.driver.inputs import (
    input_job_tasks,
    input_jobs,
    input_summary,
    run_pool_granularity,
    stale_input_tasks,
)
from bench_assets.driver.instance import (
    StepFailed,
    materialize,
    materialize_decision,
    sync_instance,
)
from bench_assets.driver.looks import sequential_looks
from bench_assets.driver.paying import POLL_S, CellPayer
from bench_assets.driver.plan import (  # re-exported for the CLI
    NothingToEvaluate,
    choose,
    generation_tasks,
    history,
    plan_task,
    prior_cells,
    propose_candidate,
)
from bench_assets.driver.runqueue import InProcessExecutor, QueueExecutor
from bench_assets.driver.transaction import (
    GEN_TAG,
    WATCH_EXCLUDE,
    clear_orphans,
    manifest_cells,
    require_tasks_unchanged,
    unfinished,
    verify_stored_inputs,
)
from bench_assets.generation import apply as apply_mod
from bench_assets.generation.planner import PlannedCell
from bench_assets.generation.progress import GenerationTally
from bench_assets.generation.queue import writer_lock
from bench_assets.kernel.errors import InputError, IntegrityError
from bench_assets.kernel.fsutil import atomic_write_json
from bench_assets.kernel.hashing import tree_digest, tree_manifest
from bench_assets.kernel.store import ArtifactStore, default_artifact_root
from bench_assets.sandbox import process as sandbox
from bench_assets.tasks.catalog import Benchmark, load_benchmark

__all__ = [
    "GEN_TAG",
    "EvolveResult",
    "NothingToEvaluate",
    "choose",
    "evolve",
    "history",
    "plan_task",
    "prior_cells",
]


def quiet_dagster_warnings() -> None:
    """Keep Dagster's beta/preview notices about APIs we chose deliberately off the terminal."""
    import warnings

    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    warnings.filterwarnings("ignore", category=dg.PreviewWarning)


@dataclass
class EvolveResult:
    """What a generation did."""

    generation: str
    candidate: str
    decision: str
    paid_cells: int
    reused_cells: int
    aborted: bool
    unusable: str = ""
    report: str = ""
    plan: list[PlannedCell] = field(default_factory=list)
    cells: list[dict[str, Any]] = field(default_factory=list)
    """One summary per paid cell: task, cell, run id, resolved, error kind (null = valid), cost."""
    applied: bool = False
    stop_reason: str = ""
    """Why no further cell was scheduled (outage breaker or spend cap); empty if none."""


def _resources(tasks_dir: str, artifact_root: str) -> dict[str, Any]:
    from bench_assets.defs.resources import BenchResource

    return {"bench": BenchResource(tasks_dir=tasks_dir, artifact_root=artifact_root)}


def _artifacts(artifact_root: str) -> ArtifactStore:
    return ArtifactStore(
        Path(artifact_root).resolve() if artifact_root else default_artifact_root()
    )


def _submit_task(
    payer: CellPayer,
    task: str,
    *,
    folder: Path,
    done_before: Manifest | None,
    tasks: list[str],
) -> tuple[list[PlannedCell], int]:
    """Plan one task (or take its plan from before a resume), record it, submit what is unpaid.

    Returns the planner's verdicts (empty for a task planned before a resume) and how many cell
    runs were submitted.
    """
    from bench_assets.defs.cells import load_cell_inputs
    from bench_assets.defs.resources import BenchResource

    bench, generation = payer.bench, payer.generation
    roles = {n: a.role for n, a in bench.config.arms.items()}
    keys = [(task, a, r) for a in bench.config.arms for r in range(bench.config.runs)]
    task_plan: list[PlannedCell] = []
    if done_before is not None and task in done_before.tasks:
        planned = done_before.tasks[task].cells
        payer.progress(f"{task}: planned before the interruption; paying only what is unpaid")
    else:
        prior = prior_cells(payer.instance, task, keys, roles)
        res = BenchResource(tasks_dir=str(bench.root), artifact_root=payer.artifact_root)
        inputs = load_cell_inputs(payer.instance, res, task, candidate=True)
        task_plan = plan_task(
            bench, task, inputs, prior, generation, dt.datetime.now(dt.UTC), tasks=tasks
        )
        planned = manifest_cells(task_plan, prior)
        write_task(folder, TaskManifest(generation=generation, task=task, cells=planned))
    return task_plan, payer.submit_planned(planned)


def _pay(
    payer: CellPayer, *, folder: Path, tasks: list[str], stale: dict[str, str]
) -> list[PlannedCell]:
    """Build stale inputs, plan and pay every task's cells; returns the plan.

    A task whose inputs are fresh (not in ``stale``, :func:`stale_input_tasks`) is planned at
    once, without an input run; the stale ones are built in batches (:func:`input_jobs`) and
    each is planned as soon as its batch ends.

    The outage breaker and the spend cap observe each finished cell (:class:`CellPayer`); when
    either trips, every queued or running cell is canceled and no task's cells are submitted any
    more.

    A task's manifest is written before any of its cells is submitted; a task that already has
    one (a resumed generation) is not planned again, and a planned cell already paid in this
    generation (verified like the decision verifies it) is not paid again — canaries included.
    """
    bench, ex, tally = payer.bench, payer.ex, payer.tally
    gen_tags = {GEN_TAG: payer.generation}
    plan: list[PlannedCell] = []
    done_before = load_manifest(folder)
    cells_of = {t: bench.config.runs * len(bench.arms_for(t)) for t in tasks}
    tally.start(tasks=len(cells_of), cells=sum(cells_of.values()))
    jobs = input_jobs(
        [t for t in tasks if t in stale],
        tags=gen_tags,
        batched=run_pool_granularity(payer.instance),
        slots=bench.config.limits.graph_builds,
    )
    for job in jobs:
        ex.submit(job)

    def ready(ready_tasks: list[str]) -> None:
        if payer.stopped or not ready_tasks:
            return
        require_tasks_unchanged(bench.root, folder, ex)  # once per set of ready tasks
        for task in ready_tasks:
            task_plan, n = _submit_task(
                payer, task, folder=folder, done_before=done_before, tasks=tasks
            )
            plan.extend(task_plan)
            tally.planned(cells=cells_of[task], submitted=n)

    ready([t for t in tasks if t not in stale])
    while ex.pending():
        for done in ex.poll(POLL_S):
            built = input_job_tasks(done.job)
            if built is None:
                payer.finished(done)
                continue
            if not done.ok:
                ex.cancel_all()
                assert done.failure is not None
                raise done.failure
            payer.progress(f"inputs ready: {', '.join(built)}")
            ready(built)
    return plan


def evolve(
    tasks_dir: str,
    *,
    artifact_root: str = "",
    progress: Callable[[str], None] = lambda m: None,
    instance: dg.DagsterInstance | None = None,
    in_process: bool | None = None,
    workspace: Path | None = None,
    tally: GenerationTally | None = None,
    include_expensive: bool = False,
) -> EvolveResult:
    """Run one generation end to end (see module docstring).

    Args:
        tasks_dir: The benchmark directory.
        artifact_root: The shared artifact root (default ``$WFBENCH_ARTIFACTS`` or
            ``$DAGSTER_HOME/artifacts``).
        progress: Receives one line per step.
        instance: The Dagster instance (default: ``$DAGSTER_HOME``).
        in_process: Materialize inputs and cells in this process, one after another, instead of
            submitting runs to the instance's queue (tests, debugging); ``None`` reads
            ``$WFBENCH_IN_PROCESS`` (``1`` = in process).
        workspace: A workspace file naming the code location runs are submitted to.
        tally: Counts cells (done/total fixed up front), spend and ETA for a live display.
        include_expensive: Plan ``expensive: true`` tasks too (left out by default; a resumed
            generation keeps the selection it was planned with).
    """

    bench = load_benchmark(Path(tasks_dir))
    tasks_dir = str(bench.root)
    instance = instance or dg.DagsterInstance.get()
    # One explicit artifact root for this process and every run.
    artifact_root = (
        artifact_root
        or os.environ.get("WFBENCH_ARTIFACTS", "")
        or str(Path(instance.root_directory) / "artifacts")
    )
    artifacts = _artifacts(artifact_root)
    with writer_lock(artifacts.writer_lock(), "wfbench evolve"):
        return _evolve_locked(
            bench,
            instance,
            artifacts,
            artifact_root=artifact_root,
            progress=progress,
            in_process=in_process,
            workspace=workspace,
            tally=tally or GenerationTally(),
            include_expensive=include_expensive,
        )


def _selection(
    bench: Benchmark,
    resumed_tasks: list[str] | None,
    include_expensive: bool,
    progress: Callable[[str], None],
) -> list[str]:
    """The generation's tasks: :func:`generation_tasks`, or a resumed generation's own choice.

    A generation planned with (or without) its expensive tasks is finished the same way, so a
    weekly tick resuming a generation started with ``--include-expensive`` does not refuse it.
    """
    tasks = generation_tasks(bench, include_expensive=include_expensive)
    if resumed_tasks is not None and resumed_tasks in (
        generation_tasks(bench, include_expensive=True),
        generation_tasks(bench, include_expensive=False),
    ):
        tasks = list(resumed_tasks)
    left_out = sorted(set(bench.task_ids()) - set(tasks))
    if left_out:
        progress(
            f"leaving out expensive task(s) {', '.join(left_out)} "
            "(select them with --include-expensive)"
        )
    return tasks


def _evolve_locked(
    bench: Benchmark,
    instance: dg.DagsterInstance,
    artifacts: ArtifactStore,
    *,
    artifact_root: str,
    progress: Callable[[str], None],
    in_process: bool | None,
    workspace: Path | None,
    tally: GenerationTally,
    include_expensive: bool,
) -> EvolveResult:
    """The generation, under the writer lock: resume an unfinished one, or start the next."""
    from bench_assets.defs.cells import candidate_overlay
    from bench_assets.defs.inputs import incumbent_skills

    tasks_dir = str(bench.root)
    recovered = apply_mod.recover(bench.skills_dir)
    if recovered is not None:
        progress(recovered.message())
    services.end_orphaned(instance.root_directory, progress)
    clear_orphans(instance, progress)
    resumed = unfinished(artifacts)
    if resumed is not None:
        generation, candidate = resumed.generation, resumed.candidate
        progress(f"resuming generation {generation} (candidate {candidate}): it has no decision")
    elif bench.config.proposer.kind == "queue":
        generation, candidate = choose(bench, instance, artifacts)
    else:
        progress(f"proposer ({bench.config.proposer.kind}) is writing a candidate overlay ...")
        generation, candidate, bench = propose_candidate(bench, instance, artifacts)
    progress(f"generation {generation}: candidate {candidate}")
    tasks = _selection(bench, resumed.tasks if resumed else None, include_expensive, progress)
    sync_instance(instance, bench)
    sandbox.preflight()
    # Live agents: the pinned CLI and each arm's session up to system/init, before any payment.
    require_live_agents(bench, candidate=candidate, progress=progress)
    stale = remove_stale_work(artifacts)
    if stale:
        progress(f"removed {stale} worktree(s) left by killed cells")
    resources = _resources(tasks_dir, artifact_root)
    gen_tags = {GEN_TAG: generation}
    materialize(instance, [incumbent_skills], resources, tags=gen_tags)
    materialize(
        instance,
        [candidate_overlay],
        resources,
        op_config={"candidate_overlay": {"candidate": candidate}},
        tags=gen_tags,
    )
    folder = artifacts.generation(generation)
    header = ManifestHeader(
        generation=generation,
        candidate=candidate,
        overlay_digest=str(latest_metadata(instance, "candidate_overlay", None)["digest"]),
        skills_digest=str(latest_metadata(instance, "incumbent_skills", None)["digest"]),
        tasks=tasks,
        tasks_dir=tasks_dir,
        tasks_digest=tree_digest(bench.root, exclude=WATCH_EXCLUDE),
        created_at=manifest_now(),
    )
    if resumed is not None and (
        resumed.overlay_digest != header.overlay_digest
        or resumed.tasks != header.tasks
        or resumed.skills_digest != header.skills_digest
    ):
        raise InputError(
            f"{header_path(folder)}: generation {generation} was planned for other inputs (the "
            "overlay, the incumbent skills or the task list changed since); restore them to "
            "finish it, or remove that folder to abandon the generation"
        )
    if resumed is None:
        atomic_write_json(
            folder / "tasks-files.json", tree_manifest(bench.root, exclude=WATCH_EXCLUDE)
        )
        write_header(folder, header)
    require_tasks_unchanged(bench.root, folder)
    verify_stored_inputs(instance, bench, artifacts, progress, tasks=tasks)
    stale_inputs = stale_input_tasks(instance, bench, tasks)
    progress(input_summary(stale_inputs, len(tasks)))
    if in_process is None:
        in_process = os.environ.get("WFBENCH_IN_PROCESS", "") in ("1", "true", "yes")
    executor: InProcessExecutor | QueueExecutor
    if in_process:
        executor = InProcessExecutor(instance, tasks_dir=tasks_dir, artifact_root=artifact_root)
    else:
        executor = QueueExecutor(
            instance,
            tasks_dir=tasks_dir,
            artifact_root=artifact_root,
            workspace=workspace,
            progress=progress,
        )
    aggregated = False
    with executor as ex:
        payer = CellPayer(ex, bench, instance, generation, artifact_root, progress, tally)
        plan = _pay(payer, folder=folder, tasks=tasks, stale=stale_inputs)
        if not payer.stopped:
            more, aggregated = sequential_looks(
                payer, artifacts, folder=folder, tasks=tasks, tasks_dir=tasks_dir
            )
            plan += more
    cells, stop_reason = payer.cells, payer.stop_reason()
    require_tasks_unchanged(bench.root, folder)
    aborted = bool(stop_reason)
    if aborted:
        progress(f"{stop_reason}; no further cells scheduled")
    unusable = ""
    try:
        out = materialize_decision(
            instance,
            tasks,
            tasks_dir=tasks_dir,
            artifact_root=artifact_root,
            generation=generation,
            aborted=aborted,
            progress=progress,
            aggregate=not aggregated,
        )
    except StepFailed as e:
        if e.error_class is not IntegrityError:
            raise
        unusable = e.message
        out = {
            "decision": latest_metadata(instance, "promotion_decision", None),
            "report": latest_metadata(instance, "benchmark_report", None),
        }
    decision = str(out["decision"].get("decision"))
    applied = False
    if decision == "promote" and bench.config.apply.on_promote and not aborted and not unusable:
        from bench_assets.driver.instance import apply_latest

        apply_latest(artifact_root, generation)
        applied = True
        progress(f"applied candidate {candidate} to {bench.skills_dir}")
    paid = sum(1 for p in plan if p.action == "run")
    return EvolveResult(
        generation=generation,
        candidate=candidate,
        decision=decision,
        paid_cells=paid,
        reused_cells=len(plan) - paid,
        aborted=aborted,
        unusable=unusable,
        report=str(out["report"].get("html_path", "")),
        plan=plan,
        cells=cells,
        applied=applied,
        stop_reason=stop_reason,
    )
