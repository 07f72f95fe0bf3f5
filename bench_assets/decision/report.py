"""The benchmark report: Markdown for the Dagster UI and a self-contained HTML file with charts.

The HTML has no external assets (inline CSS and SVG, no JavaScript), so it opens anywhere and can
be attached to a review. Its charts (per-task bars, the candidate-vs-incumbent cost scatter) are
drawn by :mod:`bench_assets.decision.charts`.
"""

import html
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench_assets.decision.aggregate import TaskAggregate
from bench_assets.decision.charts import bars, scatter_svg
from bench_assets.decision.charts import resolve_rate as _rate
from bench_assets.decision.documents import DecisionDocument
from bench_assets.decision.explain import integrity_lines, v2_lines
from bench_assets.gate import Decision

REPORT_URL_ENV = "WFBENCH_REPORT_URL"
"""Base URL where the artifact root's ``reports/`` folder is served (``make ui`` serves it)."""


def report_url(html_file: Path, reports_root: Path) -> str:
    """The link the UI shows for a report: under ``$WFBENCH_REPORT_URL`` if set, else ``file://``.

    A browser opens a ``file://`` link only from another local page, so ``make ui`` serves the
    reports folder over HTTP on 127.0.0.1 and sets the variable for every materialization.
    """
    base = os.environ.get(REPORT_URL_ENV, "").rstrip("/")
    if base:
        return f"{base}/{html_file.relative_to(reports_root).as_posix()}"
    return html_file.resolve().as_uri()


def _fmt(v: float | None, spec: str = ".4f") -> str:
    return "n/a" if v is None else format(v, spec)


def arms_of(aggs: Sequence[TaskAggregate]) -> list[str]:
    """Every arm in the aggregates, in first-seen order."""
    seen: list[str] = []
    for agg in aggs:
        for arm in agg.arms:
            if arm not in seen:
                seen.append(arm)
    return seen


HEALTH_LEGEND = {
    "OBSERVED_OK": "fresh attempts this generation, all admissible",
    "DEGRADED": "fresh attempts, some excluded (session/infra errors), at least one admissible",
    "UNUSABLE": "fresh attempts, none admissible (an UNUSABLE incumbent fails the generation)",
    "UNKNOWN": "no fresh attempt this generation: every cell was reused from an earlier one, so "
    "the environment's current health is not observed (not a failure)",
}


def candidate_line(doc: DecisionDocument) -> str:
    """``candidate c2 (overlay d20a91c0) as arm cand vs incumbent arm workflow``."""
    d = doc.decision
    return (
        f"candidate {doc.candidate} (overlay {doc.overlay_digest[:8]}) as arm {d.candidate_arm} "
        f"vs incumbent arm {d.incumbent_arm}"
    )


def reading_notes(doc: DecisionDocument) -> list[str]:
    """What the gate's thresholds and the health labels mean, for this decision's policy."""
    d = doc.decision
    pol = d.policy
    notes = [
        f"Gate: policy {d.policy_name}, metric {d.metric}; a task is gated when both arms "
        f"resolved something with at least {pol.min_runs} valid runs each; saving % is the "
        "candidate's median improvement on that task.",
    ]
    if d.policy_name == "paired":
        notes.append(
            f"Non-inferiority: the candidate's mean per-task resolve rate may be at most "
            f"{pol.resolve_margin:.0%} below the comparator's, shown with "
            f"{1 - pol.resolve_error:.0%} one-sided confidence over all {pol.max_looks} look(s) "
            f"(group-sequential, {pol.spending} spending); the cost must fall by at least "
            f"{pol.min_improvement:.0%} (estimate) and below the comparator with "
            f"{1 - pol.cost_error:.0%} one-sided confidence, against a comparator level "
            "corrected for drift between its fresh and its reused or pooled runs."
        )
    elif d.policy_name == "paired_v2":
        notes.append(
            f"Non-inferiority: the candidate's mean per-task resolve rate may be at most "
            f"{pol.v2_resolve_margin:.0%} below the comparator's, shown with "
            f"{pol.v2_noninferiority_confidence:.0%} one-sided confidence (cluster t with a "
            "binomial variance floor); the cost improvement must be at least "
            f"{pol.min_improvement:.0%} and clear the drift margin with {pol.v2_confidence:.0%} "
            f"one-sided confidence; both levels are split over {pol.max_looks} look(s)."
        )
    elif d.policy_name == "paired_v1":
        notes.append(
            f"Non-inferiority: the candidate's mean per-task resolve rate may be at most "
            f"{pol.resolve_margin:.0%} below the incumbent's, shown with "
            f"{pol.noninferiority_confidence:.0%} one-sided confidence (task-cluster bootstrap, "
            f"seed {pol.seed}); the cost improvement must be at least {pol.min_improvement:.0%} "
            f"with {pol.confidence:.0%} one-sided confidence."
        )
    notes.append(
        "Integrity: a grader-tampered cell forged test outcomes (a planted canary test that must "
        "fail reported passed); any such candidate cell, or more resolved impossible-variant "
        "cells than the comparator, vetoes promotion whatever the other numbers say. verify✓ "
        "oracle✗ (the visible tests passed, the hidden oracle failed) is an overfitting signal, "
        "reported only."
    )
    notes += [f"Health {k}: {v}." for k, v in HEALTH_LEGEND.items()]
    return notes


def render_markdown(doc: DecisionDocument, aggs: Sequence[TaskAggregate]) -> str:
    """The report as Markdown (decision, reasons, per-task per-arm table, evidence notes)."""
    d = doc.decision
    lines = [
        f"# wfbench report — {doc.generation or 'ad hoc'}",
        "",
        f"**Decision: `{d.decision}`** for {candidate_line(doc)} (policy `{d.policy_name}`)",
        "",
    ]
    for reason in d.reasons:
        lines.append(f"- {reason}")
    lines += ["", "## Integrity", ""] + [f"- {line}" for line in integrity_lines(d)]
    gate_lines = v2_lines(d)
    if gate_lines:
        lines += ["", "## Looks, drift and pooled history", ""]
        lines += [f"- {line}" for line in gate_lines]
    lines += ["", "## Tasks", "", markdown_table(TASK_COLUMNS, task_rows(d)), ""]
    lines += review_markdown(doc)
    lines += [
        "",
        "Values are medians over valid runs; `n/a` = unmeasured (never counted as 0).",
        "",
        "| task | arm | resolved | pass@1 | median cost $ | tokens | turns | churn | excluded |"
        " verify✓ oracle✗ | tampered | fresh/reused | health |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for agg in aggs:
        for name, a in agg.arms.items():
            churn = (
                "n/a"
                if a.median_churn_files is None
                else f"{a.median_churn_files:g}/+{a.median_churn_insertions:g}"
                f"/−{a.median_churn_deletions:g}"
            )
            lines.append(
                f"| {agg.task} | {name} | {a.resolved}/{a.valid_runs} | {_fmt(_rate(a), '.2f')} | "
                f"{_fmt(a.median_cost_usd)} | {_fmt(a.median_total_tokens, '.0f')} | "
                f"{_fmt(a.median_turns, '.0f')} | {churn} | {a.excluded_runs} | "
                f"{a.verify_pass_oracle_fail} | {a.grader_tampered} | "
                f"{a.fresh_runs}/{a.reused_runs} | "
                f"{a.health.status.value} |"
            )
    lines += ["", "## How to read this", ""] + [f"- {n}" for n in reading_notes(doc)]
    return "\n".join(lines) + "\n"


def render_html(doc: DecisionDocument, aggs: Sequence[TaskAggregate]) -> str:
    """A self-contained HTML report (inline CSS + SVG charts, no scripts)."""
    arms = arms_of(aggs)
    decision = doc.decision
    incumbent, candidate = decision.incumbent_arm, decision.candidate_arm
    md_rows = []
    for agg in aggs:
        for name, a in agg.arms.items():
            md_rows.append(
                "<tr>"
                + "".join(
                    f"<td>{html.escape(str(c))}</td>"
                    for c in (
                        agg.task,
                        name,
                        f"{a.resolved}/{a.valid_runs}",
                        _fmt(a.median_cost_usd),
                        _fmt(a.median_total_tokens, ".0f"),
                        a.excluded_runs,
                        a.verify_pass_oracle_fail,
                        a.grader_tampered,
                        f"{a.fresh_runs}/{a.reused_runs}",
                        a.health.status.value,
                    )
                )
                + "</tr>"
            )
    reasons = "".join(f"<li>{html.escape(r)}</li>" for r in decision.reasons)
    integrity_items = "".join(f"<li>{html.escape(line)}</li>" for line in integrity_lines(decision))
    gate_items = "".join(f"<li>{html.escape(line)}</li>" for line in v2_lines(decision))
    gate_section = (
        f"<h2>Looks, drift and pooled history</h2>\n<ul>{gate_items}</ul>" if gate_items else ""
    )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in reading_notes(doc))
    verdict = html.escape(decision.decision)
    title = html.escape(doc.generation or "ad hoc")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>wfbench report {title}</title>
<style>
body{{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:980px;color:#222}}
h1{{font-size:1.4rem}} h2{{font-size:1.1rem}}
.verdict{{font-size:1.2rem;padding:.4rem .8rem;border-radius:6px;
display:inline-block;background:#eef}} table{{border-collapse:collapse;width:100%;margin:1rem 0}}
td,th{{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left}} th{{background:#f6f6f6}}
svg{{width:100%;max-width:720px;display:block;margin:1rem 0}} .t{{font-weight:600;font-size:13px}}
.a{{font-size:11px;fill:#555}} .g{{stroke:#e3e3e3}} .d{{stroke:#999;stroke-dasharray:4 4}}
</style></head><body>
<h1>wfbench report — {title}</h1>
<p class="verdict">Decision: <b>{verdict}</b> · {html.escape(candidate_line(doc))}</p>
<ul>{reasons}</ul>
<h2>Integrity</h2>
<ul>{integrity_items}</ul>
{gate_section}
<h2>Gate, per task</h2>
{_html_table(TASK_COLUMNS, task_rows(decision))}
{bars("Resolve rate by task and arm", aggs, arms, "rate", "")}
{bars("Median cost ($) by task and arm", aggs, arms, "cost", "")}
{scatter_svg(aggs, incumbent, candidate)}
<table><tr><th>task</th><th>arm</th><th>resolved</th><th>median cost $</th><th>tokens</th>
<th>excluded</th><th>verify✓ oracle✗</th><th>tampered</th><th>fresh/reused</th><th>health</th>
</tr>
{"".join(md_rows)}</table>
<p>Scatter: points below the dashed diagonal are tasks the candidate made cheaper; hollow points
are tasks where it resolved fewer runs; error bars are the min–max cost over each arm's valid runs
(horizontal: incumbent, vertical: candidate; none for a single run or an unknown spread). Values
are medians over valid runs; n/a = unmeasured (never counted as 0).</p>
<h2>How to read this</h2>
<ul>{notes}</ul>
</body></html>
"""


def _html_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


TASK_COLUMNS = [
    "task",
    "incumbent",
    "candidate",
    "median incumbent",
    "median candidate",
    "saving %",
    "gated",
    "counted",
    "why",
]


def task_rows(decision: Decision) -> list[list[str]]:
    """The decision's per-task table (numbers and why each task counted or not), as strings."""
    return [
        [
            t.task,
            t.incumbent_resolved,
            t.candidate_resolved,
            _fmt(t.incumbent.median_metric),
            _fmt(t.candidate.median_metric),
            _fmt(t.improvement_pct, ".1f"),
            "yes" if t.gated else "no",
            "yes" if t.counted else "no",
            t.why,
        ]
        for t in decision.tasks
    ]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _median_text(value: float | None, digits: int = 0) -> str:
    """A median for people: ``n/a`` when unmeasured; integral values without decimals."""
    if value is None:
        return "n/a"
    if digits == 0 and float(value).is_integer():
        return f"{int(value)}"
    return f"{value:.{max(digits, 1)}f}"


def _rate_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def aggregate_markdown(agg: TaskAggregate) -> str:
    """The per-arm table of one task as Markdown (medians over valid runs).

    Args:
        agg: The task aggregate.

    Returns:
        A heading, the table, and a line listing missing cells when there are any. Unmeasured
        values are shown as ``n/a``; churn is ``files/+insertions/−deletions``.
    """
    head = [
        "arm",
        "resolved/valid",
        "pass@1",
        "pass^k",
        "median cost $",
        "tokens",
        "turns",
        "wall s",
        "churn",
        "excluded",
        "verify✓oracle✗",
        "tampered",
        "fresh/reused",
        "health",
    ]
    cls = f" ({agg.task_class})" if agg.task_class else ""
    lines = [
        f"### {_md_cell(agg.task)}{cls}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join(" --- " for _ in head) + "|",
    ]
    for a in agg.arms.values():
        pass_k = "n/a" if a.pass_k is None else f"{a.pass_k:.2f} (k={a.k})"
        cost = "n/a" if a.median_cost_usd is None else f"{a.median_cost_usd:.4f}"
        churn = (
            f"{_median_text(a.median_churn_files)}/+{_median_text(a.median_churn_insertions)}"
            f"/−{_median_text(a.median_churn_deletions)}"
            if a.median_churn_files is not None
            else "n/a"
        )
        excluded = str(a.excluded_runs)
        if a.excluded_kinds:
            excluded += " (" + ", ".join(f"{k}×{n}" for k, n in a.excluded_kinds.items()) + ")"
        reuse = f"{a.fresh_runs}/{a.reused_runs}"
        if a.reused_from_generations:
            reuse += " (from " + ", ".join(a.reused_from_generations) + ")"
        health = a.health.status.value
        if a.health.reasons:
            health += " (" + ", ".join(a.health.reasons) + ")"
        row = [
            a.arm,
            f"{a.resolved}/{a.valid_runs}",
            _rate_text(a.pass_at_1),
            pass_k,
            cost,
            _median_text(a.median_total_tokens),
            _median_text(a.median_turns),
            _median_text(a.median_duration_s, 1),
            churn,
            excluded,
            str(a.verify_pass_oracle_fail),
            str(a.grader_tampered),
            reuse,
            health,
        ]
        lines.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
    if agg.missing_cells:
        lines += ["", f"Missing cells ({len(agg.missing_cells)}): {', '.join(agg.missing_cells)}"]
    return "\n".join(lines) + "\n"


def aggregate_set_markdown(aggs: Sequence[TaskAggregate], max_tasks: int) -> str:
    """The per-arm tables of the first ``max_tasks`` tasks (incomplete ones first), one after
    another, and a line saying how many more the set holds.

    Args:
        aggs: Every task's aggregate of one evidence set.
        max_tasks: How many tasks to show (the UI's metadata stays small at 1,000 tasks).
    """
    shown = sorted(aggs, key=lambda a: (not a.missing_cells, a.task))[:max_tasks]
    parts = [aggregate_markdown(a) for a in shown]
    if len(aggs) > len(shown):
        parts.append(
            f"... and {len(aggs) - len(shown)} more task(s), all complete; every task is in the "
            "aggregate set (record_path) and the report.\n"
        )
    return "\n".join(parts)


REVIEW_COLUMNS = [
    "task",
    "arm",
    "valid",
    "TP",
    "FP",
    "FN",
    "precision",
    "recall",
    "weighted F1",
    "blocker recall",
    "verdicts ok",
    "clean pass",
    "median cost $",
]


def _ratio_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _flag_text(value: bool | None) -> str:
    return "n/a" if value is None else ("yes" if value else "no")


def review_rows(doc: DecisionDocument) -> list[list[str]]:
    """Per review task and arm: the folded review metrics (counts 1 dp, ratios 3 dp, n/a)."""
    rows = []
    for rd in doc.review_decisions:
        for t in rd.tasks:
            for arm, row in ((rd.incumbent_arm, t.incumbent), (rd.candidate_arm, t.candidate)):
                r = row.review
                counts = (
                    ["n/a"] * 3
                    if r is None
                    else [
                        "n/a" if v is None else f"{v:.1f}"
                        for v in (r.true_positives, r.false_positives, r.false_negatives)
                    ]
                )
                rows.append(
                    [
                        t.task + (" (clean)" if t.clean_control else ""),
                        arm,
                        f"{row.valid_runs}/{row.runs}",
                        *counts,
                        _ratio_text(r.precision if r else None),
                        _ratio_text(r.recall if r else None),
                        _ratio_text(r.weighted_f1 if r else None),
                        _ratio_text(r.blocker_recall if r else None),
                        _flag_text(r.verdict_correct if r else None),
                        _flag_text(r.clean_pass if r and t.clean_control else None),
                        _fmt(row.median_cost_usd),
                    ]
                )
    return rows


def review_markdown(doc: DecisionDocument) -> list[str]:
    """The report's review section: each review decision, its reasons and the quality table."""
    if not doc.review_decisions:
        return []
    lines = ["## Review quality", ""]
    for rd in doc.review_decisions:
        required = " (required for this overlay)" if rd.candidate_arm in doc.review_required else ""
        lines.append(
            f"**Review decision: `{rd.decision}`** (`{rd.candidate_arm}` vs "
            f"`{rd.incumbent_arm}`){required}"
        )
        lines.append("")
        lines += [f"- {reason}" for reason in rd.reasons]
        lines.append("")
    lines += [markdown_table(REVIEW_COLUMNS, review_rows(doc)), ""]
    lines.append(
        "Review metrics are medians over valid repeats (blocker recall: the worst repeat); "
        "verdicts ok / clean pass: every repeat. Almost every review is `oracle-failed` (only a "
        "perfect review resolves): the review gate judges these metrics, not resolution."
    )
    lines.append("")
    return lines
