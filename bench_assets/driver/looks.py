"""A generation's sequential looks (``paired`` policy with ``max_looks`` > 1).

After the first pass has paid the planned cells, the gate looks at the evidence before the
decision is made. At a look before the last it may ask for more (``Decision.next_action``):

* ``top_up`` — the evidence is inconclusive: ``top_up_runs`` more candidate runs on every task,
  or on the tasks the gate chose (``Look.top_up_tasks``; ``policy.top_up_share`` below every
  task's worth of cells), new cell partitions ``<arm>.r<k>`` with ``k`` ≥ that task's planned
  runs (visible in the UI, tagged ``wfbench/look``);
* ``repay_comparator`` — the comparator's reused evidence drifted beyond the tolerance: its
  reused cells are re-planned as fresh (kind ``drift``) and its pooled history is set aside (once
  per generation, whatever ``max_looks``: the look that asks cannot promote, so it spends no
  level). With one look and nothing reused or pooled, nothing is looked at before the decision.

Each such look is written as a :class:`~bench_assets.decision.manifest.LookRecord` *before* its
cells are merged into the task manifests and paid, so a killed generation resumes at the same look
with the same cells; the final decision (the ``promotion_decision`` asset) reads the records and is
the next look, with every earlier look's statistics in ``paired_v2.looks`` (a partial top-up's
chosen tasks among them). The errors are spent over the observed information fractions whatever
happens, so stopping early or late never inflates the error rates.
"""

import datetime as dt
from pathlib import Path

from bench_assets import gate as gate_mod
from bench_assets.cells.cellkeys import cell_key, parse_cell_key
from bench_assets.decision.manifest import (
    LookRecord,
    ManifestCell,
    load_looks,
    load_manifest,
    look_history,
    merge_look,
    now_iso,
    write_look,
)
from bench_assets.driver.instance import StepFailed, materialize_aggregates
from bench_assets.driver.paying import CellPayer
from bench_assets.driver.plan import plan_task, prior_cells
from bench_assets.driver.transaction import manifest_cells, require_tasks_unchanged
from bench_assets.generation.planner import PlannedCell
from bench_assets.kernel.errors import IntegrityError
from bench_assets.kernel.store import ArtifactStore


def _top_up(
    payer: CellPayer, cand: str, tasks: list[str], first: dict[str, int], look: int
) -> tuple[list[ManifestCell], list[PlannedCell]]:
    """Plan ``top_up_runs`` more candidate runs on each task of ``first`` it applies to, from
    that task's run ``first[task]`` on (every task, or a partial top-up's chosen ones)."""
    from bench_assets.defs.cells import load_cell_inputs
    from bench_assets.defs.resources import BenchResource

    bench = payer.bench
    step = bench.config.policy.top_up_runs
    roles = {n: a.role for n, a in bench.config.arms.items()}
    res = BenchResource(tasks_dir=str(bench.root), artifact_root=payer.artifact_root)
    now = dt.datetime.now(dt.UTC)
    cells: list[ManifestCell] = []
    planned: list[PlannedCell] = []
    applies = [t for t in tasks if t in first and cand in bench.arms_for(t)]
    keys = [(t, cand, r) for t in applies for r in range(first[t], first[t] + step)]
    prior = prior_cells(payer.instance, None, keys, roles)  # one bulk lookup for every task
    for task in applies:
        inputs = load_cell_inputs(payer.instance, res, task, candidate=True)
        runs = range(first[task], first[task] + step)
        plan = plan_task(
            bench, task, inputs, prior, payer.generation, now, [cand], tasks=tasks, runs=runs
        )
        planned += plan
        cells += [c.model_copy(update={"look": look}) for c in manifest_cells(plan, prior)]
    return cells, planned


def planned_per_task(
    looks: list[LookRecord], tasks: list[str], every: int, step: int
) -> dict[str, int]:
    """Candidate runs planned per task: ``every`` (the first look's runs and the top-ups that
    paid every task) plus ``step`` (the policy's ``top_up_runs``) for each partial top-up that
    chose the task (the gate's choice, recorded in the look's ``statistics.top_up_tasks``)."""
    out = dict.fromkeys(tasks, every)
    for rec in looks:
        chosen = rec.statistics.top_up_tasks
        if rec.action == "top_up" and chosen is not None:
            for t in chosen:
                if t in out:
                    out[t] += step
    return out


def _repay(folder: Path, inc: str, look: int) -> tuple[list[ManifestCell], list[PlannedCell]]:
    """Re-plan every reused cell of the comparator arm ``inc`` as a fresh (``drift``) cell."""
    manifest = load_manifest(folder)
    assert manifest is not None
    cells: list[ManifestCell] = []
    planned: list[PlannedCell] = []
    reason = "comparator drift beyond the tolerance: re-paid fresh"
    for mc in manifest.cells():
        arm, run = parse_cell_key(mc.cell)
        if arm != inc or mc.action != "reuse":
            continue
        cells.append(
            mc.model_copy(
                update={
                    "action": "run",
                    "kind": "drift",
                    "source_run_id": None,
                    "source_data_version": None,
                    "look": look,
                }
            )
        )
        planned.append(
            PlannedCell(
                task=mc.task,
                arm=arm,
                run=run,
                cell=cell_key(arm, run),
                role=mc.role,
                action="run",
                reason=reason,
                kind="drift",
                changed=[],
                prior_generation=None,
                prior_run_id=mc.source_run_id,
                identity_digest=mc.identity_digest,
            )
        )
    return cells, planned


def _may_drift(payer: CellPayer, folder: Path, inc: str) -> bool:
    """The comparator ``inc`` has old evidence whose drift could ask for a re-payment."""
    if payer.bench.config.policy.pooled_history:
        return True
    manifest = load_manifest(folder)
    return manifest is not None and any(
        c.action == "reuse" and parse_cell_key(c.cell)[0] == inc for c in manifest.cells()
    )


def sequential_looks(
    payer: CellPayer,
    artifacts: ArtifactStore,
    *,
    folder: Path,
    tasks: list[str],
    tasks_dir: str,
) -> tuple[list[PlannedCell], bool]:
    """Look, and pay what the gate asks for, until it decides or the last look is next.

    Returns the cells this call planned (a resumed look's cells were planned before) and whether
    the aggregates are current (the last thing done was a look that decided: the decision need
    not aggregate again). Pays a resumed generation's recorded looks first. Returns without
    looking when the payer stopped (breaker or spend cap: the decision is then aborted anyway)
    or the aggregates cannot be built (the decision reports why).
    """
    bench = payer.bench
    policy = bench.config.policy
    if policy.name != "paired":
        return [], False
    cands = bench.config.candidate_arms("implementation")
    if len(cands) != 1:
        return [], False  # the decision refuses this configuration and names it
    cand = cands[0]
    inc = bench.config.arms[cand].pairs_with or ""
    planned_now: list[PlannedCell] = []
    handled = 0
    while True:
        looks = load_looks(folder)
        for rec in looks[handled:]:
            merge_look(folder, rec)
            n = payer.submit_planned(rec.cells)
            payer.tally.more(cells=len(rec.cells), submitted=n)
        handled = len(looks)
        payer.drain()
        seen = look_history(looks, bench.config.runs)
        look = seen.look
        if payer.stopped or (
            look >= policy.max_looks
            and (seen.comparator_repaid or not _may_drift(payer, folder, inc))
        ):
            return planned_now, False
        require_tasks_unchanged(bench.root, folder, payer.ex)
        try:
            materialize_aggregates(
                payer.instance,
                tasks,
                tasks_dir=tasks_dir,
                artifact_root=payer.artifact_root,
                generation=payer.generation,
                progress=payer.progress,
            )
        except StepFailed as e:
            if e.error_class is not IntegrityError:
                raise
            return planned_now, False  # the decision meets the same refusal and records it
        from bench_assets.defs.decision import generation_gate_input

        inp = generation_gate_input(
            payer.instance,
            bench,
            artifacts,
            payer.generation,
            aborted=False,
            now=dt.datetime.now(dt.UTC),
        ).gate_input
        decision = gate_mod.decide(inp)
        stats = decision.paired_v2.looks[-1] if decision.paired_v2 else None
        if decision.next_action == "decide" or stats is None:
            payer.progress(f"look {look}/{policy.max_looks}: the gate can decide")
            return planned_now, True
        runs_now = seen.candidate_runs
        if decision.next_action == "top_up":
            have = planned_per_task(looks, tasks, runs_now, policy.top_up_runs)
            chosen = stats.top_up_tasks
            pay = have if chosen is None else {t: have[t] for t in chosen if t in have}
            cells, planned = _top_up(payer, cand, tasks, pay, len(looks) + 2)
            runs_after = runs_now + policy.top_up_runs if chosen is None else runs_now
            where = "per task" if chosen is None else f"on {len(pay)} of {len(tasks)} tasks"
            what = f"{policy.top_up_runs} more {cand} run(s) {where}"
        else:
            cells, planned = _repay(folder, inc, len(looks) + 2)
            runs_after = runs_now
            what = f"{len(cells)} reused {inc} cell(s) re-paid fresh, pooled history set aside"
        write_look(
            folder,
            LookRecord(
                generation=payer.generation,
                look=len(looks) + 1,
                action=decision.next_action,
                decided_at=now_iso(),
                statistics=stats,
                reasons=decision.reasons,
                candidate_runs=runs_after,
                cells=cells,
            ),
        )
        payer.progress(f"look {look}/{policy.max_looks}: {decision.next_action}: {what}")
        planned_now += planned
