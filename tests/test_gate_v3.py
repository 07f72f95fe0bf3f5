"""Gate v3 (``paired``, the default; issue 23): one margin and no ignored settings, the
group-sequential looks, the drift-robust cost test and the last look that decides — each next to a
control that passes."""

import datetime as dt
import json
import math

import pytest
import yaml
from pydantic import ValidationError

from bench_assets.config.models import POLICY_READS, PolicyConfig
from bench_assets.gate import Decision, RunOutcome, decide
from bench_assets.gate.sequential import boundaries, crossing, nominal, spent
from bench_assets.kernel.errorkinds import ErrorKind
from tests.test_gate import CAND, INC, NOW, REPO, Cells, costs, gate, rules, runs, world
from tests.test_gate_v2 import pooled

V3 = PolicyConfig()
LAST = PolicyConfig(max_looks=1)
"""One look, which is the last: the gate must answer."""


# ---------------------------------------------------------------------------------------------
# F5: one margin, and a setting the policy ignores is an error


def test_the_default_policy_is_v3_and_reads_the_one_margin() -> None:
    assert V3.name == "paired" and V3.resolve_margin == 0.10
    d = decide(gate(world(10), V3))
    assert d.paired_v2 is not None and d.paired_v2.gate_version == 3
    assert d.paired_v2.resolve is not None and d.paired_v2.resolve.margin == V3.resolve_margin
    # The margin is the one the user states: a different resolve_margin moves the bound's margin.
    wide = decide(gate(world(10), PolicyConfig(resolve_margin=0.2)))
    assert wide.paired_v2 is not None and wide.paired_v2.resolve is not None
    assert wide.paired_v2.resolve.margin == 0.2


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"v2_resolve_margin": 0.12}, "v2_resolve_margin (the paired policy reads resolve_margin)"),
        ({"drift_tolerance": 0.05}, "drift_tolerance"),
        ({"seed": 1}, "seed"),
        ({"confidence": 0.9}, "confidence"),
        ({"name": "paired_v2", "resolve_error": 0.2}, "resolve_error"),
        ({"name": "strict", "max_looks": 2}, "max_looks"),
        ({"name": "paired_v1", "drift_prior_sd": 0.1}, "drift_prior_sd"),
    ],
)
def test_a_setting_the_policy_does_not_read_is_an_error(fields: dict, named: str) -> None:
    with pytest.raises(ValidationError, match="does not read") as e:
        PolicyConfig.model_validate(fields)
    assert named in str(e.value)


def test_settings_the_policy_reads_and_round_trips_are_accepted() -> None:
    # negative control of the test above: every field a policy reads may be set
    PolicyConfig.model_validate({"resolve_margin": 0.08, "resolve_error": 0.1, "max_looks": 2})
    PolicyConfig.model_validate({"name": "paired_v2", "v2_resolve_margin": 0.15, "max_looks": 1})
    PolicyConfig.model_validate({"name": "paired_v1", "resolve_margin": 0.2, "seed": 3})
    for name in POLICY_READS:
        p = PolicyConfig.model_validate({"name": name})
        assert PolicyConfig.model_validate(p.model_dump()) == p
    assert set(POLICY_READS["paired"]) <= set(PolicyConfig.model_fields)
    shipped = yaml.safe_load((REPO / "tasks" / "bench.yaml").read_text())["policy"]
    assert PolicyConfig.model_validate(shipped).resolve_margin == shipped["resolve_margin"]


def test_a_stored_v2_decision_reads_back_under_the_rules_it_was_decided_by() -> None:
    old = decide(gate(world(10), PolicyConfig(name="paired_v2", max_looks=1, top_up_runs=2)))
    raw = json.loads(old.model_dump_json())
    raw["schema_version"] = 3
    raw["policy_name"] = "paired"
    # as schema 3 stored it: the v2 rules under the name paired, a seed it ignored, old defaults
    raw["policy"] = {
        **{k: v for k, v in raw["policy"].items() if k in POLICY_READS["paired_v2"]},
        "name": "paired",
        "v2_resolve_margin": 0.15,
        "seed": 20261129,
        "confidence": 0.95,
    }
    back = Decision.model_validate(raw)
    assert back.policy_name == "paired_v2" and back.policy.name == "paired_v2"
    assert back.policy.v2_resolve_margin == 0.15 and back.policy.max_looks == 1
    assert back.paired_v2 is not None and back.paired_v2.gate_version == 2
    # a current decision is read as written (no migration): v3 stays v3
    new = decide(gate(world(10), V3))
    assert Decision.model_validate_json(new.model_dump_json()) == new


# ---------------------------------------------------------------------------------------------
# the group-sequential design


def test_lan_demets_obrien_fleming_boundaries_match_the_published_values() -> None:
    # Jennison & Turnbull table: four equally spaced looks, one-sided 0.025
    b = boundaries([0.25, 0.5, 0.75, 1.0], 0.025, "obrien_fleming")
    assert [round(x, 2) for x in b] == [4.33, 2.96, 2.36, 2.01]
    up, _ = crossing([0.25, 0.5, 0.75, 1.0], b, [-math.inf] * 4, 0.0)
    assert sum(up) == pytest.approx(0.025, abs=2e-4)
    assert spent(0.025, 1.0, "obrien_fleming") == 0.025
    # one look is the fixed-sample test
    assert nominal([1.0], 0.05, "obrien_fleming") == pytest.approx(0.05, abs=1e-9)


def _inconclusive(n: int = 10) -> dict[str, Cells]:
    """Cheaper, but one task lost two runs: the resolve bound cannot show non-inferiority yet,
    nor that the candidate resolves less at all (two such tasks cross the futility boundary)."""
    w = world(n)
    for t in ("task-00",):
        w[t] = runs(t, INC, "YYY", costs(0.5)) + runs(t, CAND, "YNN", costs(0.35))
    return w


def test_an_early_look_tops_up_and_the_last_look_answers() -> None:
    first = decide(gate(_inconclusive(), V3))
    assert first.next_action == "top_up" and first.decision == "insufficient_evidence"
    assert first.paired_v2 is not None and first.paired_v2.sequential is not None
    lk = first.paired_v2.looks[-1]
    assert lk.action == "top_up" and lk.information_resolve is not None
    assert 0 < lk.information_resolve < 1 and lk.alpha_resolve < V3.resolve_error
    # The same evidence at the design's last look: not shown is an answer (keep), so a later
    # generation cannot re-test the candidate on a fresh error budget.
    last = decide(gate(_inconclusive(), LAST))
    assert last.next_action == "decide" and last.decision == "keep_incumbent"
    assert last.paired_v2 is not None and last.paired_v2.looks[-1].alpha_resolve == pytest.approx(
        LAST.resolve_error, abs=1e-9
    )
    # control: a clean candidate passes at the last look
    assert decide(gate(world(10), LAST)).decision == "promote"


def test_futility_stops_a_candidate_that_resolves_less() -> None:
    w = world(10, inc="YYY", cand="NNN")
    d = decide(gate(w, V3))
    assert d.next_action == "decide" and d.decision == "keep_incumbent"
    assert "futility" in rules(d, "keep")
    off = decide(gate(w, V3.model_copy(update={"futility_error": 0.0})))
    assert "futility" not in rules(off)


# ---------------------------------------------------------------------------------------------
# F4: the cost test is robust to drift at every size


def _drift_world(n: int, drift: float, ratio: float = 1.0) -> dict[str, Cells]:
    """Identical arms (or the candidate at ``ratio``), the comparator's run 0 a fresh gate
    canary, runs 1-2 reused and 9 pooled, the old ones ``1 + drift`` dearer."""
    w: dict[str, Cells] = {}
    for i in range(n):
        task, base = f"t{i:03d}", 0.5 + 0.01 * i
        jitter = (0.97, 1.0, 1.03)[i % 3]
        fresh = runs(task, INC, "Y", [base * jitter])
        old = [
            o.model_copy(update={"run": o.run + 1, "metric": (o.metric or 0) * (1 + drift)})
            for o in runs(task, INC, "YY", costs(base, 2), reused=True, age_days=30)
        ]
        w[task] = fresh + old + pooled(task, 9, base, drift=drift)
        w[task] += runs(task, CAND, "YYY", costs(base * ratio / jitter))
    return w


@pytest.mark.parametrize("n", [10, 50, 200])
def test_old_evidence_that_drifted_does_not_make_an_equal_candidate_cheaper(n: int) -> None:
    d = decide(gate(_drift_world(n, 0.10), LAST))
    s = d.paired_v2
    assert s is not None and s.cost is not None and s.cost_weight is not None
    assert s.cost.verdict != "improved" and d.decision != "promote"
    # what pooling everything would have claimed: the drift read as a saving
    naive = decide(gate(_drift_world(n, 0.10), LAST.model_copy(update={"drift_prior_sd": 0.0})))
    assert naive.paired_v2 is not None and naive.paired_v2.cost is not None
    assert naive.paired_v2.cost.improvement.estimate > s.cost.improvement.estimate
    # the weight on the fresh canaries grows with the suite
    assert 0 < s.cost_weight.weight_fresh <= 1


def test_the_fresh_weight_grows_with_the_suite_and_a_real_saving_still_promotes() -> None:
    weights = []
    for n in (10, 50, 200):
        d = decide(gate(_drift_world(n, 0.0, ratio=0.7), LAST))
        assert d.decision == "promote", d.reasons
        assert d.paired_v2 is not None and d.paired_v2.cost_weight is not None
        weights.append(d.paired_v2.cost_weight.weight_fresh)
    assert weights == sorted(weights) and weights[-1] > weights[0]


def test_large_drift_still_asks_once_to_repay_the_comparator() -> None:
    first = decide(gate(_drift_world(10, 0.5, ratio=0.9), V3))
    assert first.next_action == "repay_comparator" and first.decision == "insufficient_evidence"
    assert first.paired_v2 is not None
    again = decide(
        gate(
            _drift_world(10, 0.5, ratio=0.9),
            V3,
            comparator_repaid=True,
            prior_looks=first.paired_v2.looks,
        )
    )
    assert again.next_action != "repay_comparator"
    assert decide(gate(_drift_world(10, 0.0, ratio=0.9), V3)).next_action != "repay_comparator"


def test_old_evidence_without_any_fresh_run_is_insufficient() -> None:
    w = {
        t: [o.model_copy(update={"reused": True}) if o.arm == INC else o for o in cells]
        for t, cells in world(10).items()
    }
    d = decide(gate(w, V3))
    assert d.paired_v2 is not None and d.paired_v2.drift.verdict == "unmeasured"
    assert "drift" in rules(d, "insufficient") and d.decision == "insufficient_evidence"


# ---------------------------------------------------------------------------------------------
# F6: the per-task veto, and what it can and cannot see


def _broken_task(cand: str, pool: int = 0) -> dict[str, Cells]:
    w = world(10, cand="Y" * len(cand))
    w["task-00"] = runs("task-00", INC, "YYY", costs(0.5)) + runs(
        "task-00", CAND, cand, costs(0.35, len(cand))
    )
    if pool:
        w["task-00"] += pooled("task-00", pool, 0.5)
    return w


def test_the_bonferroni_veto_needs_pooled_history_the_min_p_veto_does_not() -> None:
    bonf = LAST.model_copy(update={"regression_test": "bonferroni"})
    # v2's rule: 3/3 vs 0/3 (p = 1/20) and 3/3 vs 0/6 (p = 1/84) never reach 0.10/10
    for cand in ("NNN", "NNNNNN"):
        assert "hard_regression" not in rules(decide(gate(_broken_task(cand), bonf)))
    # with the comparator's pooled history, 12/12 vs 0/6 (p = 1/18564) is vetoed
    at6 = decide(gate(_broken_task("NNNNNN", pool=9), bonf))
    assert "hard_regression" in rules(at6, "keep") and at6.decision == "keep_incumbent"
    # the default exact min-p veto fires on both without history (every other task is 3/3 vs
    # 3/3, which cannot produce a small p, so the family error is the broken task's p alone)
    for cand in ("NNN", "NNNNNN"):
        d = decide(gate(_broken_task(cand), LAST))
        assert "hard_regression" in rules(d, "keep") and d.decision == "keep_incumbent"


def test_cells_of_the_candidate_read_through_missing_and_excluded_rules() -> None:
    w = world(10)
    w["task-02"] = runs("task-02", INC, "YYY", costs(0.5)) + [
        RunOutcome(
            task="task-02",
            arm=CAND,
            run=0,
            resolved=False,
            error_kind=ErrorKind.INFRA_ERROR,
            metric=None,
            reused=False,
            generation="g2",
            record_id="x",
            data_version="x",
            recorded_at=NOW - dt.timedelta(days=1),
        )
    ]
    d = decide(gate(w, V3))
    assert d.decision == "insufficient_evidence" and d.next_action == "decide"


# ---------------------------------------------------------------------------------------------
# the power report, before any money is spent


def test_the_power_report_says_plainly_what_a_small_suite_cannot_promise() -> None:
    from bench_assets.decision.power import power_report, report_lines

    small = power_report(V3, 10, 3, 1.0, 11.0)
    assert small.power_cheaper20 < 0.8 and small.max_candidate_cells == 60
    assert small.tasks_for_80_20 is not None and 15 <= small.tasks_for_80_20 <= 100
    text = "\n".join(report_lines(small))
    assert "cannot promise 80 % power" in text and f"about {small.tasks_for_80_20} tasks" in text
    # control: a large suite can, and says so
    large = power_report(V3, 60, 1, 1.0, 9.0)
    assert large.power_cheaper20 >= 0.8 and large.promote_worse10 <= 0.2
    assert "met at this size" in "\n".join(report_lines(large))
    # no pooled history costs power: the report sees it
    bare = power_report(V3, 10, 3, 3.0, 0.0)
    assert bare.power_cheaper20 < small.power_cheaper20


def test_the_power_report_names_the_lever_a_small_suite_has_one_more_fresh_canary() -> None:
    """At 10 tasks the cost test is what one canary per task starves (README, "The ceiling for a
    gate that holds drift"): the report prices a second one, and only where a run is reused."""
    from bench_assets.decision.power import power_report, report_lines

    small = power_report(V3, 10, 3, 1.0, 11.0, comparator_reused_per_task=2.0)
    two = power_report(V3, 10, 3, 2.0, 10.0)
    assert small.power_one_more_canary == two.power_cheaper20  # the same design, one run fresh
    assert small.power_one_more_canary is not None
    assert small.power_one_more_canary > small.power_cheaper20 + 0.03  # measured: 49.6 → 57.1 %
    text = "\n".join(report_lines(small))
    assert "one more fresh gate canary per task" in text and "10 more comparator cells" in text
    # controls: nothing reused, nothing to convert; a suite that already promises 80 %, no line
    bare = power_report(V3, 10, 3, 3.0, 0.0)
    assert bare.power_one_more_canary is None
    assert "gate canary" not in "\n".join(report_lines(bare))
    large = power_report(V3, 60, 1, 1.0, 9.0, comparator_reused_per_task=1.0)
    assert large.power_cheaper20 >= 0.8
    assert "gate canary" not in "\n".join(report_lines(large))
