"""Gate v3's per-task regression veto (issue 23, item 4): the exact min-p statistic fires on a
task regressed to 0 at 3 vs 3 runs, where v2's Bonferroni rule cannot; it does not fire on A/A
suites more often than its family error; it is preregistered, recorded and explained."""

import json
import random
from fractions import Fraction

import pytest

from bench_assets.config.models import PolicyConfig
from bench_assets.decision.explain import v2_lines
from bench_assets.gate import Decision, decide
from bench_assets.gate.regression import adjusted, attainable
from tests.test_gate import CAND, INC, costs, gate, runs, with_task, world

LAST = PolicyConfig(max_looks=1)


def test_attainable_p_values_are_the_hypergeometric_cdf() -> None:
    # 3 successes over 3 + 3 runs: the candidate has 0..3 of them
    assert attainable(3, 3, 3) == [Fraction(1, 20), Fraction(10, 20), Fraction(19, 20), 1]
    # 6 of 6: only one table, p = 1 — such a task can never fire
    assert attainable(3, 3, 6) == [1]


def test_the_family_error_charges_only_tasks_that_can_reach_the_p() -> None:
    broken = (3, 3, 0, 3)  # p = 1/20
    full = (3, 3, 3, 3)  # cannot produce any p below 1
    assert adjusted([broken] + [full] * 9) == pytest.approx([0.05] + [1.0] * 9)
    # a second task that could reach 1/20 charges its 1/20 too: 1 − 0.95²
    assert adjusted([broken, (2, 3, 1, 3)] + [full] * 8)[0] == pytest.approx(1 - 0.95**2)
    # three such tasks: 1 − 0.95³ > 0.10, so none fires at 0.10
    assert adjusted([broken] * 3)[0] == pytest.approx(1 - 0.95**3)
    # the adjusted p is never below the raw p, and only_below leaves larger ones raw
    assert adjusted([(3, 3, 2, 3), broken], only_below=0.1)[0] == pytest.approx(0.5)


def _regressed(policy: PolicyConfig) -> Decision:
    w = with_task(
        world(10),
        "task-00",
        runs("task-00", INC, "YYY", costs(0.5)),
        runs("task-00", CAND, "NNN", costs(0.35)),
    )
    return decide(gate(w, policy))


def test_a_task_regressed_to_zero_is_vetoed_at_three_runs() -> None:
    d = _regressed(LAST)
    assert d.decision == "keep_incumbent", d.reasons
    s = d.paired_v2
    assert s is not None and s.regression_veto is not None
    v = s.regression_veto
    assert v.method == "min_p" and v.fired == ["task-00"] and s.hard_regressions == ["task-00"]
    assert v.smallest_p == pytest.approx(0.05) and v.adjusted_p == pytest.approx(0.05)
    assert any("hard regression" in r and "min-p" in r for r in d.reasons)
    line = next(x for x in v2_lines(d) if x.startswith("regression veto"))
    assert "exact min-p over 10 task(s)" in line and "fired: task-00" in line
    # v2's Bonferroni rule, preregistered instead, cannot fire on the same evidence (F6)
    b = _regressed(LAST.model_copy(update={"regression_test": "bonferroni"}))
    assert b.paired_v2 is not None and b.paired_v2.regression_veto is not None
    assert b.paired_v2.regression_veto.fired == [] and b.paired_v2.hard_regressions == []


def test_an_aa_suite_is_not_vetoed() -> None:
    # negative control through decide(): every task's candidate resolves like the comparator
    mixed = world(10, ratio=1.0, inc="YNY", cand="YYN")
    d = decide(gate(mixed, LAST))
    assert d.paired_v2 is not None and d.paired_v2.regression_veto is not None
    assert d.paired_v2.regression_veto.fired == [] and "hard_regression" not in {
        f.rule for f in d.findings
    }
    # and over seeded A/A suites, the veto fires on at most its family error (0.10) of them
    rng = random.Random(23)
    fired = 0
    for _ in range(300):
        tables = []
        for _ in range(10):
            p = rng.uniform(0.3, 0.95)
            tables.append(
                (
                    sum(rng.random() < p for _ in range(3)),
                    3,
                    sum(rng.random() < p for _ in range(3)),
                    3,
                )
            )
        fired += any(a <= 0.10 for a in adjusted(tables, only_below=0.10))
    assert fired / 300 <= 0.10


def test_the_rule_is_preregistered_and_a_schema_4_decision_reads_back_as_bonferroni() -> None:
    assert PolicyConfig().regression_test == "min_p"
    d = _regressed(LAST)
    raw = json.loads(d.model_dump_json())
    assert raw["policy"]["regression_test"] == "min_p"
    raw["schema_version"] = 4
    del raw["policy"]["regression_test"]
    del raw["paired_v2"]["regression_veto"]
    back = Decision.model_validate(raw)
    assert back.policy.regression_test == "bonferroni"
    assert back.paired_v2 is not None and back.paired_v2.regression_veto is None
