"""What the next generation is, and what it would run or reuse (no run is launched here).

:func:`choose` (queue proposer) or :func:`propose_candidate` (an agent proposer) names the next
generation and its candidate from the ledger and the recorded decisions; :func:`prior_cells`
reads the cell partitions' latest materializations as the planner needs them, and
:func:`plan_task` asks :func:`bench_assets.generation.planner.plan_generation` for one task's cells.
Used by ``wfbench plan`` (:func:`plan_cells`, every task at once) and by
:func:`bench_assets.driver.evolve.evolve`.

Planning costs O(cells) with a small constant: the input identities come from the input assets'
latest materializations (:func:`stored_input_identities`, a few queries per asset; no template or
graph is rebuilt), the cells' latest materializations are fetched in bulk per asset
(:func:`~bench_assets.defs.resources.latest_metadata_by_partition`), each predictions file is
parsed once per process, and canaries (health and gate canaries) are chosen once per
generation.
"""

import datetime as dt
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from bench_assets.cells.pipeline import (
    CellInputs,
    InputIdentity,
    build_cell_inputs,
    cell_identity,
    make_adapter,
)
from bench_assets.decision import ledger as ledger_mod
from bench_assets.decision.documents import load_cell, load_decision
from bench_assets.defs.resources import latest_metadata_by_partition
from bench_assets.driver.inputs import input_status
from bench_assets.driver.instance import decision_records, latest_cells
from bench_assets.generation.planner import (
    PlannedCell,
    PriorCell,
    choose_canaries,
    choose_gate_canaries,
    plan_generation,
)
from bench_assets.generation.queue import next_candidate_requeue, next_generation
from bench_assets.inputs import binding as binding_mod
from bench_assets.inputs import overlay as overlay_mod
from bench_assets.inputs import skills as skills_mod
from bench_assets.inputs.input_state import INPUT_ASSETS
from bench_assets.kernel.errors import WfbenchError
from bench_assets.kernel.store import ArtifactStore
from bench_assets.tasks.catalog import Benchmark

CellKey = tuple[str, str, int]


class NothingToEvaluate(Exception):
    """No queued candidate is left to evaluate."""


def generation_tasks(bench: Benchmark, *, include_expensive: bool = False) -> list[str]:
    """The tasks a generation plans: every task but ``expensive: true`` ones unless selected.

    The one place the selection is made; ``wfbench plan``, ``wfbench evolve`` and the weekly job
    pass its result down (planning, canaries, inputs, progress total, manifest, decision).
    """
    return bench.task_ids(include_expensive=include_expensive)


def history(
    instance: dg.DagsterInstance, artifacts: ArtifactStore
) -> tuple[list[str | None], list[str | None]]:
    """(generation ids, evaluated candidate ids) seen in the ledger and the decisions.

    A candidate is evaluated by a generation's decision; an ad-hoc one (no manifest) does not
    count.
    """
    gens: list[str | None] = []
    cands: list[str | None] = []
    path = artifacts.ledger()
    if path.exists():
        for entry in ledger_mod.read(path):
            gens.append(entry.generation)
            if entry.decision != "applied" and entry.basis == "generation":
                cands.append(entry.candidate)
    for md in decision_records(instance):
        if md.get("generation"):
            gens.append(str(md["generation"]))
    return gens, cands


def outcomes(artifacts: ArtifactStore) -> list[tuple[str | None, str]]:
    """(candidate, decision) of every generation's decision in the ledger, oldest first (an
    ad-hoc decision evaluates no queued candidate)."""
    path = artifacts.ledger()
    if not path.exists():
        return []
    return [
        (e.candidate, e.decision)
        for e in ledger_mod.read(path)
        if e.decision != "applied" and e.basis == "generation"
    ]


def choose(
    bench: Benchmark, instance: dg.DagsterInstance, artifacts: ArtifactStore
) -> tuple[str, str]:
    """The next generation id and the candidate it evaluates (queue proposer)."""
    gens, _ = history(instance, artifacts)
    cand = next_candidate_requeue(
        bench.candidates, outcomes(artifacts), bench.config.policy.requeue_insufficient
    )
    if cand is None:
        raise NothingToEvaluate(
            f"every queued candidate in {bench.root / bench.config.proposer.queue} has been "
            "decided (or stayed insufficient_evidence policy.requeue_insufficient more times); "
            "add a new overlay folder there"
        )
    return next_generation(gens), cand


def propose_candidate(
    bench: Benchmark, instance: dg.DagsterInstance, artifacts: ArtifactStore
) -> tuple[str, str, Benchmark]:
    """Run the proposer agent for the next generation; returns (generation, candidate, bench)."""
    from bench_assets.generation.proposer import evidence_bundle, propose
    from bench_assets.sandbox.redact import from_environment
    from bench_assets.tasks.catalog import load_benchmark as _load

    gens, _ = history(instance, artifacts)
    generation = next_generation(gens)
    previous = decision_records(instance, limit=1)
    body = None
    if previous and Path(str(previous[0].get("decision_path", ""))).is_file():
        body = load_decision(Path(str(previous[0]["decision_path"])))
    cells = latest_cells(instance, bench.task_ids(), str(bench.root))
    redactor = from_environment(bench.config.proposer.env)
    cid = propose(bench, artifacts, generation, evidence_bundle(body, cells, redactor), redactor)
    return generation, cid, _load(bench.root)


def prior_cells(
    instance: dg.DagsterInstance,
    task: str | None,
    keys: list[CellKey],
    roles: Mapping[str, str],
) -> dict[CellKey, PriorCell | None]:
    """The latest record of each cell (keys may span tasks), as the planner needs it.

    One bulk lookup per cell asset (:func:`latest_metadata_by_partition`), not one query per
    cell. ``task`` is not used (kept for callers that plan one task at a time).
    """
    by_asset: dict[str, dict[str, tuple[CellKey, str]]] = {}
    for t, arm, run in keys:
        asset = "candidate_cells" if roles[arm] == "candidate" else "comparator_cells"
        cell = f"{arm}.r{run}"
        pk = str(dg.MultiPartitionKey({"task": t, "cell": cell}))
        by_asset.setdefault(asset, {})[pk] = ((t, arm, run), cell)
    out: dict[CellKey, PriorCell | None] = {}
    for asset, wanted in by_asset.items():
        found = latest_metadata_by_partition(instance, asset, wanted)
        for pk, (key, cell) in wanted.items():
            md = found.get(pk)
            view = load_cell(key[0], cell, asset, md) if md else None
            out[key] = PriorCell.from_view(view) if view else None
    return out


_canary_memo: list[Any] = []


def gated_comparator_arms(bench: Benchmark) -> list[str]:
    """The comparator arms some candidate arm is judged against (their ``pairs_with``), sorted."""
    arms = bench.config.arms
    return sorted({arms[c].pairs_with or "" for c in bench.config.candidate_arms()} - {""})


def _canaries(
    bench: Benchmark, generation: str, tasks: list[str]
) -> tuple[frozenset[CellKey], frozenset[CellKey]]:
    """(health canaries, gate canaries) of the generation, chosen once over its ``tasks``.

    Memoized per benchmark: :func:`plan_task` is called once per task; choosing over all N tasks
    on each call made a generation's planning quadratic.
    """
    key = (generation, tuple(tasks))
    if _canary_memo and _canary_memo[0] is bench and _canary_memo[1] == key:
        return _canary_memo[2], _canary_memo[3]
    reuse = bench.config.reuse
    applies = {t: bench.arms_for(t) for t in tasks}
    gated = gated_comparator_arms(bench) if reuse.gate_canaries_per_task else []
    health = choose_canaries(
        tasks,
        [a for a in bench.config.comparator_arms() if a not in gated],
        bench.config.runs,
        generation,
        reuse.canaries,
        applies,
    )
    gate = choose_gate_canaries(
        applies, gated, bench.config.runs, generation, reuse.gate_canaries_per_task
    )
    _canary_memo[:] = [bench, key, frozenset(health), frozenset(gate)]
    return frozenset(health), frozenset(gate)


def generation_canaries(bench: Benchmark, generation: str, tasks: list[str]) -> set[CellKey]:
    """Every canary cell of the generation over its ``tasks``: ``reuse.gate_canaries_per_task``
    per task of each gated comparator arm (:func:`gated_comparator_arms`) and ``reuse.canaries``
    per other comparator arm (per every comparator arm when gate canaries are off)."""
    health, gate = _canaries(bench, generation, tasks)
    return set(health | gate)


def plan_task(
    bench: Benchmark,
    task: str,
    inputs: CellInputs | InputIdentity,
    prior: dict[CellKey, PriorCell | None],
    generation: str,
    now: dt.datetime,
    arms: list[str] | None = None,
    *,
    tasks: list[str] | None = None,
    runs: range | None = None,
) -> list[PlannedCell]:
    """Plan one task's cells (of ``arms``, default all) from current inputs and prior records.

    ``tasks`` is the generation's task selection (canaries are chosen over it); default
    :func:`generation_tasks`. ``runs``: the run indexes to plan (default ``range(runs)``; a
    sequential look plans the candidate's top-up runs beyond it).
    """
    selection = tasks if tasks is not None else generation_tasks(bench)
    return _plan(bench, {task: inputs}, prior, generation, now, arms, selection, runs)


def _plan(
    bench: Benchmark,
    inputs: Mapping[str, CellInputs | InputIdentity | None],
    prior: Mapping[CellKey, PriorCell | None],
    generation: str,
    now: dt.datetime,
    arms: list[str] | None,
    tasks: list[str],
    runs: range | None = None,
) -> list[PlannedCell]:
    roles = {name: arm.role for name, arm in bench.config.arms.items()}
    chosen = sorted(arms if arms is not None else bench.config.arms)
    adapters = {arm: make_adapter(bench, bench.config.arms[arm]) for arm in chosen}
    current: dict[CellKey, dict[str, Any] | None] = {}
    for task, task_inputs in inputs.items():
        applies = bench.arms_for(task)  # review arms on review tasks only, the others never there
        for arm in chosen:
            if arm not in applies:
                continue
            for run in runs if runs is not None else range(bench.config.runs):
                current[(task, arm, run)] = (
                    None
                    if task_inputs is None
                    else cell_identity(bench, task, arm, run, task_inputs, adapters[arm])
                )
    health, gate = _canaries(bench, generation, tasks)
    return plan_generation(
        current=current,
        prior=prior,
        roles=roles,  # type: ignore[arg-type]
        canary_cells=health,
        gate_canary_cells=gate,
        max_age_days=bench.config.reuse.max_age_days,
        now=now,
    )


def stored_input_identities(
    instance: dg.DagsterInstance,
    bench: Benchmark,
    task_ids: list[str],
    *,
    candidate: str | None,
) -> tuple[dict[str, InputIdentity], dict[str, str]]:
    """Each task's input identity from its input assets' latest materializations, in bulk.

    Reads the metadata of the four input assets for every task (a few queries per asset) and
    each fresh task's binding record (one small file); the incumbent skills and the candidate
    overlay are digested from their folders, as the generation would snapshot them. Nothing is
    built and nothing is written.

    Returns the identities and, for each task whose stored inputs cannot stand for it now, why:
    the generation's own rule (:func:`bench_assets.driver.inputs.input_status`: never
    materialized, a changed task folder, pinned ref or input setting, a new code version, out of
    step with an upstream input, a stored artifact gone).
    """
    unusable, stored = input_status(instance, bench, task_ids)
    skills = skills_mod.describe(bench.skills_dir)
    overlay_digest = None
    if candidate is not None:
        cand = bench.candidates.get(candidate)
        if cand is None:
            known = ", ".join(sorted(bench.candidates)) or "none"
            raise WfbenchError(f"unknown candidate {candidate!r} (queued: {known})")
        overlay_digest = overlay_mod.describe(cand, bench.skills_dir, skills.digest).digest
    out: dict[str, InputIdentity] = {}
    for task in task_ids:
        if task in unusable:
            continue
        b_md, o_md, g_md, e_md = (stored[a][task] for a in INPUT_ASSETS)
        try:
            bound = binding_mod.load(Path(str(b_md["record_path"])))
        except (OSError, ValueError):
            unusable[task] = "binding record unreadable"
            continue
        has_env = bench.task(task).spec.environment is not None
        out[task] = InputIdentity(
            binding=bound,
            oracle_digest=str(o_md["digest"]),
            graph_digest=str(g_md["graph_digest"]),
            sanitized_sha=str(g_md["sanitized_sha"]),
            skills_digest=skills.digest,
            overlay_digest=overlay_digest,
            environment_digest=str(e_md["digest"]) if has_env and e_md.get("digest") else None,
        )
    return out, unusable


def plan_cells(
    bench: Benchmark,
    instance: dg.DagsterInstance,
    artifacts: ArtifactStore,
    *,
    generation: str,
    candidate: str | None,
    arms: list[str],
    now: dt.datetime,
    progress: Callable[[str], None] = lambda m: None,
    tasks: list[str] | None = None,
) -> list[PlannedCell]:
    """Plan the cells of ``arms`` of every selected task at once, as the generation would
    (``wfbench plan``); ``tasks`` is the selection, default :func:`generation_tasks`.

    Input identities come from the stored input assets (:func:`stored_input_identities`). A
    task whose stored inputs cannot stand for it now is built directly
    (:func:`~bench_assets.cells.pipeline.build_cell_inputs`, the only case that runs git), and said
    so — but only when one of its cells has a record whose identity must be compared: a cell that
    never ran is ``missing`` (or ``candidate``) whatever its identity, so a fresh suite is
    planned without building anything.
    """
    task_ids = tasks if tasks is not None else generation_tasks(bench)
    roles = {n: a.role for n, a in bench.config.arms.items()}
    keys = [(t, a, r) for t in task_ids for a in arms for r in range(bench.config.runs)]
    prior = prior_cells(instance, None, keys, roles)
    recorded = {k[0] for k, p in prior.items() if p is not None}
    identities: dict[str, CellInputs | InputIdentity | None] = {}
    stored, unusable = stored_input_identities(instance, bench, task_ids, candidate=candidate)
    identities.update(stored)
    unbuilt = 0
    for task, why in sorted(unusable.items()):
        if task not in recorded:
            identities[task] = None
            unbuilt += 1
            continue
        progress(f"{task}: {why}; building its inputs directly (`wfbench inputs` stores them)")
        identities[task] = build_cell_inputs(bench, task, artifacts, candidate=candidate)
    if unbuilt:
        progress(
            f"{unbuilt} task(s) without usable stored inputs and without any cell record: "
            "their cells run whatever their identity (no inputs built to plan them)"
        )
    ordered = {t: identities[t] for t in task_ids}
    return _plan(bench, ordered, prior, generation, now, arms, task_ids)


def power_lines(bench: Benchmark, cells_plan: list[PlannedCell], tasks: list[str]) -> list[str]:
    """What the suite can promise before any cell is paid (issue 23): gate v3's power report
    for the implementation candidate arm, from this plan's comparator cells per task (paid
    fresh or reused) and, where cells are reused, the full pooled history
    (``policy.max_pooled_runs``; right after a promotion nothing is reused or pooled)."""
    from bench_assets.decision.power import power_report, report_lines

    policy = bench.config.policy
    cands = bench.config.candidate_arms("implementation")
    if policy.name != "paired" or len(cands) != 1:
        return []
    inc = bench.config.arms[cands[0]].pairs_with or ""
    applies = [t for t in tasks if cands[0] in bench.arms_for(t)]
    if not applies:
        return []
    fresh = sum(c.arm == inc and c.action == "run" for c in cells_plan if c.task in applies)
    reused = sum(c.arm == inc and c.action == "reuse" for c in cells_plan if c.task in applies)
    n = len(applies)
    pooled = policy.max_pooled_runs * n if reused and policy.pooled_history else 0
    report = power_report(
        policy,
        n,
        bench.config.runs,
        fresh / n,
        (reused + pooled) / n,
        comparator_reused_per_task=reused / n,
    )
    return report_lines(report)
