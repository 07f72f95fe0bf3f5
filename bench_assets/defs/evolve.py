"""A whole generation against a Dagster instance, in-process (``wfbench evolve``), no daemon.

Order (SPEC §10.2): next generation id and candidate → sync partitions → containment preflight →
``incumbent_skills`` and ``candidate_overlay`` → per task, the input assets in a ``graph_build``
worker pool; as soon as a task's inputs are ready its cells are planned and the ones to pay for
are submitted to an ``agent_sessions`` worker pool, so later tasks' graphs build while earlier
tasks' sessions run → outage breaker over results in submission order → aggregates, decision,
report, ledger → apply (if enabled). No run is launched for a cell that would only be reused:
its previous materialization is the evidence. Every run is tagged ``wfbench/generation``.

Workers are separate processes (``spawn``), each materializing one partition per run against the
same instance, exactly as Dagster's own run launcher would.
"""

import datetime as dt
import multiprocessing
import os
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from bench_assets import ledger as ledger_mod
from bench_assets import sandbox
from bench_assets.catalog import Benchmark, load_benchmark
from bench_assets.cells import cell_identity, make_adapter, remove_stale_work
from bench_assets.defs.instance_ops import (
    StepFailed,
    decision_records,
    latest_cells,
    materialize,
    materialize_decision,
    sync_instance,
)
from bench_assets.defs.lookup import latest_metadata
from bench_assets.errorkinds import ErrorKind
from bench_assets.generation import OutageBreaker, SpendCap, next_candidate, next_generation
from bench_assets.planner import PlannedCell, PriorCell, choose_canaries, plan_generation
from bench_assets.records import load_record
from bench_assets.store import ArtifactStore, default_artifact_root

GEN_TAG = "wfbench/generation"


def quiet_dagster_warnings() -> None:
    """Keep Dagster's beta/preview notices about APIs we chose deliberately off the terminal."""
    import warnings

    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    warnings.filterwarnings("ignore", category=dg.PreviewWarning)


class NothingToEvaluate(Exception):
    """No queued candidate is left to evaluate."""


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


def history(
    instance: dg.DagsterInstance, artifacts: ArtifactStore
) -> tuple[list[str | None], list[str | None]]:
    """(generation ids, evaluated candidate ids) seen in the ledger and the decisions."""
    gens: list[str | None] = []
    cands: list[str | None] = []
    path = artifacts.root / "ledger" / "decisions.jsonl"
    if path.exists():
        for entry in ledger_mod.read(path):
            gens.append(entry.generation)
            if entry.decision != "applied":
                cands.append(entry.candidate)
    for md in decision_records(instance):
        gens.append(str(md.get("generation")))
    return gens, cands


def choose(
    bench: Benchmark, instance: dg.DagsterInstance, artifacts: ArtifactStore
) -> tuple[str, str]:
    """The next generation id and the candidate it evaluates (queue proposer)."""
    gens, evaluated = history(instance, artifacts)
    cand = next_candidate(bench.candidates, evaluated)
    if cand is None:
        raise NothingToEvaluate(
            f"every queued candidate in {bench.root / bench.config.proposer.queue} has been "
            "evaluated; add a new overlay folder there"
        )
    return next_generation(gens), cand


def propose_candidate(
    bench: Benchmark, instance: dg.DagsterInstance, artifacts: ArtifactStore
) -> tuple[str, str, Benchmark]:
    """Run the proposer agent for the next generation; returns (generation, candidate, bench)."""
    import json as _json

    from bench_assets.catalog import load_benchmark as _load
    from bench_assets.proposer import evidence_bundle, propose
    from bench_assets.redact import from_environment

    gens, _ = history(instance, artifacts)
    generation = next_generation(gens)
    previous = decision_records(instance, limit=1)
    body = None
    if previous and Path(str(previous[0].get("decision_path", ""))).is_file():
        body = _json.loads(Path(str(previous[0]["decision_path"])).read_text(encoding="utf-8"))
    cells = [
        {**md, "arm": str(md.get("cell", "")).rsplit(".r", 1)[0]}
        for md in latest_cells(instance, bench.task_ids(), str(bench.root))
    ]
    redactor = from_environment(bench.config.proposer.env)
    cid = propose(bench, artifacts, generation, evidence_bundle(body, cells, redactor), redactor)
    return generation, cid, _load(bench.root)


def prior_cells(
    instance: dg.DagsterInstance,
    task: str,
    keys: list[tuple[str, str, int]],
    roles: Mapping[str, str],
) -> dict[tuple[str, str, int], PriorCell | None]:
    """The latest record of each cell, as the planner needs it."""
    out: dict[tuple[str, str, int], PriorCell | None] = {}
    for t, arm, run in keys:
        asset = "candidate_cells" if roles[arm] == "candidate" else "comparator_cells"
        pk = str(dg.MultiPartitionKey({"task": t, "cell": f"{arm}.r{run}"}))
        md = latest_metadata(instance, asset, pk)
        if not md or not Path(str(md.get("record_path", ""))).is_file():
            out[(t, arm, run)] = None
            continue
        rec = load_record(Path(str(md["record_path"])))
        out[(t, arm, run)] = PriorCell(
            identity=rec.identity,
            identity_digest=str(md["identity_digest"]),
            error_kind=rec.error_kind,
            recorded_at=dt.datetime.fromisoformat(rec.recorded_at),
            generation=rec.generation,
            run_id=str(md.get("run_id") or "") or None,
        )
    return out


def plan_task(
    bench: Benchmark,
    task: str,
    inputs: Any,
    prior: dict[tuple[str, str, int], PriorCell | None],
    generation: str,
    now: dt.datetime,
    arms: list[str] | None = None,
) -> list[PlannedCell]:
    """Plan one task's cells (of ``arms``, default all) from current inputs and prior records."""
    roles = {name: arm.role for name, arm in bench.config.arms.items()}
    current = {}
    for arm in sorted(arms if arms is not None else bench.config.arms):
        adapter = make_adapter(bench, bench.config.arms[arm])
        for run in range(bench.config.runs):
            current[(task, arm, run)] = cell_identity(bench, task, arm, run, inputs, adapter)
    canaries = choose_canaries(
        bench.task_ids(),
        bench.config.comparator_arms(),
        bench.config.runs,
        generation,
        bench.config.reuse.canaries,
    )
    return plan_generation(
        current=current,
        prior=prior,
        roles=roles,  # type: ignore[arg-type]
        canary_cells=canaries,
        max_age_days=bench.config.reuse.max_age_days,
        now=now,
    )


# ---------------------------------------------------------------------------------------------
# worker processes


def _worker_init(dagster_home: str, artifact_root: str) -> None:
    quiet_dagster_warnings()
    os.environ["DAGSTER_HOME"] = dagster_home
    if artifact_root:
        os.environ["WFBENCH_ARTIFACTS"] = artifact_root


def inputs_job(tasks_dir: str, artifact_root: str, task: str, generation: str) -> str:
    """Materialize one task's input assets (runs in a graph_build worker)."""
    from bench_assets.defs.inputs import oracle_snapshots, sanitized_graphs, task_bindings

    materialize(
        dg.DagsterInstance.get(),
        [task_bindings, oracle_snapshots, sanitized_graphs],
        _resources(tasks_dir, artifact_root),
        partition_key=task,
        tags={GEN_TAG: generation},
    )
    return task


def cell_job(
    tasks_dir: str,
    artifact_root: str,
    task: str,
    cell: str,
    candidate: bool,
    force: bool,
    generation: str,
) -> dict[str, Any]:
    """Materialize one cell partition (runs in an agent_sessions worker)."""
    from bench_assets.defs.cells import bench_cell_keys, build_cell_assets

    comparator, cand = bench_cell_keys(tasks_dir)
    comparator_cells, candidate_cells = build_cell_assets(comparator, cand)
    asset = candidate_cells if candidate else comparator_cells
    name = asset.key.to_user_string()
    instance = dg.DagsterInstance.get()
    key = str(dg.MultiPartitionKey({"task": task, "cell": cell}))
    materialize(
        instance,
        [asset],
        _resources(tasks_dir, artifact_root),
        partition_key=key,
        op_config={name: {"force": force, "generation": generation}},
        tags={GEN_TAG: generation},
    )
    return {"task": task, "cell": cell, "asset": name, **latest_metadata(instance, name, key)}


# ---------------------------------------------------------------------------------------------
# the generation


def evolve(
    tasks_dir: str,
    *,
    artifact_root: str = "",
    progress: Callable[[str], None] = lambda m: None,
    instance: dg.DagsterInstance | None = None,
) -> EvolveResult:
    """Run one generation end to end (see module docstring)."""
    from bench_assets.defs.cells import candidate_overlay, load_cell_inputs
    from bench_assets.defs.inputs import incumbent_skills
    from bench_assets.defs.resources import BenchResource

    bench = load_benchmark(Path(tasks_dir))
    tasks_dir = str(bench.root)
    instance = instance or dg.DagsterInstance.get()
    # One explicit artifact root for this process and every worker.
    artifact_root = (
        artifact_root
        or os.environ.get("WFBENCH_ARTIFACTS", "")
        or str(Path(instance.root_directory) / "artifacts")
    )
    artifacts = _artifacts(artifact_root)
    if bench.config.proposer.kind == "queue":
        generation, candidate = choose(bench, instance, artifacts)
    else:
        progress(f"proposer ({bench.config.proposer.kind}) is writing a candidate overlay ...")
        generation, candidate, bench = propose_candidate(bench, instance, artifacts)
    progress(f"generation {generation}: candidate {candidate}")
    sync_instance(instance, bench)
    sandbox.preflight()
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
    limits = bench.config.limits
    ctx = multiprocessing.get_context("spawn")
    home = instance.root_directory
    init = (home, artifact_root)
    breaker = OutageBreaker(limits.outage_streak)
    spend = SpendCap(limits.max_spend_usd)
    submitted: list[tuple[PlannedCell, Future[dict[str, Any]]]] = []
    plan: list[PlannedCell] = []
    judged = 0
    cells: list[dict[str, Any]] = []
    now = dt.datetime.now(dt.UTC)
    bench_res = BenchResource(tasks_dir=tasks_dir, artifact_root=artifact_root)

    def judge(block: bool) -> None:
        nonlocal judged
        while judged < len(submitted) and not (breaker.tripped or spend.tripped):
            pc, fut = submitted[judged]
            if not block and not fut.done():
                return
            try:
                md = fut.result()
            except StepFailed as e:
                md = {
                    "task": pc.task,
                    "cell": pc.cell,
                    "error_kind": "infra-error",
                    "error_detail": str(e),
                }
            kind = md.get("error_kind")
            cells.append(md)
            verdict = "resolved" if md.get("resolved") else str(kind)
            progress(f"  [{judged + 1}/{len(submitted)}] {pc.task} {pc.cell}: {verdict}")
            breaker.observe(None if kind in (None, "-") else ErrorKind(str(kind)))
            spend.observe(pc.cell, _reported_cost(md), _session_budget(bench, pc.arm))
            judged += 1
        if breaker.tripped or spend.tripped:
            for _, fut in submitted[judged:]:
                fut.cancel()

    with (
        ProcessPoolExecutor(
            limits.graph_builds, mp_context=ctx, initializer=_worker_init, initargs=init
        ) as graph_pool,
        ProcessPoolExecutor(
            limits.agent_sessions, mp_context=ctx, initializer=_worker_init, initargs=init
        ) as agent_pool,
    ):
        builds = {
            graph_pool.submit(inputs_job, tasks_dir, artifact_root, t, generation): t
            for t in bench.task_ids()
        }
        for fut in as_completed(builds):
            task = fut.result()
            progress(f"inputs ready: {task}")
            if breaker.tripped or spend.tripped:
                continue
            inputs = load_cell_inputs(instance, bench_res, task, candidate=True)
            keys = [(task, a, r) for a in bench.config.arms for r in range(bench.config.runs)]
            roles = {n: a.role for n, a in bench.config.arms.items()}
            task_plan = plan_task(
                bench, task, inputs, prior_cells(instance, task, keys, roles), generation, now
            )
            plan += task_plan
            for pc in task_plan:
                if pc.action != "run":
                    continue
                submitted.append(
                    (
                        pc,
                        agent_pool.submit(
                            cell_job,
                            tasks_dir,
                            artifact_root,
                            pc.task,
                            pc.cell,
                            pc.role == "candidate",
                            pc.kind == "canary",
                            generation,
                        ),
                    )
                )
            judge(block=False)
        judge(block=True)
    aborted = breaker.tripped or spend.tripped
    stop_reason = spend.reason if spend.tripped else ""
    if breaker.tripped:
        stop_reason = (
            f"outage breaker tripped after {breaker.streak} consecutive systemic failures "
            f"({', '.join(breaker.trip_kinds)})"
        )
    if aborted:
        progress(f"{stop_reason}; no further cells scheduled")
    unusable = ""
    try:
        out = materialize_decision(
            instance,
            bench.task_ids(),
            tasks_dir=tasks_dir,
            artifact_root=artifact_root,
            generation=generation,
            aborted=aborted,
            progress=progress,
        )
    except StepFailed as e:
        if e.cls_name != "IntegrityError":
            raise
        unusable = e.message
        out = {
            "decision": latest_metadata(instance, "promotion_decision", None),
            "report": latest_metadata(instance, "benchmark_report", None),
        }
    decision = str(out["decision"].get("decision"))
    applied = False
    if decision == "promote" and bench.config.apply.on_promote and not aborted and not unusable:
        from bench_assets.defs.instance_ops import apply_latest

        apply_latest(instance, artifact_root, generation)
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


def _reported_cost(md: Mapping[str, Any]) -> float | None:
    """The paid cell's cost from its record (metadata shows "unmeasured" as text); None if none."""
    path = Path(str(md.get("record_path", "")))
    return load_record(path).cost_usd if md.get("record_path") and path.is_file() else None


def _session_budget(bench: Benchmark, arm: str) -> float | None:
    """The arm's per-session budget: what a cell of unknown cost may have spent at most."""
    budget = getattr(bench.config.arms[arm].agent, "max_budget_usd", None)
    return float(budget) if budget is not None else None
