"""wfbench's skill-eval cells in ``claude plugin eval``'s result shape, and its terminal table.

:func:`plugin_eval_document` writes the first-party ``aggregate-result.json`` shape
(``schemaVersion`` 1, camelCase; reference ``skill-eval-formats.md`` §1.10): per case, per arm
(``with`` / ``without``), per run, per grader, with the case and suite aggregates, so CI jobs and
dashboards that read the first-party file read wfbench's runs. Semantics (§1.6):

- case ``score`` = mean of its with-arm run scores; ``scoreWithout`` the same for the without
  arm; ``delta`` = score − scoreWithout, **omitted** (never 0) when either side has no scored run;
- a run's ``passed`` is a perfect run (score 1), ``passRate`` the share of such runs;
- a case passes when its score meets the threshold; ``overallScore`` = mean case score,
  ``meanDelta`` = mean of the deltas present.

Where wfbench is stricter than the first-party tool it says so in the document instead of
inventing a number: a run whose session errored has ``score: null`` and its ``error`` (the
first-party tool would grade what it produced), and is left out of the means; ``claudeVersion`` is
the version the sessions reported (``null`` for replayed runs). :func:`plugin_eval_table` prints
the ``CASE WITH W/OUT Δ RUNS COST`` table the first-party tool prints for the same runs.
"""

from collections.abc import Sequence
from statistics import fmean
from typing import TYPE_CHECKING, Any

from bench_assets.scorers.skill_eval import SkillEvalGrading

if TYPE_CHECKING:
    from bench_assets.cells.records import CellRecord

SCHEMA_VERSION = 1


def _mean(values: Sequence[float]) -> float | None:
    return round(fmean(values), 6) if values else None


def _run(r: "CellRecord") -> dict[str, Any]:
    se = r.skill_eval
    graders = []
    for o in se.graders if se is not None else []:
        g: dict[str, Any] = {
            "name": o.name,
            "passed": bool(o.passed),
            "weight": o.weight,
            "explanation": o.explanation,
            "withOnly": o.with_only,
            "scored": o.scored,
        }
        if o.judge_votes is not None:
            g["judgeVotes"] = o.judge_votes
        graders.append(g)
    score = se.score if se is not None else None
    error = r.error_detail if r.error_kind is not None and score is None else None
    judge = se.judge_cost_usd if se is not None else None
    return {
        "score": score,
        "passed": score == 1.0,
        "turns": r.turns,
        "costUsd": round((r.cost_usd or 0.0) + (judge or 0.0), 6)
        if r.cost_usd is not None
        else None,
        "judgeCostUsd": judge or 0.0,
        "durationSeconds": r.duration_s,
        "startedAt": r.recorded_at,
        "error": error or (str(r.error_kind) if score is None and r.error_kind else None),
        "tracePath": r.transcript.path if r.transcript is not None else None,
        "skippedPaidGraders": False,
        "graders": graders,
        "wfbench": {"record": r.record_id, "arm": r.arm, "run": r.run, "resolved": r.resolved},
    }


def _grader_def(g: Any) -> dict[str, Any]:
    config = g.model_dump(
        mode="json", exclude={"name", "type", "weight", "note"}, exclude_none=True
    )
    config.pop("baseline_transcript", None)
    return {"name": g.name, "type": g.type, "weight": g.weight, "config": config}


def plugin_eval_document(
    records: Sequence["CellRecord"],
    cases: dict[str, tuple[Any, SkillEvalGrading]],
    *,
    with_arm: str,
    without_arm: str | None,
    root: str,
) -> dict[str, Any]:
    """The first-party result document for the skill-eval ``cases`` (task id → (TaskSpec,
    grading)) from their ``records`` (module docstring)."""
    threshold = min((g.threshold for _, g in cases.values()), default=1.0)
    ablation = "with-without" if without_arm else "none"
    out_cases = []
    for tid in sorted(cases):
        spec, grading = cases[tid]
        se = spec.skill_eval
        mine = sorted((r for r in records if r.task == tid), key=lambda r: (r.arm, r.run))
        arms = {"with": [_run(r) for r in mine if r.arm == with_arm]}
        if without_arm:
            arms["without"] = [_run(r) for r in mine if r.arm == without_arm]
        with_scores = [x["score"] for x in arms["with"] if x["score"] is not None]
        agg: dict[str, Any] = {
            "score": _mean(with_scores),
            "passRate": _mean([float(x["passed"]) for x in arms["with"] if x["score"] is not None]),
        }
        if without_arm:
            wo = [x["score"] for x in arms["without"] if x["score"] is not None]
            agg["scoreWithout"] = _mean(wo)
            agg["passRateWithout"] = _mean(
                [float(x["passed"]) for x in arms["without"] if x["score"] is not None]
            )
            if agg["score"] is not None and agg["scoreWithout"] is not None:
                agg["delta"] = round(agg["score"] - agg["scoreWithout"], 6)
        out_cases.append(
            {
                "name": se.case if se is not None else tid,
                "dir": tid,
                "source": "prose",
                "promptMarkdown": spec.prompt,
                "runsPerCase": (se.runs if se is not None and se.runs else None),
                "timeoutSeconds": spec.timeouts.session_s,
                "maxTurns": se.max_turns if se is not None else None,
                "threshold": grading.threshold,
                "graders": [_grader_def(g) for g in grading.graders],
                "arms": arms,
                "aggregates": agg,
                "wfbench": {"task": tid},
            }
        )
    scores = [c["aggregates"]["score"] for c in out_cases if c["aggregates"]["score"] is not None]
    deltas = [c["aggregates"]["delta"] for c in out_cases if "delta" in c["aggregates"]]
    passed = sum(
        1
        for c in out_cases
        if c["aggregates"]["score"] is not None and c["aggregates"]["score"] >= c["threshold"]
    )
    all_runs = [x for c in out_cases for arm in c["arms"].values() for x in arm]
    costs = [x["costUsd"] for x in all_runs if x["costUsd"] is not None]
    versions = sorted({r.agent_version for r in records if r.agent_version})
    aggregates: dict[str, Any] = {
        "casesTotal": len(out_cases),
        "casesPassed": passed,
        "overallScore": _mean(scores),
        "overallPassRate": _mean([c["aggregates"]["passRate"] for c in out_cases
                                  if c["aggregates"]["passRate"] is not None]),
    }  # fmt: skip
    if deltas:
        aggregates["meanDelta"] = _mean(deltas)
    return {
        "schemaVersion": SCHEMA_VERSION,
        "claudeVersion": versions[0] if len(versions) == 1 else None,
        "startedAt": min((r.recorded_at for r in records), default=None),
        "durationSeconds": round(sum(r.duration_s for r in records), 3),
        "costUsd": round(sum(costs), 6) if costs else None,
        "partial": False,
        "suite": {
            "root": root,
            "ablation": ablation,
            "threshold": threshold,
            "concurrency": 1,
            "plugins": [],
        },
        "cases": out_cases,
        "aggregates": aggregates,
    }


def case_scores(doc: dict[str, Any]) -> dict[str, float | None]:
    """Per-case with-arm score of a first-party result document (by ``dir``, else ``name``)."""
    return {
        str(c.get("dir") or c["name"]): c.get("aggregates", {}).get("score")
        for c in doc.get("cases", [])
    }


def _num(v: float | None, spec: str = ".2f") -> str:
    return "—" if v is None else format(v, spec)


def plugin_eval_table(doc: dict[str, Any]) -> str:
    """``claude plugin eval``'s two-arm terminal table for a result document, as Markdown."""
    rows = ["| CASE | WITH | W/OUT | Δ | RUNS | COST | NOTES |", "|---|---|---|---|---|---|---|"]
    for c in doc["cases"]:
        a = c["aggregates"]
        runs = len(c["arms"]["with"]) + len(c["arms"].get("without", []))
        cost = sum(x["costUsd"] or 0.0 for arm in c["arms"].values() for x in arm)
        errors = sum(1 for arm in c["arms"].values() for x in arm if x["score"] is None)
        note = f"{errors} run(s) errored, not scored" if errors else ""
        delta = a.get("delta")
        rows.append(
            f"| {c['name']} | {_num(a['score'])} | {_num(a.get('scoreWithout'))} | "
            f"{'—' if delta is None else format(delta, '+.2f')} | {runs} | ${cost:.2f} | {note} |"
        )
    agg = doc["aggregates"]
    rows.append(
        f"\n{agg['casesPassed']}/{agg['casesTotal']} case(s) at threshold; overall score "
        f"{_num(agg['overallScore'])}; mean Δ {_num(agg.get('meanDelta'), '+.2f')}"
    )
    return "\n".join(rows)


def grader_lines(record: "CellRecord") -> list[str]:
    """One line per grader of a skill-eval cell: outcome, scored or shown, explanation."""
    se = record.skill_eval
    if se is None:
        return []
    score = "unknown" if se.score is None else f"{se.score:g}"
    head = f"graders: score {score} (threshold {se.threshold:g})"
    if se.session_error:
        head += f"; session error, not graded: {se.session_error[:120]}"
    if se.judge_cost_usd is not None:
        head += f"; judge ${se.judge_cost_usd:.4f}"
    lines = [head]
    for o in se.graders:
        mark = {True: "pass", False: "FAIL", None: "undecided"}[o.passed]
        shown = "" if o.scored else " (shown, not scored)"
        if o.human_label is not None:
            human = "pass" if o.human_label else "FAIL"
            agrees = "" if o.passed is None else (" (agrees)" if o.passed == o.human_label else
                                                  " (disagrees)")  # fmt: skip
            shown += f" [human label: {human}{agrees}]"
        lines.append(f"  {mark:<9} {o.name} [{o.type} x{o.weight:g}]{shown}: {o.explanation}")
    return lines


def evidence_records(doc: Any, store: Any) -> list["CellRecord"]:
    """The records of a decision's evidence cells (a record that cannot be read is left out)."""
    from bench_assets.cells.records import load_record
    from bench_assets.kernel.errors import RecordCorrupt

    out = []
    for ev in doc.decision.evidence:
        cell = (ev.pooled_from or "") if ev.pooled else f"{ev.arm}.r{ev.run}"
        try:
            out.append(load_record(store.cell(ev.task, cell, ev.record_id) / "record.json"))
        except (OSError, RecordCorrupt, ValueError):
            continue
    return out


def report_section(doc: Any, bench: Any, store: Any, others: Sequence["CellRecord"] = ()) -> str:
    """Markdown for the report: per plugin arm, the table ``claude plugin eval`` would print for
    the decision's evidence runs (that arm "with", the skills-none arm "without"), next to the
    verdict. ``others``: latest records of arms the gate did not read (the "without" arm is not
    gate evidence; the table says so). Empty when the decision has no skill-eval task."""
    from bench_assets.scorers.skill_eval import parse_grading

    cases: dict[str, tuple[Any, SkillEvalGrading]] = {}
    for tid in sorted({ev.task for ev in doc.decision.evidence}):
        try:
            task = bench.task(tid)
        except Exception:  # noqa: BLE001 - a task removed since the decision: no table row
            continue
        se = task.spec.skill_eval
        if se is not None:
            path = task.oracle_dir / se.grading
            cases[tid] = (task.spec, parse_grading(path.read_bytes(), str(path)))
    if not cases:
        return ""
    records = [r for r in evidence_records(doc, store) if r.task in cases]
    evidence_arms = {r.arm for r in records}
    records += [r for r in others if r.task in cases and r.arm not in evidence_arms]
    arms = bench.config.arms
    without = next((n for n, a in arms.items() if a.skills == "none"), None)
    parts = [
        "\n## Skill-eval cases as `claude plugin eval` would report them\n",
        f"wfbench's verdict: **{doc.decision.decision}** (gate above). The tables below are the "
        "first-party tool's view of the same evidence runs: no significance test, Δ against "
        f"the `{without or '(no skills-none arm)'}` arm (its latest records when the gate did "
        "not read that arm: context, not evidence); errored runs are not scored.\n",
    ]
    for name, arm in arms.items():
        if arm.skills == "none" or not any(r.arm == name for r in records):
            continue
        pe = plugin_eval_document(records, cases, with_arm=name, without_arm=without, root="")
        parts.append(f"\n### with = `{name}`\n\n{plugin_eval_table(pe)}\n")
    agreement = judge_agreement(records)
    if agreement:
        parts.append("\n### Judge agreement with human labels (measured on these runs)\n")
        parts += [f"- {k}: {a}/{n} agree" for k, (a, n) in sorted(agreement.items())]
    return "\n".join(parts)


def judge_agreement(records: Sequence["CellRecord"]) -> dict[str, tuple[int, int]]:
    """Per judge grader: (runs where the judge's decided verdict equals the human label,
    labelled runs with a decided verdict). Measured from the records, never assumed."""
    out: dict[str, tuple[int, int]] = {}
    for r in records:
        for o in r.skill_eval.graders if r.skill_eval is not None else []:
            if o.human_label is None or o.passed is None:
                continue
            agree, total = out.get(f"{r.task}/{o.name}", (0, 0))
            out[f"{r.task}/{o.name}"] = (agree + (o.passed == o.human_label), total + 1)
    return out
