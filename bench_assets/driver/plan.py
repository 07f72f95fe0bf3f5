"""What the next generation is, and what it would run or reuse (no run is launched here).

:func:`choose` (queue proposer) or :func:`propose_candidate` (an agent proposer) names the next
generation and its candidate from the ledger and the recorded decisions; :func:`prior_cells`
reads each cell partition's latest materialization as the planner needs it, and
:func:`plan_task` asks :func:`bench_assets.planner.plan_generation` for one task's cells. Used
by ``wfbench plan`` and by :func:`bench_assets.driver.evolve.evolve`.
"""

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from bench_assets import ledger as ledger_mod
from bench_assets.catalog import Benchmark
from bench_assets.cells import cell_identity, make_adapter
from bench_assets.defs.resources import latest_metadata
from bench_assets.documents import load_cell, load_decision
from bench_assets.driver.instance import decision_records, latest_cells
from bench_assets.generation import next_candidate, next_generation
from bench_assets.planner import PlannedCell, PriorCell, choose_canaries, plan_generation
from bench_assets.store import ArtifactStore


class NothingToEvaluate(Exception):
    """No queued candidate is left to evaluate."""


def history(
    instance: dg.DagsterInstance, artifacts: ArtifactStore
) -> tuple[list[str | None], list[str | None]]:
    """(generation ids, evaluated candidate ids) seen in the ledger and the decisions."""
    gens: list[str | None] = []
    cands: list[str | None] = []
    path = artifacts.ledger()
    if path.exists():
        for entry in ledger_mod.read(path):
            gens.append(entry.generation)
            if entry.decision != "applied":
                cands.append(entry.candidate)
    for md in decision_records(instance):
        if md.get("generation"):
            gens.append(str(md["generation"]))
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
    from bench_assets.catalog import load_benchmark as _load
    from bench_assets.proposer import evidence_bundle, propose
    from bench_assets.redact import from_environment

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
    task: str,
    keys: list[tuple[str, str, int]],
    roles: Mapping[str, str],
) -> dict[tuple[str, str, int], PriorCell | None]:
    """The latest record of each cell, as the planner needs it."""
    out: dict[tuple[str, str, int], PriorCell | None] = {}
    for t, arm, run in keys:
        asset = "candidate_cells" if roles[arm] == "candidate" else "comparator_cells"
        cell = f"{arm}.r{run}"
        pk = str(dg.MultiPartitionKey({"task": t, "cell": cell}))
        md = latest_metadata(instance, asset, pk)
        view = load_cell(t, cell, asset, md) if md else None
        out[(t, arm, run)] = PriorCell.from_view(view) if view else None
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
