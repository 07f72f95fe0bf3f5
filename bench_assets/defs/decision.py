"""Decision assets: ``aggregates`` (per task), ``promotion_decision`` and ``benchmark_report``.

Lineage is kept in our own metadata, not only in Dagster's edges: Dagster stops tracking
staleness on an edge with 100 or more upstream partitions, so the decision lists every cell it
used (partition, run id, data version, generation, reused or not and from which run).

``aggregates`` is one materialization per evidence set (every task's aggregate in one
:class:`~bench_assets.decision.documents.AggregateSet`), read from the cells in bulk: one partition
per task cost a 1,000-task decision about a minute in Dagster's per-partition events.

Why one file over 500 lines: the three decision assets and the instance reads they share; the
``promotion_decision`` step alone is about 140 lines, because the decision document, the exact
gate input, the ledger entry and the metadata are written by it in one order. The pure builders of
the gate's inputs are :mod:`bench_assets.decision.gate_input`.
"""

import datetime as dt
from pathlib import Path
from typing import Any, NamedTuple

import dagster as dg

from bench_assets import gate as gate_mod
from bench_assets.decision import aggregate as agg_mod
from bench_assets.decision import ledger as ledger_mod
from bench_assets.decision import manifest as manifest_mod
from bench_assets.decision import pool as pool_mod
from bench_assets.decision import report as report_mod
from bench_assets.decision.documents import (
    AGGREGATE_SET_SCHEMA,
    AggregateSet,
    CellLineage,
    DecisionDocument,
    RefusedCell,
    load_aggregate_set,
    load_cell,
    load_decision,
    remember_aggregate_set,
    remember_decision,
)
from bench_assets.decision.explain import integrity_lines, v2_lines
from bench_assets.decision.gate_input import (
    applicable_cells,
    gate_input,
    required_reviews,
    review_gate_inputs,
)
from bench_assets.decision.ledger import DecisionKind
from bench_assets.defs.cells import bench_cell_keys, candidate_overlay
from bench_assets.defs.evidence import (
    collect_current_inputs,
    collect_manifest_inputs,
    verify_evidence,
)
from bench_assets.defs.inputs import incumbent_skills
from bench_assets.defs.partitions import TASKS_PARTITIONS_NAME
from bench_assets.defs.resources import (
    BenchResource,
    latest_metadata,
    latest_metadata_by_partition,
    partition_materializations_by_partition,
    upstream_metadata,
)
from bench_assets.exports.plugin_eval import report_section as skill_eval_section
from bench_assets.gate import review as review_gate
from bench_assets.generation import apply as apply_mod
from bench_assets.kernel.errors import InputError, IntegrityError
from bench_assets.kernel.fsutil import atomic_write_canonical, atomic_write_json, atomic_write_text
from bench_assets.kernel.gcpause import gc_paused
from bench_assets.kernel.hashing import canonical_and_digest, sha256_json, short
from bench_assets.kernel.store import ArtifactStore
from bench_assets.tasks.catalog import Benchmark

GROUP = "decision"
OWNERS = ["team:wfbench"]
AGGREGATES_CODE_VERSION = "aggregates-v2"
DECISION_CODE_VERSION = "decision-v1"
REPORT_CODE_VERSION = "report-v1"
CELL_ASSETS = ("comparator_cells", "candidate_cells")
GENERATION_TAG = "wfbench/generation"
SET_SCHEMA_KEY = "aggregate_set_schema"
"""Aggregates metadata: the schema of the aggregate set at ``record_path`` (an aggregates
materialization without it is an earlier per-task one, which the decision does not read)."""


class DecisionConfig(dg.Config):
    """Run config of the decision."""

    generation: str = ""
    """Generation id (e.g. g0007); empty for a decision made outside a generation."""
    aborted: bool = False
    """Set by the generation driver when the outage breaker tripped: never promotes."""


def _power_metadata(decision: gate_mod.Decision) -> dg.MetadataValue | None:
    """What this suite can promise (gate v3's power report, bench_assets/decision/power.py)."""
    from bench_assets.decision.power import decision_report, report_lines

    r = decision_report(decision)
    return None if r is None else dg.MetadataValue.md("\n".join(f"- {s}" for s in report_lines(r)))


def planned_cells(tasks_dir: str) -> list[tuple[str, str]]:
    """(asset, cell key) of every planned cell per task, from bench.yaml."""
    comparator, candidate = bench_cell_keys(tasks_dir)
    return [("comparator_cells", c) for c in comparator] + [
        ("candidate_cells", c) for c in candidate
    ]


@dg.asset(
    deps=list(CELL_ASSETS),
    group_name=GROUP,
    owners=OWNERS,
    kinds={"python"},
    code_version=AGGREGATES_CODE_VERSION,
    check_specs=[
        dg.AssetCheckSpec(
            "aggregates_complete",
            asset="aggregates",
            blocking=True,
            description="Fails when any planned cell of any task has no acceptable record.",
        )
    ],
    description=(
        "Every decided task's aggregate, in one materialization: per task and arm resolved/valid "
        "runs, pass@1, pass^k, medians of cost (null if any valid run is unmeasured), tokens, "
        "turns, duration and churn, exclusions by kind, verify-passed-but-oracle-failed and "
        "grader-tampered counts, fresh vs reused cells and where reused evidence came from, and "
        "measurement health; the planned cells refused as evidence, with the reason. Blocking "
        "check: every planned cell present."
    ),
)
@gc_paused()
def aggregates(context: dg.AssetExecutionContext, bench: BenchResource) -> dg.MaterializeResult:  # type: ignore[type-arg]
    """Aggregate every task a decision rests on, from bulk reads, into one aggregate set.

    The tasks are the generation's (its manifest's; the run's ``wfbench/generation`` tag) or,
    ad hoc, every task partition. One materialization, not one per task: a 1,000-task ranged
    run cost about a minute in Dagster's per-partition events alone. Which cells each task's
    aggregate rests on, and why any planned cell is refused, is in the set and its metadata;
    the decision lists every evidence cell's lineage.
    """
    generation = context.run.tags.get(GENERATION_TAG) or None
    aset = compute_aggregate_set(context.instance, bench, generation)
    if aset.refused:  # one log event: each is a write to the event log (1,000 cost seconds)
        lines = [f"{r.task} {r.cell}: {r.reason}" for r in aset.refused[:MAX_LOGGED]]
        more = len(aset.refused) - len(lines)
        context.log.warning(
            f"{len(aset.refused)} planned cell(s) have no acceptable evidence:\n"
            + "\n".join(lines)
            + (f"\n... and {more} more (see record_path)" if more else "")
        )
    text, digest = canonical_and_digest(aset.model_dump(mode="json"))
    path = atomic_write_canonical(bench.artifacts().aggregate_set(digest), text)
    remember_aggregate_set(path, aset)
    incomplete = {a.task: a.missing_cells for a in aset.tasks if a.missing_cells}
    listed = "; ".join(f"{t}: {', '.join(cells)}" for t, cells in sorted(incomplete.items()))
    refused_md = "\n".join(f"- {r.task} {r.cell}: {r.reason}" for r in aset.refused[:MAX_LISTED])
    if len(aset.refused) > MAX_LISTED:
        refused_md += f"\n- ... and {len(aset.refused) - MAX_LISTED} more (see record_path)"
    metadata: dict[str, Any] = {
        SET_SCHEMA_KEY: AGGREGATE_SET_SCHEMA,
        "table": dg.MetadataValue.md(report_mod.aggregate_set_markdown(aset.tasks, MAX_LISTED)),
        "tasks": len(aset.tasks),
        "incomplete_tasks": len(incomplete),
        "missing_cells": listed[:20000] or None,
        "refused_count": len(aset.refused),
        "refused_evidence": dg.MetadataValue.md(refused_md) if aset.refused else None,
        "evidence_set": "generation manifest"
        if aset.kind == "generation"
        else "latest records, verified against the arms' identity now",
        "generation": aset.generation,
        "cells": sum(len(a.evidence) for a in aset.tasks),
        "record_path": dg.MetadataValue.path(str(path)),
        "digest": digest,
    }
    return dg.MaterializeResult(
        data_version=dg.DataVersion(digest),
        metadata=metadata,
        check_results=[
            dg.AssetCheckResult(
                check_name="aggregates_complete",
                passed=not incomplete,
                metadata={
                    "tasks": len(aset.tasks),
                    "incomplete_tasks": len(incomplete),
                    "missing": listed[:20000] or None,
                    "planned": sum(len(a.planned_cells) for a in aset.tasks),
                },
            )
        ],
    )


MAX_LOGGED = 200
"""Refused cells written to the run's log (all of them are in the aggregate set)."""
MAX_LISTED = 200
"""Tasks (and refused cells) listed in the UI's markdown (all of them are in the set)."""


def compute_aggregate_set(
    instance: dg.DagsterInstance, bench: BenchResource, generation: str | None
) -> AggregateSet:
    """Every decided task's aggregate and the refused planned cells (plain reads, no events).

    With the generation's manifest: exactly its planned cells, each verified
    (:func:`collect_manifest_inputs`, one bulk lookup per cell asset). Without one (ad hoc): the
    latest records, each verified against the identity its arm has now, exactly as a generation
    verifies its evidence (never "latest record wins").
    """
    artifacts = bench.artifacts()
    tasks = decided_tasks(instance, artifacts, generation)
    manifest = manifest_mod.load_complete(artifacts.generation(generation)) if generation else None
    if manifest is not None:
        planned: dict[str, list[tuple[str, str]]] = {
            t: [(c.asset, c.cell) for c in manifest.tasks[t].cells] for t in tasks
        }
        inputs, refused = collect_manifest_inputs(instance, [manifest.tasks[t] for t in tasks])
    else:
        b = bench.load(tasks)
        planned_default = planned_cells(bench.tasks_dir)
        planned = {t: applicable_cells(b, t, planned_default) for t in tasks}
        inputs, refused = collect_current_inputs(instance, bench, b, planned, generation)
    return AggregateSet(
        generation=generation,
        kind="generation" if manifest is not None else "ad_hoc",
        tasks=[agg_mod.aggregate_task(t, [c for _, c in planned[t]], inputs[t]) for t in tasks],
        refused=[
            RefusedCell(task=t, cell=c, reason=why)
            for t in tasks
            for c, why in sorted(refused[t].items())
        ],
    )


def decided_tasks(
    instance: dg.DagsterInstance, artifacts: ArtifactStore, generation: str | None
) -> list[str]:
    """The tasks a decision rests on: those its generation's manifest planned, or every task
    partition for a decision without one (an ad-hoc materialization)."""
    planned = manifest_mod.planned_tasks(artifacts.generation(generation)) if generation else None
    if planned is not None:
        return planned
    return sorted(instance.get_dynamic_partitions(TASKS_PARTITIONS_NAME))


def _load_aggregates(
    instance: dg.DagsterInstance, task_ids: list[str]
) -> list[agg_mod.TaskAggregate]:
    return _aggregates_and_refused(instance, task_ids)[0]


def _aggregates_and_refused(
    instance: dg.DagsterInstance, task_ids: list[str]
) -> tuple[list[agg_mod.TaskAggregate], list[RefusedCell]]:
    """Each task's aggregate from the latest aggregate set, and the planned cells it refused."""
    md = latest_metadata(instance, "aggregates", None)
    if not md:
        raise InputError("aggregates has never been materialized; materialize it first")
    if md.get(SET_SCHEMA_KEY) != AGGREGATE_SET_SCHEMA:
        raise InputError(
            "aggregates was last materialized per task by an earlier wfbench; materialize "
            "aggregates again"
        )
    aset = load_aggregate_set(Path(str(md["record_path"])))
    by_task = {a.task: a for a in aset.tasks}
    absent = [t for t in task_ids if t not in by_task]
    if absent:
        raise InputError(
            f"the latest aggregates ({md['record_path']}) have no aggregate of task(s) "
            f"{', '.join(absent[:5])}; materialize aggregates again"
        )
    wanted = set(task_ids)
    return [by_task[t] for t in task_ids], [r for r in aset.refused if r.task in wanted]


class GateEvidence(NamedTuple):
    """What a look or a decision rests on (:func:`generation_gate_input`)."""

    gate_input: gate_mod.GateInput
    aggregates: list[agg_mod.TaskAggregate]
    """Each task's aggregate, keeping only the evidence rows that verified."""
    kind: DecisionKind
    """``generation``: a manifest's cells; ``ad_hoc``: the latest records (no manifest)."""
    refused: list[RefusedCell]
    """The planned cells that are not evidence, each with the reason."""


def generation_gate_input(
    instance: dg.DagsterInstance,
    b: Benchmark,
    artifacts: ArtifactStore,
    generation: str | None,
    *,
    aborted: bool,
    now: dt.datetime,
) -> GateEvidence:
    """The gate input of a generation's next look (or of an ad-hoc decision), its aggregates,
    what kind of evidence it is and the cells refused as evidence.

    The decision asset and the generation driver's sequential looks both build it here, so an
    interim look and the final decision read the same evidence the same way. Every evidence row
    is verified again (:func:`verify_evidence`).
    """
    task_ids = decided_tasks(instance, artifacts, generation)
    manifest = manifest_mod.load_complete(artifacts.generation(generation)) if generation else None
    loaded, refused = _aggregates_and_refused(instance, task_ids)
    aggs, stale = verify_evidence(instance, b, artifacts, loaded, manifest)
    looks = manifest_mod.load_looks(artifacts.generation(generation)) if generation else None
    pooled = None
    policy = b.config.policy
    repaid = manifest_mod.look_history(looks or [], b.config.runs).comparator_repaid
    if policy.name == "paired" and policy.pooled_history and not repaid:
        pooled = _pooled_history(instance, b, aggs, now)
    inp = gate_input(b, aggs, aborted=aborted, now=now, pooled=pooled, looks=looks)
    return GateEvidence(
        gate_input=inp,
        aggregates=aggs,
        kind="generation" if manifest is not None else "ad_hoc",
        refused=sorted(refused + stale, key=lambda r: (r.task, r.cell)),
    )


def _pooled_history(
    instance: dg.DagsterInstance,
    bench: Benchmark,
    aggs: list[agg_mod.TaskAggregate],
    now: dt.datetime,
) -> list[gate_mod.RunOutcome]:
    """Earlier records of the comparator's cells, as
    :func:`bench_assets.decision.pool.pooled_outcomes` reads them (all comparator cells' histories
    in one bulk lookup)."""
    cand = bench.config.candidate_arms("implementation")
    inc = bench.config.arms[cand[0]].pairs_with if len(cand) == 1 else None
    if not inc:
        return []
    keys = {
        str(dg.MultiPartitionKey({"task": t, "cell": c})): (t, c)
        for t, c in pool_mod.history_cells(aggs, inc)
    }
    # Only what can still be pooled: a record is materialized after it is recorded, so nothing
    # stored before the age limit (a day's slack for clocks) holds a record young enough; a
    # year of weekly generations is no longer read to pool the last 90 days.
    max_age = dt.timedelta(days=bench.config.reuse.max_age_days + 1)
    found = partition_materializations_by_partition(
        instance, "comparator_cells", keys, limit=50, after_timestamp=(now - max_age).timestamp()
    )
    history: dict[tuple[str, str], list[Any]] = {}
    for key, mds in found.items():
        task, cell = keys[key]
        views = (
            load_cell(task, cell, "comparator_cells", md) for md in mds if md.get("record_path")
        )
        history[task, cell] = [v for v in views if v is not None]
    return pool_mod.pooled_outcomes(
        aggs,
        inc,
        metric=bench.config.policy.metric,
        now=now,
        max_age_days=bench.config.reuse.max_age_days,
        history=history,
    )


@dg.asset(
    deps=[aggregates, candidate_overlay, incumbent_skills],
    group_name=GROUP,
    owners=OWNERS,
    kinds={"python"},
    code_version=DECISION_CODE_VERSION,
    description=(
        "The preregistered promotion gate's verdict for this generation's candidate: promote, "
        "keep_incumbent or insufficient_evidence, with the policy, every per-task number and "
        "reason, and the evidence cells it rests on (partition, run id, data version, generation, "
        "reused from which run). Appended to the tamper-evident decision ledger."
    ),
)
@gc_paused()
def promotion_decision(
    context: dg.AssetExecutionContext, config: DecisionConfig, bench: BenchResource
) -> dg.MaterializeResult:  # type: ignore[type-arg]
    """Decide on the candidate from the aggregate of every task the generation planned."""
    b = bench.load()
    artifacts = bench.artifacts()
    inp, aggs, kind, refused = generation_gate_input(
        context.instance,
        b,
        artifacts,
        config.generation or None,
        aborted=config.aborted,
        now=dt.datetime.now(dt.UTC),
    )
    decision = gate_mod.decide(inp)
    overlay_md = upstream_metadata(context.instance, candidate_overlay.key, None)
    skills_md = upstream_metadata(context.instance, incumbent_skills.key, None)
    overlay_files = Path(str(overlay_md["record_path"])) / "files"
    review_inputs = review_gate_inputs(b, aggs, aborted=config.aborted)
    review_decisions = [review_gate.decide_review(ri) for ri in review_inputs]
    evidence = {(a.task, e.cell): e for a in aggs for e in a.evidence}
    doc = DecisionDocument(
        kind=kind,
        generation=config.generation or None,
        candidate=str(overlay_md["candidate"]),
        overlay_digest=str(overlay_md["digest"]),
        incumbent_skills_digest=str(skills_md["digest"]),
        overlay_files=str(overlay_files),
        skills_dir=str(b.skills_dir),
        target_base_digests=apply_mod.plan_application(b.skills_dir, overlay_files),
        decision=decision,
        lineage=[
            CellLineage(
                task=task,
                cell=e.cell,
                run_id=e.run_id,
                data_version=e.data_version,
                generation=e.generation,
                reused=e.reused,
                source_run_id=e.source_run_id,
            )
            for (task, _), e in sorted(evidence.items())
        ],
        review_decisions=review_decisions,
        review_required=required_reviews(b, overlay_files),
        refused=refused,
    )
    body = doc.model_dump(mode="json")
    text, digest = canonical_and_digest(body)
    folder = artifacts.decision(digest)
    atomic_write_json(folder / "gate-input.json", inp.model_dump(mode="json"), compact=True)
    for ri in review_inputs:
        atomic_write_json(
            folder / f"review-gate-input.{ri.candidate_arm}.json",
            ri.model_dump(mode="json"),
            compact=True,
        )
    decision_path = atomic_write_canonical(folder / "decision.json", text)
    remember_decision(decision_path, doc)
    entry = ledger_mod.append(
        artifacts.ledger(),
        decision=doc.verdict,
        decision_json=body,
        generation=doc.generation,
        candidate=doc.candidate,
        kind=kind,
        payload={"decision_path": str(decision_path)},
    )
    evidence_rows = []
    for e in decision.evidence:
        lin = doc.lineage_of(e.task, e.arm, e.run)
        evidence_rows.append(
            [
                f"{e.task} · {e.arm}.r{e.run}",
                (lin.run_id if lin else None) or "(no run)",
                short(e.data_version),
                e.generation or "(none)",
                e.origin() or (lin.source() if lin else "(no lineage)"),
                e.error_kind.value if e.error_kind else "",
                "yes" if e.task_counted else "no",
            ]
        )
    metadata: dict[str, Any] = {
        "decision": doc.verdict,
        "policy": decision.policy_name,
        "review_decisions": dg.MetadataValue.md(
            "\n".join(
                f"- {r.candidate_arm} vs {r.incumbent_arm}: **{r.decision}**"
                f"{' (required)' if r.candidate_arm in doc.review_required else ''}"
                for r in review_decisions
            )
        )
        if review_decisions
        else None,
        "generation": doc.generation,
        "kind": kind,
        "candidate": doc.candidate,
        "overlay_digest": doc.overlay_digest,
        "incumbent_skills_digest": doc.incumbent_skills_digest,
        "evidence_expires_at": (
            decision.evidence_expires_at.isoformat() if decision.evidence_expires_at else None
        ),
        "reasons": dg.MetadataValue.md("\n".join(f"- {r}" for r in decision.reasons)),
        **integrity_metadata(decision),
        "looks_drift_pool": dg.MetadataValue.md("\n".join(f"- {s}" for s in v2_lines(decision)))
        if decision.paired_v2 is not None
        else None,
        "power_report": _power_metadata(decision),
        "how_to_read": dg.MetadataValue.md(
            "\n".join(f"- {n}" for n in report_mod.reading_notes(doc))
        ),
        "tasks": dg.MetadataValue.md(
            report_mod.markdown_table(report_mod.TASK_COLUMNS, report_mod.task_rows(decision))
        ),
        "evidence": dg.MetadataValue.md(
            report_mod.markdown_table(
                ["cell", "run id", "data version", "generation", "source", "error", "counted"],
                evidence_rows,
            )
        ),
        "refused_count": len(refused),
        "refused": dg.MetadataValue.md(
            "\n".join(f"- {r.task} {r.cell}: {r.reason}" for r in refused)
        )
        if refused
        else None,
        "overlay_diff": dg.MetadataValue.md(str(overlay_md.get("diff", ""))),
        "decision_path": dg.MetadataValue.path(str(decision_path)),
        "report_url": dg.MetadataValue.url(_report_link(artifacts, digest)),
        "ledger_seq": entry.seq,
        "ledger_hash": entry.hash,
        "digest": digest,
    }
    incumbents = [inp.incumbent_arm, *(ri.incumbent_arm for ri in review_inputs)]
    unusable = agg_mod.unusable_incumbent(aggs, incumbents)
    if unusable:
        context.add_output_metadata(metadata)
        raise IntegrityError(
            f"incumbent arm(s) {', '.join(unusable)} produced no usable measurement this "
            f"generation (cause undetermined); decision {decision.decision} was recorded at "
            f"{decision_path}"
        )
    return dg.MaterializeResult(data_version=dg.DataVersion(digest), metadata=metadata)


@dg.asset(
    deps=[promotion_decision, aggregates],
    group_name=GROUP,
    owners=OWNERS,
    kinds={"html", "markdown"},
    code_version=REPORT_CODE_VERSION,
    description=(
        "The benchmark report: Markdown in the UI and a self-contained HTML file with charts "
        "(resolve rate and median cost per task and arm; candidate vs incumbent cost scatter)."
    ),
)
@gc_paused()
def benchmark_report(
    context: dg.AssetExecutionContext, bench: BenchResource
) -> dg.MaterializeResult:  # type: ignore[type-arg]
    """Render the report of the latest decision."""
    md = upstream_metadata(context.instance, promotion_decision.key, None)
    doc = load_decision(Path(str(md["decision_path"])))
    task_ids = decided_tasks(context.instance, bench.artifacts(), doc.generation)
    aggs = _load_aggregates(context.instance, task_ids)
    markdown = report_mod.render_markdown(doc, aggs)
    markdown += _skill_eval_tables(context.instance, doc, bench, task_ids)
    folder = bench.artifacts().report(str(md["digest"]))
    md_path = atomic_write_text(folder / "report.md", markdown)
    html_path = atomic_write_text(folder / "report.html", report_mod.render_html(doc, aggs))
    return dg.MaterializeResult(
        data_version=dg.DataVersion(sha256_json({"md": markdown})),
        metadata={
            "report": dg.MetadataValue.md(markdown),
            "report_url": dg.MetadataValue.url(_report_link(bench.artifacts(), str(md["digest"]))),
            "html_path": dg.MetadataValue.path(str(html_path)),
            "markdown_path": dg.MetadataValue.path(str(md_path)),
        },
    )


def _skill_eval_tables(
    instance: dg.DagsterInstance, doc: Any, bench: BenchResource, task_ids: list[str]
) -> str:
    """The `claude plugin eval` tables of the decided skill-eval tasks: the evidence cells, plus
    the latest comparator cells of arms the gate did not read (the "without" arm)."""
    loaded = bench.load()
    tasks = [t for t in task_ids if loaded.task(t).spec.skill_eval is not None]
    if not tasks:
        return ""
    comparator_keys, _ = bench_cell_keys(str(bench.load_root()))
    wanted = {
        str(dg.MultiPartitionKey({"task": t, "cell": c})): (t, c)
        for t in tasks
        for c in comparator_keys
    }
    found = latest_metadata_by_partition(instance, "comparator_cells", wanted)
    others = []
    for pk, (t, c) in wanted.items():
        view = load_cell(t, c, "comparator_cells", found[pk]) if pk in found else None
        if view is not None:
            others.append(view.record)
    return skill_eval_section(doc, loaded, bench.artifacts(), others)


def integrity_metadata(decision: gate_mod.Decision) -> dict[str, Any]:
    """The decision's integrity verdict and cheat counts per arm (with any veto's reason), as the
    UI shows them; ``None`` / "not recorded" for a decision stored before schema 3."""
    return {
        "integrity": decision.integrity.verdict if decision.integrity else None,
        "cheats": dg.MetadataValue.md("\n".join(f"- {s}" for s in integrity_lines(decision))),
    }


def _report_link(artifacts: ArtifactStore, decision_digest: str) -> str:
    """The HTML report of a decision (``benchmark_report`` writes it), as a URL the UI links."""
    html_file = artifacts.report(decision_digest) / "report.html"
    return report_mod.report_url(html_file, artifacts.report(decision_digest).parent)
