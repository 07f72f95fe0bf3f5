"""The review gate: non-inferiority on weighted F1, blocker recall and clean controls, plus cost."""

import datetime as dt
import random

from bench_assets.config.models import ReviewPolicyConfig
from bench_assets.gate.review import ReviewGateInput, ReviewOutcome, decide_review
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.scorers.review_scoring import Finding, Label, ReviewOutput, score_review

NOW = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
DEFECT = [Label(id="l1", severity="high", path="a.py", line_start=3, line_end=4, category="bug")]


def F(sev: str = "high", line: int = 3, path: str = "a.py", blocking: bool = True) -> Finding:
    return Finding(
        id=f"f{line}{path}",
        severity=sev,  # type: ignore[arg-type]
        path=path,
        line=line,
        end_line=line,
        category="bug",
        scenario="s",
        evidence="e",
        recommendation="r",
        blocking=blocking,
    )


PERFECT = ReviewOutput(verdict="request_changes", findings=(F(),))
NOISY = ReviewOutput(verdict="request_changes", findings=(F(), F(line=40)))  # one FP
SOFT = ReviewOutput(verdict="comment", findings=(F(sev="medium", blocking=False),))
CLEAN_OK = ReviewOutput(verdict="approve", findings=())
CLEAN_NOISY = ReviewOutput(verdict="comment", findings=(F(sev="low", blocking=False),))


def outcomes(
    task: str,
    arm: str,
    reviews: list[ReviewOutput],
    labels: list[Label],
    cost: float | None = 1.0,
    kinds: list[ErrorKind | None] | None = None,
) -> list[ReviewOutcome]:
    out = []
    for i, r in enumerate(reviews):
        kind = kinds[i] if kinds else None
        score = None if kind is ErrorKind.REVIEW_EVIDENCE_INVALID else score_review(r, labels)
        if kind is None and score is not None and not score.oracle_passed:
            kind = ErrorKind.ORACLE_FAILED
        out.append(
            ReviewOutcome(
                task=task,
                arm=arm,
                run=i,
                error_kind=kind,
                score=score,
                cost_usd=cost,
                record_id=f"{task}-{arm}-{i}",
                data_version="0" * 64,
                recorded_at=NOW,
            )
        )
    return out


def decide(outs: list[ReviewOutcome], tasks: list[str], **policy: float) -> str:
    inp = ReviewGateInput(
        policy=ReviewPolicyConfig(**policy),  # type: ignore[arg-type]
        model="claude-sonnet-4-5-20250929",
        incumbent_arm="review",
        candidate_arm="candidate_review",
        tasks=tasks,
        outcomes=outs,
    )
    return decide_review(inp).decision


def pair(
    inc: list[ReviewOutput], cand: list[ReviewOutput], labels=DEFECT, task="d1", ci=1.0, cc=1.0
):
    return outcomes(task, "review", inc, labels, ci) + outcomes(
        task, "candidate_review", cand, labels, cc
    )


def test_equal_reviews_at_equal_cost_keep_the_incumbent() -> None:
    assert decide(pair([PERFECT] * 3, [PERFECT] * 3), ["d1"]) == "keep_incumbent"


def test_equal_quality_and_cheaper_promotes() -> None:
    assert decide(pair([PERFECT] * 3, [PERFECT] * 3, cc=0.8), ["d1"]) == "promote"


def test_better_reviews_at_equal_cost_promote() -> None:
    assert decide(pair([NOISY] * 3, [PERFECT] * 3), ["d1"]) == "promote"


def test_one_wrong_verdict_blocks_promotion_even_when_cheaper() -> None:
    outs = pair([SOFT] * 3, [PERFECT, PERFECT, SOFT], cc=0.5)
    assert decide(outs, ["d1"]) == "keep_incumbent"


def test_lower_blocker_recall_on_one_repeat_is_a_regression() -> None:
    # The candidate found the blocker as a medium on one repeat: its worst repeat counts.
    low = ReviewOutput(verdict="request_changes", findings=(F(sev="medium", blocking=True),))
    assert decide(pair([PERFECT] * 3, [PERFECT, low, PERFECT], cc=0.5), ["d1"]) == "keep_incumbent"


def test_a_noisier_clean_control_is_a_regression() -> None:
    outs = pair([CLEAN_OK] * 3, [CLEAN_NOISY, CLEAN_OK, CLEAN_NOISY], labels=[], task="c1", cc=0.5)
    outs += pair([PERFECT] * 3, [PERFECT] * 3, cc=0.5)
    assert decide(outs, ["c1", "d1"]) == "keep_incumbent"


def test_clean_controls_that_both_pass_allow_a_cheaper_candidate() -> None:
    outs = pair([CLEAN_OK] * 3, [CLEAN_OK] * 3, labels=[], task="c1", cc=0.7)
    outs += pair([PERFECT] * 3, [PERFECT] * 3, cc=0.7)
    assert decide(outs, ["c1", "d1"]) == "promote"


def test_too_few_or_excluded_runs_are_insufficient() -> None:
    assert decide(pair([PERFECT] * 2, [PERFECT] * 2, cc=0.5), ["d1"]) == "insufficient_evidence"
    outs = outcomes("d1", "review", [PERFECT] * 3, DEFECT) + outcomes(
        "d1",
        "candidate_review",
        [PERFECT] * 3,
        DEFECT,
        0.5,
        kinds=[None, ErrorKind.REVIEW_EVIDENCE_INVALID, None],
    )
    assert decide(outs, ["d1"]) == "insufficient_evidence"
    # a planned task where one arm never ran
    assert decide(outcomes("d1", "review", [PERFECT] * 3, DEFECT), ["d1"]) == (
        "insufficient_evidence"
    )
    assert decide([], []) == "insufficient_evidence"


def test_unknown_cost_never_helps_the_candidate() -> None:
    outs = pair([NOISY] * 3, [PERFECT] * 3, cc=None)  # type: ignore[arg-type]
    assert decide(outs, ["d1"]) == "insufficient_evidence"


def test_better_but_much_dearer_keeps_the_incumbent() -> None:
    assert decide(pair([NOISY] * 3, [PERFECT] * 3, cc=1.3), ["d1"]) == "keep_incumbent"
    assert decide(pair([NOISY] * 3, [PERFECT] * 3, cc=1.2), ["d1"]) == "promote"


def test_margins_are_preregistered_settings() -> None:
    worse = ReviewOutput(verdict="request_changes", findings=(F(), F(line=40, sev="low")))
    outs = pair([PERFECT] * 3, [worse] * 3, cc=0.5)  # wF1 0.909 vs 1.0
    assert decide(outs, ["d1"]) == "keep_incumbent"
    assert decide(outs, ["d1"], weighted_f1_margin=0.1) == "promote"


def test_outcome_order_never_changes_the_decision() -> None:
    outs = pair([NOISY] * 3, [PERFECT] * 3) + pair(
        [CLEAN_OK] * 3, [CLEAN_OK] * 3, labels=[], task="c1"
    )
    base = decide(outs, ["d1", "c1"])
    rng = random.Random(5)
    for _ in range(10):
        shuffled = outs[:]
        rng.shuffle(shuffled)
        assert decide(shuffled, ["c1", "d1"]) == base == "promote"


def test_an_overlay_of_the_review_skill_needs_the_review_decision_too(tmp_path) -> None:
    from types import SimpleNamespace

    from bench_assets.decision.documents import DecisionDocument
    from bench_assets.defs.decision import required_reviews
    from bench_assets.tasks.catalog import load_benchmark
    from tests.conftest import make_bench

    root = make_bench(tmp_path / "tasks")
    cfg = (root / "bench.yaml").read_text()
    (root / "bench.yaml").write_text(
        cfg
        + "  review:\n    agent: {adapter: replay, predictions: replays/w.jsonl}\n"
        + "    skills: incumbent\n    kind: review\n"
        + "  candidate_review:\n    agent: {adapter: replay, predictions: replays/w.jsonl}\n"
        + "    skills: candidate\n    kind: review\n    role: candidate\n"
        + "    pairs_with: review\n    phases: [{name: review, expected_skill: review}]\n"
    )
    bench = load_benchmark(root)
    work_overlay = tmp_path / "ov1"
    (work_overlay / "work").mkdir(parents=True)
    (work_overlay / "work" / "SKILL.md").write_text("x")
    review_overlay = tmp_path / "ov2"
    (review_overlay / "review").mkdir(parents=True)
    (review_overlay / "review" / "SKILL.md").write_text("x")
    assert required_reviews(bench, work_overlay) == []
    assert required_reviews(bench, review_overlay) == ["candidate_review"]

    def doc(primary: str, review: str, required: list[str]) -> DecisionDocument:
        return DecisionDocument.model_construct(
            decision=SimpleNamespace(decision=primary),
            review_decisions=[SimpleNamespace(candidate_arm="candidate_review", decision=review)],
            review_required=required,
        )

    assert doc("promote", "keep_incumbent", []).verdict == "promote"  # not its skill
    assert doc("promote", "keep_incumbent", ["candidate_review"]).verdict == "keep_incumbent"
    assert doc("promote", "insufficient_evidence", ["candidate_review"]).verdict == (
        "insufficient_evidence"
    )
    assert doc("promote", "promote", ["candidate_review"]).verdict == "promote"
    assert doc("keep_incumbent", "promote", ["candidate_review"]).verdict == "keep_incumbent"
