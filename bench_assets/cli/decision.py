"""Commands on decisions and their evidence: decide, explain, report, ledger verify/repair."""

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bench_assets.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    artifact_store,
    fail,
    fail_step,
    json_option,
    open_instance,
    progress,
    tasks_option,
)
from bench_assets.kernel.gcpause import gc_paused
from bench_assets.kernel.hashing import short
from bench_assets.tasks.catalog import load_benchmark

if TYPE_CHECKING:
    import dagster as dg

    from bench_assets.decision.documents import DecisionDocument


@click.command()
@tasks_option
@click.option("--generation", default="", help="Generation id recorded on the decision.")
@json_option("Print the decision metadata as JSON.")
@gc_paused(until_exit=True)
def decide(tasks_dir: Path, generation: str, as_json: bool) -> None:
    """Aggregate every task's cells, run the promotion gate, write the report and ledger entry.

    With --generation G, the decision uses exactly the cells G's manifest planned, each verified
    (never another candidate's cell), and refuses (exit 2) while any of them has no acceptable
    evidence, or G was never planned: `wfbench evolve` resumes and finishes G. Without it, an
    ad-hoc decision on the latest candidate overlay: every cell's latest record is verified as a
    generation verifies its evidence — unchanged since it was recorded, made for the identity
    its arm has now (its overlay, skills, inputs, agent, grader, ...) — and a cell that is not is
    refused as evidence, listed with the reason (`wfbench explain`); too few cells left is
    insufficient_evidence. The ledger records the decision as ad hoc, and `wfbench apply` never
    applies it. The decision is data, not an exit code: promote, keep_incumbent and
    insufficient_evidence all exit 0. An UNUSABLE incumbent arm fails (exit 1) after the
    evidence is written.
    """
    from bench_assets.decision.manifest import load_complete
    from bench_assets.driver.instance import StepFailed, materialize_decision
    from bench_assets.generation.queue import writer_lock

    bench = load_benchmark(tasks_dir)
    instance = open_instance()
    store = artifact_store()
    with writer_lock(store.writer_lock(), "wfbench decide"):
        manifest = load_complete(store.generation(generation)) if generation else None
        if generation and manifest is None:
            fail(
                f"generation {generation} has no evidence manifest ({store.generation(generation)}"
                "): it was never planned; `wfbench evolve` runs a generation, and `wfbench "
                "decide` without --generation decides ad hoc",
                EXIT_INVALID,
            )
        tasks = sorted(manifest.header.tasks) if manifest is not None else bench.task_ids()
        try:
            # Every planned cell is verified once, by the aggregates; an unfinished generation
            # is refused from them before any decision is written.
            out = materialize_decision(
                instance,
                tasks,
                tasks_dir=str(bench.root),
                artifact_root=str(store.root),
                generation=generation,
                aborted=False,
                progress=progress,
                refuse_unfinished=bool(generation),
            )
        except StepFailed as e:
            fail_step(e)
    d: dict[str, Any] = dict(out["decision"])
    r: dict[str, Any] = dict(out["report"])
    if as_json:
        click.echo(json.dumps({"decision": d, "report": r}, indent=2, default=str))
        return
    kind = "ad hoc" if d.get("kind") == "ad_hoc" else f"generation {d.get('generation')}"
    click.echo(
        f"decision: {d.get('decision')} (policy {d.get('policy')}, candidate "
        f"{d.get('candidate')}, {kind})"
    )
    click.echo(str(d.get("reasons", "")))
    if d.get("refused_count"):
        click.echo(
            f"refused as evidence: {d['refused_count']} planned cell(s) (`wfbench explain` "
            "lists each with the reason)"
        )
    click.echo(f"report: {r.get('html_path')}")
    click.echo(f"ledger entry #{d.get('ledger_seq')} {short(str(d.get('ledger_hash')))}")


@click.command()
@click.option(
    "--generation", default="", help="Explain this generation's decision (default: latest)."
)
@json_option("Print the full decision document.")
def explain(generation: str, as_json: bool) -> None:
    """Why the candidate was (not) promoted: policy, per-task numbers, evidence cells.

    The same answer as the promotion_decision asset's metadata in the UI, from the stored
    decision document; reused evidence names the generation and run it came from. Exits 2 if
    there is no decision (for that generation) yet.
    """
    from bench_assets.decision.documents import load_decision

    md = _find_decision(open_instance(), generation)
    path = Path(str(md["decision_path"]))
    if as_json:
        click.echo(json.dumps(json.loads(path.read_text(encoding="utf-8")), indent=2))
        return
    _print_explanation(load_decision(path), run_id=md.get("run_id"))


def _find_decision(instance: "dg.DagsterInstance", generation: str) -> dict[str, object]:
    """Metadata of the latest decision (of ``generation`` if given); exit 2 if there is none."""
    from bench_assets.driver.instance import decision_records

    seen: list[str] = []
    for md in decision_records(instance):
        if not generation or md.get("generation") == generation:
            return md
        if md.get("generation") and str(md["generation"]) not in seen:
            seen.append(str(md["generation"]))
    if generation and seen:
        fail(
            f"no promotion decision for generation {generation}; generations with a decision: "
            f"{', '.join(sorted(seen))}",
            EXIT_INVALID,
        )
    which = f" for generation {generation}" if generation else ""
    fail(
        f"no promotion decision{which} yet; `wfbench evolve` runs a generation "
        "(or `wfbench decide` decides on the cells already materialized)",
        EXIT_INVALID,
    )


def _print_explanation(doc: "DecisionDocument", run_id: object) -> None:
    """The human form of ``wfbench explain``."""
    from bench_assets.decision.report import TASK_COLUMNS, task_rows

    d = doc.decision
    basis = "ad hoc: latest records" if doc.basis == "ad_hoc" else "generation manifest"
    click.echo(f"generation {doc.generation or '(none)'}: {d.decision} ({basis})")
    click.echo(
        f"candidate {doc.candidate} (overlay {short(doc.overlay_digest)}"
        f") as arm {d.candidate_arm} vs incumbent arm {d.incumbent_arm} "
        f"(skills {short(doc.incumbent_skills_digest)})"
    )
    from bench_assets.config.models import POLICY_READS
    from bench_assets.decision.explain import integrity_lines, v2_lines

    # Exactly the settings the deciding policy reads (a field it ignores is never shown as if it
    # mattered: issue 23's margin trap).
    pol = d.policy
    reads = sorted(k for k in POLICY_READS.get(d.policy_name, ()) if k not in ("name", "metric"))
    settings = ", ".join(f"{k} {getattr(pol, k)}" for k in reads if hasattr(pol, k))
    click.echo(f"policy {d.policy_name}: metric {d.metric}; {settings}")
    expires = d.evidence_expires_at.isoformat() if d.evidence_expires_at else "(no evidence)"
    click.echo(f"evidence expires {expires}; decided in run {run_id}")
    for line in integrity_lines(d) + v2_lines(d):
        click.echo(line)
    click.echo("\nreasons:")
    for reason in d.reasons:
        click.echo(f"  - {reason}")
    click.echo("\ntasks:")
    table = task_rows(d)
    rows = [TASK_COLUMNS[:-1], *[r[:-1] for r in table]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for n, r in enumerate(rows):
        line = "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))
        why = "" if n == 0 else f"  {table[n - 1][-1]}"
        click.echo(f"  {line}{why}")
    _print_reviews(doc)
    click.echo("\nevidence cells:")
    for e in d.evidence:
        lin = doc.lineage_of(e.task, e.arm, e.run)
        origin = e.origin() or (lin.source() if lin else ("reused" if e.reused else "fresh"))
        outcome = e.error_kind.value if e.error_kind else "valid"
        counted = "" if e.task_counted else " (task not counted)"
        click.echo(
            f"  {e.task} {e.arm}.r{e.run}: {origin}, generation "
            f"{e.generation or '(none)'}, data version {short(e.data_version)}, "
            f"{outcome}{counted}"
        )
        for line in _grader_lines(e):
            click.echo(f"      {line}")
    if doc.refused:
        click.echo("\nrefused as evidence:")
        for refused in doc.refused:
            click.echo(f"  {refused.task} {refused.cell}: {refused.reason}")


def _grader_lines(e: Any) -> list[str]:
    """A skill-eval evidence cell's per-grader outcomes, from its record (else nothing)."""
    from bench_assets.cells.records import load_record
    from bench_assets.cli.common import artifact_store
    from bench_assets.exports.plugin_eval import grader_lines
    from bench_assets.kernel.errors import RecordCorrupt

    cell = (e.pooled_from or "") if e.pooled else f"{e.arm}.r{e.run}"
    try:
        record = load_record(artifact_store().cell(e.task, cell, e.record_id) / "record.json")
    except (OSError, RecordCorrupt, ValueError):
        return []
    return grader_lines(record)


def _print_reviews(doc: "DecisionDocument") -> None:
    """The review decisions and their review metrics (review candidate arms only)."""
    from bench_assets.decision.report import REVIEW_COLUMNS, review_rows

    if not doc.review_decisions:
        return
    click.echo(f"\noverall verdict (applied): {doc.verdict}")
    for rd in doc.review_decisions:
        required = (
            " (required: the overlay changes its skill)"
            if (rd.candidate_arm in doc.review_required)
            else ""
        )
        pol = rd.policy
        click.echo(
            f"\nreview decision: {rd.decision} — {rd.candidate_arm} vs {rd.incumbent_arm}{required}"
        )
        click.echo(
            f"review policy: min_runs {pol.min_runs}, min_improvement {pol.min_improvement}, "
            f"weighted_f1_margin {pol.weighted_f1_margin}, blocker_recall_margin "
            f"{pol.blocker_recall_margin}, min_cost_improvement {pol.min_cost_improvement}, "
            f"max_cost_regression {pol.max_cost_regression}"
        )
        for reason in rd.reasons:
            click.echo(f"  - {reason}")
    rows = [REVIEW_COLUMNS, *review_rows(doc)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    click.echo("\nreview metrics:")
    for r in rows:
        click.echo("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


@click.command()
@click.option("--open", "open_it", is_flag=True, help="Open the HTML report in a browser.")
def report(open_it: bool) -> None:
    """Print the paths of the latest benchmark report (Markdown and self-contained HTML).

    The report is written by `wfbench decide` or `wfbench evolve`; exits 2 if there is none yet.
    """
    from bench_assets.defs.resources import latest_metadata

    instance = open_instance()
    md = latest_metadata(instance, "benchmark_report", None)
    if not md:
        fail("no report yet; run `wfbench decide`", EXIT_INVALID)
    decision = latest_metadata(instance, "promotion_decision", None)
    if decision and str(decision.get("digest")) not in str(md.get("html_path")):
        # The newest decision has no report (writing it failed): never show an older one as if.
        fail(
            f"the latest decision (generation {decision.get('generation') or '(none)'}, "
            f"{decision.get('decision_path')}) has no report: writing it failed; run "
            "`wfbench decide` again to write it",
            EXIT_FAILED,
        )
    click.echo(f"html: {md['html_path']}")
    click.echo(f"markdown: {md['markdown_path']}")
    if open_it:
        click.launch(str(md["html_path"]))


@click.group()
def ledger() -> None:
    """The tamper-evident decision ledger.

    Every decision and every applied promotion is appended as an entry hash-chained to the one
    before it, so an edited, dropped or reordered entry is detected by `wfbench ledger verify`.
    """


@ledger.command("verify")
@click.option(
    "--path",
    "path",
    type=click.Path(path_type=Path),
    default=None,
    help="Ledger file (default: <artifacts>/ledger/decisions.jsonl).",
)
@json_option("Print the verification result as JSON.")
def ledger_verify(path: Path | None, as_json: bool) -> None:
    """Check every entry's hash and the chain; exit 1 naming the first bad entry."""
    from bench_assets.decision import ledger as ledger_mod

    target = path or artifact_store().ledger()
    if not target.exists():
        fail(f"no ledger at {target}", EXIT_INVALID)
    result = ledger_mod.verify(target)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        click.echo(result.message(target))
    sys.exit(EXIT_OK if result.ok else EXIT_FAILED)


@ledger.command("repair")
@click.option(
    "--path",
    "path",
    type=click.Path(path_type=Path),
    default=None,
    help="Ledger file (default: <artifacts>/ledger/decisions.jsonl).",
)
def ledger_repair(path: Path | None) -> None:
    """Re-anchor a ledger whose only fault is a missing head write (an interrupted append).

    Prints the entry it accepted. Anything else (a broken chain, an edited byte, an anchor ahead
    of the file) is refused, naming the fault, and nothing is changed (exit 1).
    """
    from bench_assets.decision import ledger as ledger_mod
    from bench_assets.generation.queue import writer_lock

    store = artifact_store()
    target = path or store.ledger()
    if not target.exists() and not ledger_mod.head_path(target).exists():
        fail(f"no ledger at {target}", EXIT_INVALID)
    with writer_lock(store.writer_lock(), "wfbench ledger repair"):
        click.echo(ledger_mod.repair(target).message(target))  # LedgerError: one line, exit 1
