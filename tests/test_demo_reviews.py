"""The demo's review tasks, review replays and two-phase replays: well formed and as designed.

Pure checks over the shipped files (the cells themselves run in the demo and in
``tests/test_review_cells.py``): every review line parses and scores against its task's labels,
the review gate on the recorded reviews decides ``keep_incumbent`` (same quality, same cost: the
demo's overlays do not touch a review skill), and the two-phase arm's lines hold a plan and the
workflow arm's work.
"""

import datetime as dt
import json

from bench_assets.gate.review import ReviewGateInput, ReviewOutcome, decide_review
from bench_assets.scorers.review_scoring import parse_labels, parse_review_bytes, score_review
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import DEMO_TASKS

REPLAYS = DEMO_TASKS / "replays"
NOW = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def lines(name: str) -> list[dict]:
    text = (REPLAYS / f"{name}.jsonl").read_text(encoding="utf-8")
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def test_the_demo_has_review_tasks_with_a_clean_control() -> None:
    bench = load_benchmark(DEMO_TASKS)
    review_tasks = [t for t in bench.task_ids() if bench.task(t).spec.review is not None]
    assert len(review_tasks) >= 3
    clean = [
        t
        for t in review_tasks
        if not parse_labels((bench.task(t).oracle_dir / "labels.json").read_bytes())
    ]
    assert clean == ["review-clean"]
    kinds = {n: a.kind for n, a in bench.config.arms.items()}
    assert kinds["review"] == kinds["candidate_review"] == "review"


def _scores(arm: str) -> dict[tuple[str, int], object]:
    bench = load_benchmark(DEMO_TASKS)
    out = {}
    for line in lines(arm):
        task = bench.task(line["instance_id"])
        labels = parse_labels((task.oracle_dir / "labels.json").read_bytes())
        review = parse_review_bytes(line["review_output"].encode())
        out[(line["instance_id"], line["run"])] = score_review(review, labels)
    return out


def test_every_review_line_parses_and_scores() -> None:
    for arm in ("review", "candidate_review"):
        scores = _scores(arm)
        assert len(scores) == 9
        assert all(s.verdict_correct for s in scores.values())  # type: ignore[attr-defined]
    inc = _scores("review")
    # the designed imperfections: a missed medium plus a false positive; a downgraded critical
    assert inc[("review-discount", 1)].false_positives == 1  # type: ignore[attr-defined]
    assert inc[("review-retry", 0)].weighted_recall == 0.625  # type: ignore[attr-defined]
    assert inc[("review-clean", 0)].clean_pass  # type: ignore[attr-defined]


def test_the_demo_review_gate_keeps_the_incumbent() -> None:
    bench = load_benchmark(DEMO_TASKS)
    outcomes = []
    for arm in ("review", "candidate_review"):
        scores = _scores(arm)
        for line in lines(arm):
            key = (line["instance_id"], line["run"])
            s = scores[key]
            outcomes.append(
                ReviewOutcome(
                    task=key[0],
                    arm=arm,
                    run=key[1],
                    error_kind=None if s.oracle_passed else "oracle-failed",  # type: ignore[attr-defined,arg-type]
                    score=s,  # type: ignore[arg-type]
                    cost_usd=line["usage"]["cost_usd"],
                    record_id=f"{key}",
                    data_version="x",
                    recorded_at=NOW,
                )
            )
    decision = decide_review(
        ReviewGateInput(
            policy=bench.config.review_policy,
            model=bench.config.model,
            incumbent_arm="review",
            candidate_arm="candidate_review",
            tasks=["review-clean", "review-discount", "review-retry"],
            outcomes=outcomes,
        )
    )
    assert decision.decision == "keep_incumbent"
    assert any("neither better reviews nor cheaper" in r for r in decision.reasons)
    assert decision.cost_ratio is not None and 0.95 < decision.cost_ratio < 1.05


def test_two_phase_replays_hold_a_plan_then_the_workflow_work() -> None:
    work = {(x["instance_id"], x["run"]): x for x in lines("workflow")}
    phased = lines("workflow_planned")
    assert {(x["instance_id"], x["run"]) for x in phased} == set(work)
    empty_plans = []
    for x in phased:
        key = (x["instance_id"], x["run"])
        assert set(x["phases"]) == {"plan", "work"}
        assert x["phases"]["work"]["model_patch"] == work[key]["model_patch"]
        plan = x["phases"]["plan"]["model_patch"]
        if not plan:
            empty_plans.append(key)
        else:
            assert f"+++ b/docs/plans/{key[0]}.md" in plan
    # one recorded plan session wrote no plan: the demo shows phase-artifact-missing
    assert empty_plans == [("paginate-off-by-one", 1)]


def test_review_arms_run_on_review_tasks_only_and_the_progress_total_counts_that() -> None:
    """The planner and evolve's progress total both count a task's cells by ``arms_for``: the
    demo's first generation pays 78 cells, not 8 tasks x 6 arms x 3 runs = 144."""
    bench = load_benchmark(DEMO_TASKS)
    assert bench.arms_for("review-clean") == ["candidate_review", "review"]
    assert bench.arms_for("csv-quoted-fields") == [
        "baseline",
        "candidate_workflow",
        "workflow",
        "workflow_planned",
    ]
    total = sum(bench.config.runs * len(bench.arms_for(t)) for t in bench.task_ids())
    assert total == 78


def test_candidate_arms_by_kind() -> None:
    """The implementation gate (and its pooled comparator history) and the review gate each pick
    their own candidates; with both kinds in one bench, neither sees two candidates."""
    cfg = load_benchmark(DEMO_TASKS).config
    assert cfg.candidate_arms() == ["candidate_review", "candidate_workflow"]
    assert cfg.candidate_arms("implementation") == ["candidate_workflow"]
    assert cfg.candidate_arms("review") == ["candidate_review"]
