"""The review gate: a candidate review arm against its incumbent review arm (pure, deterministic).

Review arms are judged on the quality of their reviews (seed-system §13 scores), not on
resolution — almost every review is ``oracle-failed`` because a perfect review is rare. The rules
are the original harness's ``evaluate_review_candidate`` (seed-system §9), with the margins and
a cost rule made explicit and preregistered in ``bench.yaml`` (``review_policy``).

Per planned review task (sorted by id), each arm's valid repeats (error kind not excluded) are
folded by :func:`~bench_assets.scorers.review_scoring.reduce_scores` (median; ``min`` for blocker
recall; ``all()`` for the verdict and clean-control flags; a metric is unknown unless every repeat
has it). The task's rules, in order:

* **evidence** (→ insufficient_evidence): both arms present; ≥ ``min_runs`` valid runs each,
  equally many, and no excluded run; the values the task needs known on both sides (clean control:
  false positives and clean pass; defect task: weighted F1 and false positives); the candidate's
  verdict flag known; blocker recall known on both sides or on neither;
* **regressions** (→ keep_incumbent): a wrong verdict on any candidate repeat; candidate blocker
  recall < incumbent − ``blocker_recall_margin``; on a clean control, more false positives than the
  incumbent, or losing the incumbent's clean pass; on a defect task, weighted F1 + 1e-9 <
  incumbent − ``weighted_f1_margin``;
* **quality improvement**: on a defect task, weighted F1 ≥ incumbent + ``min_improvement``.

**Cost** over the tasks whose evidence is complete: each arm's median cost per task; the ratio is
the geometric mean of candidate / incumbent. Unknown on any task (or an incumbent cost of 0) makes
it unknown — and unknown never helps the candidate. Ratio > 1 + ``max_cost_regression`` →
keep_incumbent; ratio ≤ 1 − ``min_cost_improvement`` → a cost improvement.

**Integrity**: review cells are graded against hidden labels, not by the test runner, so today no
review cell can be ``grader-tampered``; should one ever carry that kind, any such candidate cell
is a ``veto`` (as in :mod:`bench_assets.gate.integrity`): keep_incumbent before every other rule.

Decision: a veto → keep_incumbent; else an aborted generation, an unnamed model, no planned
task, or any insufficiency → insufficient_evidence; else any regression → keep_incumbent; else a
quality improvement with a known, tolerated cost, or a cost improvement → promote; a quality
improvement whose cost is unknown → insufficient_evidence; no improvement → keep_incumbent. Every
review task is gated.
"""

import datetime as dt
import math
import statistics
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bench_assets.config.models import ReviewPolicyConfig
from bench_assets.kernel.errorkinds import ErrorKind, is_excluded
from bench_assets.scorers.review_scoring import ReviewScore, ReviewSummary, reduce_scores

SCHEMA_VERSION = 1
_EPS = 1e-9
ReviewVerdict = Literal["promote", "keep_incumbent", "insufficient_evidence"]
ReviewEffect = Literal["veto", "insufficient", "keep", "improve", "info"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReviewOutcome(_M):
    """One review cell, as the gate sees it."""

    task: str
    arm: str
    run: int
    error_kind: ErrorKind | None
    score: ReviewScore | None
    cost_usd: float | None
    record_id: str
    data_version: str
    recorded_at: dt.datetime
    reused: bool = False
    generation: str | None = None


class ReviewGateInput(_M):
    """Everything the review gate decides from (stored beside the decision)."""

    schema_version: Literal[1] = 1
    policy: ReviewPolicyConfig
    model: str
    incumbent_arm: str
    candidate_arm: str
    tasks: list[str]
    outcomes: list[ReviewOutcome]
    aborted: bool = False


class ReviewFinding(_M):
    """One rule that fired."""

    rule: str
    effect: ReviewEffect
    task: str | None
    message: str


class ReviewArmRow(_M):
    """One arm on one task: run counts, the folded review metrics and the median cost."""

    runs: int
    valid_runs: int
    excluded_runs: int
    review: ReviewSummary | None
    median_cost_usd: float | None


class ReviewTaskRow(_M):
    """One task of the review decision."""

    task: str
    clean_control: bool | None
    incumbent: ReviewArmRow
    candidate: ReviewArmRow
    outcome: ReviewEffect | Literal["pass"]
    """The task's worst effect: insufficient, keep, improve, or pass (non-inferior)."""


class ReviewDecision(_M):
    """The review gate's verdict for one candidate review arm."""

    schema_version: Literal[1] = 1
    decision: ReviewVerdict
    incumbent_arm: str
    candidate_arm: str
    policy: ReviewPolicyConfig
    model: str
    aborted: bool
    reasons: list[str]
    findings: list[ReviewFinding]
    tasks: list[ReviewTaskRow]
    cost_ratio: float | None
    """Geometric mean of candidate / incumbent median cost over complete tasks (None: unknown)."""
    evidence: list[ReviewOutcome]


def _arm_row(outcomes: list[ReviewOutcome]) -> ReviewArmRow:
    valid = [o for o in outcomes if not is_excluded(o.error_kind)]
    costs = [o.cost_usd for o in valid]
    known = [c for c in costs if c is not None]
    median_cost = statistics.median(known) if valid and len(known) == len(costs) else None
    return ReviewArmRow(
        runs=len(outcomes),
        valid_runs=len(valid),
        excluded_runs=len(outcomes) - len(valid),
        review=reduce_scores([o.score for o in valid]) if valid else None,
        median_cost_usd=median_cost,
    )


def _check_task(
    task: str, inc: ReviewArmRow, cand: ReviewArmRow, policy: ReviewPolicyConfig
) -> tuple[list[ReviewFinding], bool | None]:
    """The task's findings and whether it is a clean control (None: unknown)."""
    out: list[ReviewFinding] = []

    def add(rule: str, effect: ReviewEffect, message: str) -> None:
        out.append(ReviewFinding(rule=rule, effect=effect, task=task, message=f"{task}: {message}"))

    if inc.runs == 0 or cand.runs == 0:
        missing = "incumbent" if inc.runs == 0 else "candidate"
        add("arm_missing", "insufficient", f"the {missing} arm has no review cell.")
        return out, None
    if min(inc.valid_runs, cand.valid_runs) < policy.min_runs:
        add(
            "min_runs",
            "insufficient",
            f"valid runs {inc.valid_runs} (incumbent) / {cand.valid_runs} (candidate), "
            f"{policy.min_runs} required.",
        )
    if inc.excluded_runs or cand.excluded_runs:
        add(
            "excluded",
            "insufficient",
            f"{inc.excluded_runs + cand.excluded_runs} excluded run(s) (unusable review evidence).",
        )
    if inc.valid_runs != cand.valid_runs:
        add("unequal_runs", "insufficient", "the arms have unequal valid runs.")
    if out:
        return out, None
    ri, rc = inc.review, cand.review
    if ri is None or rc is None:
        add("unscored", "insufficient", "a valid run has no review score.")
        return out, None
    clean = ri.clean_control
    if clean is None or rc.clean_control != clean:
        add("clean_unknown", "insufficient", "whether the task is a clean control is unknown.")
        return out, None
    needed = ("false_positives", "clean_pass") if clean else ("weighted_f1", "false_positives")
    if any(getattr(r, k) is None for r in (ri, rc) for k in needed):
        add("values_missing", "insufficient", f"{' and '.join(needed)} not known on both arms.")
        return out, clean
    if rc.verdict_correct is None:
        add("verdict_unknown", "insufficient", "the candidate's verdicts are not all known.")
        return out, clean
    if not rc.verdict_correct:
        add("wrong_verdict", "keep", "the candidate gave a wrong verdict on at least one repeat.")
    if (ri.blocker_recall is None) != (rc.blocker_recall is None):
        add("blocker_one_side", "insufficient", "blocker recall is known on one arm only.")
        return out, clean
    if ri.blocker_recall is not None and rc.blocker_recall is not None:
        if rc.blocker_recall + _EPS < ri.blocker_recall - policy.blocker_recall_margin:
            add(
                "blocker_recall",
                "keep",
                f"blocker recall {rc.blocker_recall:.3f} below the incumbent's "
                f"{ri.blocker_recall:.3f}.",
            )
    assert ri.false_positives is not None and rc.false_positives is not None
    if clean:
        if rc.false_positives > ri.false_positives:
            add(
                "clean_false_positives",
                "keep",
                f"clean control: {rc.false_positives:g} false positive(s) vs the incumbent's "
                f"{ri.false_positives:g}.",
            )
        if ri.clean_pass and not rc.clean_pass:
            add("clean_pass", "keep", "clean control: the incumbent passed it, the candidate not.")
        return out, clean
    assert ri.weighted_f1 is not None and rc.weighted_f1 is not None
    if rc.weighted_f1 + _EPS < ri.weighted_f1 - policy.weighted_f1_margin:
        add(
            "weighted_f1",
            "keep",
            f"weighted F1 {rc.weighted_f1:.3f} below the incumbent's {ri.weighted_f1:.3f}.",
        )
    elif rc.weighted_f1 + _EPS >= ri.weighted_f1 + policy.min_improvement:
        add(
            "weighted_f1_gain",
            "improve",
            f"weighted F1 {rc.weighted_f1:.3f} vs the incumbent's {ri.weighted_f1:.3f}.",
        )
    return out, clean


def _cost_ratio(rows: list[tuple[ReviewArmRow, ReviewArmRow]]) -> float | None:
    logs = []
    for inc, cand in rows:
        if inc.median_cost_usd is None or cand.median_cost_usd is None:
            return None
        if inc.median_cost_usd <= 0 or cand.median_cost_usd <= 0:
            return None
        logs.append(math.log(cand.median_cost_usd / inc.median_cost_usd))
    return round(math.exp(sum(logs) / len(logs)), 6) if logs else None


def decide_review(inp: ReviewGateInput) -> ReviewDecision:
    """Decide whether the candidate review arm replaces the incumbent (see module docstring)."""
    policy = inp.policy
    findings: list[ReviewFinding] = []
    if inp.aborted:
        findings.append(
            ReviewFinding(
                rule="aborted",
                effect="insufficient",
                task=None,
                message="generation aborted; partial evidence cannot promote.",
            )
        )
    if not inp.model.strip():
        findings.append(
            ReviewFinding(
                rule="model_unnamed",
                effect="insufficient",
                task=None,
                message="the benchmark model is not named.",
            )
        )
    if not inp.tasks:
        findings.append(
            ReviewFinding(
                rule="no_tasks",
                effect="insufficient",
                task=None,
                message="no planned review task.",
            )
        )
    tampered = sorted(
        (o for o in inp.outcomes if o.error_kind is ErrorKind.GRADER_TAMPERED),
        key=lambda o: (o.task, o.arm, o.run),
    )
    for arm, effect in ((inp.candidate_arm, "veto"), (inp.incumbent_arm, "info")):
        cells = [o for o in tampered if o.arm == arm]
        if cells:
            named = ", ".join(f"{o.task} {o.arm}.r{o.run} (record {o.record_id})" for o in cells)
            findings.append(
                ReviewFinding(
                    rule="grader_tampered",
                    effect=effect,  # type: ignore[arg-type]
                    task=None,
                    message=(
                        f"integrity veto: {len(cells)} candidate review cell(s) forged their "
                        f"grading (grader-tampered): {named}."
                        if effect == "veto"
                        else f"integrity: {len(cells)} incumbent review cell(s) grader-tampered: "
                        f"{named}."
                    ),
                )
            )
    rows: list[ReviewTaskRow] = []
    complete: list[tuple[ReviewArmRow, ReviewArmRow]] = []
    for task in sorted(inp.tasks):
        inc = _arm_row([o for o in inp.outcomes if o.task == task and o.arm == inp.incumbent_arm])
        cand = _arm_row([o for o in inp.outcomes if o.task == task and o.arm == inp.candidate_arm])
        task_findings, clean = _check_task(task, inc, cand, policy)
        findings.extend(task_findings)
        effects = {f.effect for f in task_findings}
        outcome: ReviewEffect | Literal["pass"] = next(
            (e for e in ("insufficient", "keep", "improve") if e in effects), "pass"
        )  # type: ignore[assignment]
        if "insufficient" not in effects:
            complete.append((inc, cand))
        rows.append(
            ReviewTaskRow(
                task=task, clean_control=clean, incumbent=inc, candidate=cand, outcome=outcome
            )
        )
    ratio = _cost_ratio(complete)
    cost_improved = False
    if ratio is None:
        findings.append(
            ReviewFinding(
                rule="cost_unknown",
                effect="info",
                task=None,
                message="cost ratio unknown (a median cost is unmeasured or zero).",
            )
        )
    elif ratio > 1 + policy.max_cost_regression:
        findings.append(
            ReviewFinding(
                rule="cost_regression",
                effect="keep",
                task=None,
                message=f"candidate costs {ratio:.3f}× the incumbent (geometric mean), above "
                f"the tolerated {1 + policy.max_cost_regression:.2f}×.",
            )
        )
    elif ratio <= 1 - policy.min_cost_improvement:
        cost_improved = True
        findings.append(
            ReviewFinding(
                rule="cost_improvement",
                effect="improve",
                task=None,
                message=f"candidate costs {ratio:.3f}× the incumbent (geometric mean).",
            )
        )
    else:
        findings.append(
            ReviewFinding(
                rule="cost",
                effect="info",
                task=None,
                message=f"candidate costs {ratio:.3f}× the incumbent (geometric mean).",
            )
        )
    effects = {f.effect for f in findings}
    quality_improved = any(f.rule == "weighted_f1_gain" for f in findings)
    decision: ReviewVerdict
    if "veto" in effects:
        decision = "keep_incumbent"
    elif "insufficient" in effects:
        decision = "insufficient_evidence"
    elif "keep" in effects:
        decision = "keep_incumbent"
    elif cost_improved or (quality_improved and ratio is not None):
        decision = "promote"
    elif quality_improved:
        decision = "insufficient_evidence"
        findings.append(
            ReviewFinding(
                rule="cost_unknown_for_gain",
                effect="insufficient",
                task=None,
                message="quality improved, but the cost cannot be checked.",
            )
        )
    else:
        findings.append(
            ReviewFinding(
                rule="no_improvement",
                effect="info",
                task=None,
                message="non-inferior, but neither better reviews nor cheaper.",
            )
        )
        decision = "keep_incumbent"
    decisive = {
        "insufficient_evidence": ("insufficient",),
        "keep_incumbent": ("veto", "keep", "info"),
        "promote": ("improve",),
    }[decision]
    headline = (
        f"{decision} (review policy, {inp.candidate_arm} vs {inp.incumbent_arm}, "
        f"{len(inp.tasks)} review task(s))."
    )
    return ReviewDecision(
        decision=decision,
        incumbent_arm=inp.incumbent_arm,
        candidate_arm=inp.candidate_arm,
        policy=policy,
        model=inp.model,
        aborted=inp.aborted,
        reasons=[
            headline,
            *[f.message for f in findings if f.effect in decisive],
            *[f.message for f in findings if f.effect not in decisive],
        ],
        findings=findings,
        tasks=rows,
        cost_ratio=ratio,
        evidence=sorted(inp.outcomes, key=lambda o: (o.task, o.arm, o.run)),
    )
