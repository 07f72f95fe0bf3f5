"""Gate v3's ``standard_error`` (issue 23, "a variance estimate that is not conservative at 10
tasks"): ``model`` reads the run-level variance through the normal quantile, falls back to the
conservative rule where the run-level variance cannot be estimated (1 run per task), and a
decision stored before schema 6 reads back under the rule it was decided by."""

import json
from statistics import NormalDist

import pytest

from bench_assets.config.models import PolicyConfig
from bench_assets.gate import Decision, decide
from bench_assets.gate.numerics import quantile, t_quantile
from tests.test_gate import CAND, INC, costs, gate, runs, world

MODEL = PolicyConfig(max_looks=1)
CONSERVATIVE = PolicyConfig(max_looks=1, standard_error="conservative")


def test_quantile_is_students_t_or_the_normal_one() -> None:
    assert quantile(0.95, 9) == t_quantile(0.95, 9)
    assert quantile(0.95, None) == pytest.approx(NormalDist().inv_cdf(0.95), abs=1e-12)
    assert quantile(0.95, None) < quantile(0.95, 9)
    with pytest.raises(ValueError):
        quantile(1.0, None)


def _mixed(n: int = 10) -> dict:
    """Cheaper, resolving as well on average but not on every task: both SEs are positive."""
    w = world(n)
    w["task-00"] = runs("task-00", INC, "YYN", costs(0.5)) + runs(
        "task-00", CAND, "YNN", costs(0.4)
    )
    w["task-01"] = runs("task-01", INC, "YNN", costs(0.5)) + runs(
        "task-01", CAND, "YYN", costs(0.4)
    )
    return w


def test_the_model_rule_is_the_run_level_se_through_the_normal_quantile() -> None:
    model = decide(gate(_mixed(), MODEL))
    cons = decide(gate(_mixed(), CONSERVATIVE))
    assert model.paired_v2 is not None and cons.paired_v2 is not None
    rm, rc = model.paired_v2.resolve, cons.paired_v2.resolve
    assert rm is not None and rc is not None
    # the same estimate and the same run-level SE; the model bound is the narrower one
    assert rm.difference.estimate == rc.difference.estimate
    assert rm.se_binomial_floor == rc.se_binomial_floor
    z = NormalDist().inv_cdf(rm.difference.level)
    assert rm.difference.lower == pytest.approx(
        rm.difference.estimate - z * rm.se_binomial_floor, abs=1e-12
    )
    assert rc.difference.lower < rm.difference.lower
    cm, cc = model.paired_v2.cost, cons.paired_v2.cost
    assert cm is not None and cc is not None
    assert cm.log_ratio.upper < cc.log_ratio.upper
    msg = [f.message for f in model.findings if f.rule == "noninferiority"][0]
    assert "normal, run-level SE" in msg


def test_one_run_per_task_falls_back_to_the_conservative_rule() -> None:
    one = {
        t: runs(t, INC, "Y", costs(0.5 + 0.01 * i, 1)) + runs(t, CAND, "Y", costs(0.4, 1))
        for i, t in enumerate(world(10))
    }
    one["task-00"] = runs("task-00", INC, "Y", costs(0.5, 1)) + runs(
        "task-00", CAND, "N", costs(0.4, 1)
    )
    policy = MODEL.model_copy(update={"min_runs": 1})
    m = decide(gate(one, policy))
    c = decide(gate(one, policy.model_copy(update={"standard_error": "conservative"})))
    assert m.paired_v2 is not None and c.paired_v2 is not None
    assert m.paired_v2.resolve == c.paired_v2.resolve
    assert m.paired_v2.cost == c.paired_v2.cost


def test_a_schema_5_decision_reads_back_under_the_conservative_rule() -> None:
    assert PolicyConfig().standard_error == "model"
    d = decide(gate(world(10), MODEL))
    raw = json.loads(d.model_dump_json())
    assert raw["schema_version"] == 7 and raw["policy"]["standard_error"] == "model"
    assert Decision.model_validate(raw).policy.standard_error == "model"
    for version in (4, 5):
        old = {**raw, "schema_version": version}
        old["policy"] = {k: v for k, v in raw["policy"].items() if k != "standard_error"}
        assert Decision.model_validate(old).policy.standard_error == "conservative"
    # another policy is left alone (it does not read the field)
    v1 = json.loads(decide(gate(world(10), PolicyConfig(name="paired_v1"))).model_dump_json())
    v1["schema_version"] = 5
    assert "standard_error" not in Decision.model_validate(v1).policy.model_dump()
