"""Gate v2 (``paired_v2``; the default until issue 23): each issue-13 defect (E1–E9) is built as an
attack or a degenerate world and shown not to promote, next to a control that does. Gate v3, the
default ``paired``, is tested in tests/test_gate_v3.py."""

import datetime as dt
import math

import numpy as np

from bench_assets.config.models import PolicyConfig
from bench_assets.gate import Decision, GateInput, RunOutcome, decide
from bench_assets.kernel.errorkinds import ErrorKind
from tests.test_gate import CAND, INC, NOW, Cells, costs, gate, row, rules, runs, world

ONE_LOOK = PolicyConfig(name="paired_v2", max_looks=1, top_up_runs=2)
"""One look: the gate decides on the planned runs (v2's calibrated point)."""
V2 = PolicyConfig(name="paired_v2", max_looks=2, top_up_runs=2)
"""Two sequential looks (the generation pays the top-ups, tests/test_sequential_looks.py)."""


def v2(w: dict[str, Cells], policy: PolicyConfig = ONE_LOOK, **extra: object) -> Decision:
    return decide(gate(w, policy, **extra))


def pooled(task: str, n: int, base: float, *, resolved: bool = True, drift: float = 0.0) -> Cells:
    """``n`` earlier-generation comparator runs of ``task`` (run numbers from 100)."""
    return [
        RunOutcome(
            task=task,
            arm=INC,
            run=100 + i,
            resolved=resolved,
            error_kind=None if resolved else ErrorKind.ORACLE_FAILED,
            metric=c * (1 + drift),
            reused=False,
            pooled=True,
            generation=f"old{i}",
            record_id=f"{task}-pool-{i}",
            data_version=f"dv-pool-{i}",
            recorded_at=NOW - dt.timedelta(days=7 * (i + 1)),
        )
        for i, c in enumerate(costs(base, n))
    ]


def test_control_ten_tasks_cheaper_promotes_with_statistics() -> None:
    d = v2(world(10))
    assert d.decision == "promote", d.reasons
    assert d.policy_name == "paired_v2" and d.paired_v2 is not None and d.paired is None
    s = d.paired_v2
    assert s.resolve is not None and s.resolve.verdict == "non_inferior"
    assert s.cost is not None and s.cost.verdict == "improved"
    assert s.total_spend.verdict == "within" and s.total_spend.ratio is not None
    assert s.total_spend.ratio < 1
    assert s.looks[-1].action == "decide" and d.next_action == "decide"


def test_e1_ties_do_not_collapse_the_bound() -> None:
    # Every task ties 3/3 vs 3/3: the cluster SD is 0, so v1's bootstrap bound had zero width.
    d = v2(world(5))
    s = d.paired_v2
    assert s is not None and s.resolve is not None
    assert s.resolve.se_cluster == 0.0
    assert s.resolve.se_binomial_floor > 0.05
    # the width is t(0.80, 4) x the floor, not 0: a tie is not proof of equality
    assert s.resolve.difference.lower < -0.10
    tight = v2(world(5), ONE_LOOK.model_copy(update={"v2_resolve_margin": 0.10}))
    assert tight.decision == "insufficient_evidence"
    assert "noninferiority" in rules(tight, "inconclusive")


def test_e1_bound_holds_its_level_at_a_drop_equal_to_the_margin() -> None:
    # 300 worlds with a true drop of exactly the margin: non-inferior at most 1 - level (+ MC).
    rng = np.random.default_rng(7)
    hits = 0
    n_worlds = 300
    for _ in range(n_worlds):
        p = rng.uniform(0.3, 0.95, size=10)
        outs: list[RunOutcome] = []
        for arm, probs in ((INC, p), (CAND, np.clip(p - ONE_LOOK.v2_resolve_margin, 0, 1))):
            res = rng.random((10, 3)) < probs[:, None]
            for t in range(10):
                pattern = "".join("Y" if x else "N" for x in res[t])
                outs += runs(f"t{t}", arm, pattern, costs(0.5 + t * 0.1))
        d = decide(
            GateInput(
                policy=ONE_LOOK,
                model="m",
                incumbent_arm=INC,
                candidate_arm=CAND,
                tasks=[f"t{t}" for t in range(10)],
                outcomes=outs,
                aborted=False,
                now=NOW,
                max_age_days=90,
            )
        )
        assert d.paired_v2 is not None
        hits += d.paired_v2.resolve is not None and d.paired_v2.resolve.verdict == "non_inferior"
    assert hits / n_worlds <= 0.20 + 3 * math.sqrt(0.2 * 0.8 / n_worlds)


def test_e2_veto_is_bonferroni_only() -> None:
    # 3/3 vs 0/3 on one task: exact p = 1/20 > 0.10/10, so the veto does not fire (v1's
    # uncorrected all-vs-none clause did)...
    w = world(10)
    w["task-00"] = runs("task-00", INC, "YYY", costs(0.5)) + runs(
        "task-00", CAND, "NNN", costs(0.3)
    )
    d = v2(w)
    assert "hard_regression" not in rules(d)
    # ...but with the comparator's pooled history (12/12 vs 0/3, p = 1/455) it does.
    w["task-00"] += pooled("task-00", 9, 0.5)
    d = v2(w)
    assert "hard_regression" in rules(d, "keep") and d.decision == "keep_incumbent"


def test_e5_missing_planned_cells_never_pass() -> None:
    w = world(10, inc="YYYYY", cand="YYYYY")
    w["task-03"] = [o for o in w["task-03"] if o.run < 3]  # 3 of 5 planned runs per arm
    d = v2(w, planned_runs={INC: 5, CAND: 5})
    assert d.decision == "insufficient_evidence"
    assert "missing_cells" in rules(d, "insufficient")
    assert not row(d, "task-03").counted


def test_e4_excluded_cell_is_insufficient_and_names_the_retries() -> None:
    w = world(10)
    w["task-01"] = runs("task-01", INC, "YYY", costs(0.6)) + runs(
        "task-01", CAND, "YYX", [0.4, 0.4, None]
    )
    d = v2(w)
    assert d.decision == "insufficient_evidence"
    assert any("after 2 retries" in f.message for f in d.findings if f.rule == "exclusions")


def test_e6_deterministic_costs_are_not_certainty() -> None:
    w = {
        f"t{i}": runs(f"t{i}", INC, "YYY", [1.0] * 3) + runs(f"t{i}", CAND, "YYY", [0.7] * 3)
        for i in range(10)
    }
    d = v2(w)
    assert "zero_variance" in rules(d, "insufficient")
    assert d.decision == "insufficient_evidence"


def test_e7_two_tasks_cannot_promote() -> None:
    d = v2(world(2))
    assert "too_few_tasks" in rules(d, "insufficient")
    d4 = v2(world(4), ONE_LOOK.model_copy(update={"min_counted_tasks": 4}))
    assert "too_few_tasks" not in rules(d4)


def test_e8_total_spend_rising_keeps_the_incumbent() -> None:
    # Nine cheap tasks 40 % cheaper, one huge task 3x dearer: the geometric mean falls, the
    # total rises.
    w = world(9, ratio=0.6)
    w["big"] = runs("big", INC, "YYY", costs(20.0)) + runs("big", CAND, "YYY", costs(60.0))
    d = v2(w)
    s = d.paired_v2
    assert s is not None and s.total_spend.ratio is not None and s.total_spend.ratio > 1
    assert "total_spend" in rules(d, "keep") and d.decision == "keep_incumbent"
    report = v2(w, ONE_LOOK.model_copy(update={"max_total_spend_ratio": None}))
    assert report.paired_v2 is not None and report.paired_v2.total_spend.verdict == "report_only"


def test_e9_breaking_a_mutually_unresolved_task_is_seen() -> None:
    # The comparator never resolves task-00; the candidate does not either: the task counts
    # (preregistered), is listed, and its cost ratio enters the test.
    w = world(10)
    w["task-00"] = runs("task-00", INC, "NNN", costs(0.5)) + runs("task-00", CAND, "NNN", costs(2))
    d = v2(w)
    s = d.paired_v2
    assert s is not None and s.mutually_unresolved == ["task-00"]
    assert row(d, "task-00").counted
    assert "mutually_unresolved" in rules(d, "info")


def _reused_world(drift: float) -> dict[str, Cells]:
    """Identical arms; the comparator's runs 1-2 reused and pooled history, run 0 fresh."""
    w: dict[str, Cells] = {}
    for i in range(10):
        task, base = f"t{i}", 0.5 + 0.1 * i
        fresh = runs(task, INC, "Y", [base])
        old = [
            o.model_copy(update={"run": o.run + 1, "metric": (o.metric or 0) * (1 + drift)})
            for o in runs(task, INC, "YY", costs(base, 2), reused=True, age_days=30)
        ]
        w[task] = fresh + old + pooled(task, 9, base, drift=drift)
        w[task] += runs(task, CAND, "YYY", costs(base))
    return w


def test_drift_is_estimated_and_a_large_one_is_insufficient() -> None:
    d = v2(_reused_world(0.0))
    s = d.paired_v2
    assert s is not None and s.drift.verdict == "within" and s.drift.tasks == 10
    assert s.pooled.pooled_runs == 90 and s.pooled.comparator_runs_per_task == 12
    big = v2(_reused_world(0.5))
    assert big.paired_v2 is not None and big.paired_v2.drift.verdict == "exceeded"
    assert "drift" in rules(big, "insufficient") and big.decision == "insufficient_evidence"


def test_drift_makes_an_unchanged_candidate_look_cheaper_but_not_promoted() -> None:
    # Old comparator evidence 8 % dearer: estimated drift is absorbed into the cost margin.
    d = v2(_reused_world(0.08))
    s = d.paired_v2
    assert s is not None and s.drift.estimate is not None and s.drift.estimate > 0.05
    assert d.decision != "promote"


def test_large_drift_asks_once_to_repay_the_comparator() -> None:
    """Drift beyond the tolerance asks the generation to re-pay the comparator's reused cells
    (and set the pooled history aside), at any look, one look or two; once re-paid, it does not
    ask again and the evidence stays insufficient."""
    for policy in (ONE_LOOK, V2):
        first = v2(_reused_world(0.5), policy)
        assert first.next_action == "repay_comparator"
        assert first.decision == "insufficient_evidence"
        assert first.paired_v2 is not None
        assert [lk.action for lk in first.paired_v2.looks] == ["repay_comparator"]
        again = v2(
            _reused_world(0.5), policy, comparator_repaid=True, prior_looks=first.paired_v2.looks
        )
        assert again.next_action == "decide" and again.decision == "insufficient_evidence"
    # Negative control: no drift, no re-payment.
    assert v2(_reused_world(0.0), V2).next_action != "repay_comparator"


def test_reused_evidence_without_a_fresh_run_is_insufficient() -> None:
    w = {
        t: [o.model_copy(update={"reused": True}) if o.arm == INC else o for o in cells]
        for t, cells in world(10).items()
    }
    d = v2(w)
    assert d.paired_v2 is not None and d.paired_v2.drift.verdict == "unmeasured"
    assert "drift" in rules(d, "insufficient")


def test_pooled_history_is_capped_and_can_be_turned_off() -> None:
    w = _reused_world(0.0)
    capped = v2(w, ONE_LOOK.model_copy(update={"max_pooled_runs": 4}))
    assert capped.paired_v2 is not None and capped.paired_v2.pooled.pooled_runs == 40
    off = v2(w, ONE_LOOK.model_copy(update={"pooled_history": False}))
    assert off.paired_v2 is not None and off.paired_v2.pooled.pooled_runs == 0


def test_sequential_top_up_then_decide_records_every_look() -> None:
    # 10 tasks, cheaper, but one task lost a run: look 1 of 2 is inconclusive -> top up.
    w = world(10)
    for t in ("task-00", "task-01"):
        w[t] = runs(t, INC, "YYY", costs(0.5)) + runs(t, CAND, "YNN", costs(0.35))
    first = decide(gate(w, V2))
    assert first.next_action == "top_up" and first.decision == "insufficient_evidence"
    assert "sequential" in rules(first)
    assert first.paired_v2 is not None
    looks = first.paired_v2.looks
    assert [lk.action for lk in looks] == ["top_up"]
    w2 = world(10, cand="YYYYY")
    for t in ("task-00", "task-01"):
        w2[t] = runs(t, INC, "YYY", costs(0.5)) + runs(t, CAND, "YNNYY", costs(0.35, 5))
    second = decide(gate(w2, V2, look=2, prior_looks=looks))
    assert second.next_action == "decide"
    assert second.paired_v2 is not None
    assert [lk.look for lk in second.paired_v2.looks] == [1, 2]
    assert second.paired_v2.looks[-1].candidate_runs_per_task == 5


def test_futility_stops_an_unpromising_candidate() -> None:
    w = world(10, ratio=0.97)
    for t in ("task-00", "task-01"):
        w[t] = runs(t, INC, "YYY", costs(0.5)) + runs(t, CAND, "YNN", costs(0.5))
    d = decide(gate(w, V2))
    assert d.next_action == "decide"
    assert "futility" in rules(d, "keep") and d.decision == "keep_incumbent"


def test_decision_round_trips() -> None:
    d = v2(_reused_world(0.0))
    assert Decision.model_validate_json(d.model_dump_json()) == d
