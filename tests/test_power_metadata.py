"""The UI shows the power report next to a gate v3 decision (issue 23, item 5): the report for
the suite the decision was taken on, computed in the pure core (bench_assets/decision/power.py)."""

from bench_assets.config.models import PolicyConfig
from bench_assets.decision.power import decision_report
from bench_assets.defs.decision import _power_metadata
from bench_assets.gate import decide
from tests.test_gate import gate, world
from tests.test_gate_v2 import pooled

ONE_LOOK = PolicyConfig(max_looks=1)


def test_a_v3_decision_carries_the_report_of_its_suite() -> None:
    w = world(10)
    w["task-00"] += pooled("task-00", 9, 0.5)
    d = decide(gate(w, ONE_LOOK))
    r = decision_report(d)
    assert r is not None and r.tasks == 10 and r.first_runs == 3 and r.max_looks == 1
    assert r.comparator_fresh_per_task == 3.0 and r.comparator_old_per_task == 0.9
    md = _power_metadata(d)
    assert md is not None and "what this suite can promise" in str(md.value)
    assert "80 % power" in str(md.value)
    # control: no report for the other policies
    other = decide(gate(world(10), PolicyConfig(name="paired_v2", max_looks=1)))
    assert decision_report(other) is None and _power_metadata(other) is None
