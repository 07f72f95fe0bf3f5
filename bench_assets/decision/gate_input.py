"""The gate's inputs, built from an aggregate set: plain Python over typed documents.

:func:`gate_input` turns the aggregates' evidence rows into the implementation candidate's
:class:`~bench_assets.gate.GateInput` (with the comparator's pooled history and the generation's
earlier sequential looks); :func:`review_gate_inputs` does the same for every review candidate;
:func:`required_reviews` says which review gates an overlay must pass; :func:`applicable_cells`
which planned cells run on a task. The ``promotion_decision`` asset (``defs/decision.py``) and
the driver's sequential looks call them; nothing here reads Dagster.
"""

import datetime as dt
from pathlib import Path

from bench_assets import gate as gate_mod
from bench_assets.decision import aggregate as agg_mod
from bench_assets.decision import manifest as manifest_mod
from bench_assets.gate import review as review_gate
from bench_assets.kernel.errors import InputError
from bench_assets.tasks.catalog import Benchmark


def applicable_cells(
    b: Benchmark, task: str, planned: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The planned cells whose arm runs on ``task`` (review arms on review tasks only)."""
    spec = b.task(task).spec
    out = []
    for asset, cell in planned:
        arm = b.config.arms.get(cell.rsplit(".", 1)[0])
        if arm is None or arm.applies_to(spec):
            out.append((asset, cell))
    return out


def _metric(e: agg_mod.CellEvidence, metric: str) -> float | None:
    value = {
        "cost_usd": e.cost_usd,
        "total_tokens": e.total_tokens,
        "turns": e.turns,
        "duration_s": e.duration_s,
    }[metric]
    return None if value is None else float(value)


def gate_input(
    bench: Benchmark,
    aggs: list[agg_mod.TaskAggregate],
    *,
    aborted: bool,
    now: dt.datetime,
    pooled: list[gate_mod.RunOutcome] | None = None,
    looks: list[manifest_mod.LookRecord] | None = None,
) -> gate_mod.GateInput:
    """The gate's input, built from the aggregates' evidence rows (and, for the ``paired``
    policy, the comparator's pooled history, :mod:`bench_assets.decision.pool`).

    ``looks``: the generation's earlier sequential looks (:class:`~bench_assets.decision.manifest.
    LookRecord`); this is the next one, and the candidate's planned runs include their top-ups.
    ``None`` (a decision outside a generation, which nobody would top up): the last look.
    """
    # Review candidates are decided by their own policy (gate.review); this is the other one.
    candidates = bench.config.candidate_arms("implementation")
    if len(candidates) != 1:
        raise InputError(
            f"{bench.root / 'bench.yaml'}: arms: the decision needs exactly one implementation "
            f"candidate arm, found {len(candidates)}"
        )
    cand = candidates[0]
    inc = bench.config.arms[cand].pairs_with or ""
    outcomes = [
        gate_mod.RunOutcome(
            task=a.task,
            arm=e.arm,
            run=e.run,
            resolved=e.resolved,
            error_kind=e.error_kind,  # type: ignore[arg-type]
            metric=_metric(e, bench.config.policy.metric),
            reused=e.reused,
            generation=e.generation,
            record_id=e.record_id,
            data_version=e.data_version,
            recorded_at=dt.datetime.fromisoformat(e.recorded_at),
            verify_passed_oracle_failed=e.verify_passed_oracle_failed,
        )
        for a in aggs
        for e in a.evidence
        if e.arm in (inc, cand)
    ]
    policy = bench.config.policy
    # Impossible variants are not planned yet: when bench.yaml asks for them, their counts are
    # unknown (the gate answers insufficient_evidence), never 0.
    impossible: dict[str, int | None] = (
        {inc: None, cand: None} if bench.config.integrity.impossible_tasks else {}
    )
    runs = bench.config.runs
    seen = manifest_mod.look_history(looks or [], runs)
    return gate_mod.GateInput(
        policy=bench.config.policy,
        model=bench.config.model,
        incumbent_arm=inc,
        candidate_arm=cand,
        tasks=[a.task for a in aggs if bench.config.arms[cand].applies_to(bench.task(a.task).spec)],
        outcomes=outcomes + (pooled or []),
        aborted=aborted,
        now=now,
        max_age_days=bench.config.reuse.max_age_days,
        planned_runs={inc: runs, cand: seen.candidate_runs},
        look=policy.max_looks if looks is None else min(seen.look, policy.max_looks),
        comparator_repaid=seen.comparator_repaid,
        prior_looks=[lr.statistics for lr in looks or []],
        impossible_resolved=impossible,
    )


def review_gate_inputs(
    bench: Benchmark, aggs: list[agg_mod.TaskAggregate], *, aborted: bool
) -> list[review_gate.ReviewGateInput]:
    """One review-gate input per review candidate arm, from the aggregates' evidence rows."""
    out = []
    for cand in bench.config.candidate_arms("review"):
        arm = bench.config.arms[cand]
        inc = arm.pairs_with or ""
        tasks = [a.task for a in aggs if arm.applies_to(bench.task(a.task).spec)]
        outcomes = [
            review_gate.ReviewOutcome(
                task=a.task,
                arm=e.arm,
                run=e.run,
                error_kind=e.error_kind,  # type: ignore[arg-type]
                score=e.review,
                cost_usd=e.cost_usd,
                record_id=e.record_id,
                data_version=e.data_version,
                recorded_at=dt.datetime.fromisoformat(e.recorded_at),
                reused=e.reused,
                generation=e.generation,
            )
            for a in aggs
            if a.task in tasks
            for e in a.evidence
            if e.arm in (inc, cand)
        ]
        out.append(
            review_gate.ReviewGateInput(
                policy=bench.config.review_policy,
                model=bench.config.model,
                incumbent_arm=inc,
                candidate_arm=cand,
                tasks=tasks,
                outcomes=outcomes,
                aborted=aborted,
            )
        )
    return out


def required_reviews(bench: Benchmark, overlay_files: Path) -> list[str]:
    """Review candidate arms that exercise a skill the overlay changes (their gate must pass)."""
    touched = {
        p.relative_to(overlay_files).parts[0] for p in overlay_files.rglob("*") if p.is_file()
    }
    out = []
    for name in bench.config.candidate_arms("review"):
        arm = bench.config.arms[name]
        skills = {
            getattr(arm.agent, "expected_skill", None),
            *(p.expected_skill for p in arm.phases),
        }
        if touched & {s for s in skills if s}:
            out.append(name)
    return out
