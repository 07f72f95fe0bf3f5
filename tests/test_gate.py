"""The promotion gate: every rule has a case built to trip it, next to a control that passes.

Worlds are built from run patterns: ``Y`` resolved, ``N`` oracle failed (a valid negative), ``S``
skill not invoked (valid negative), ``X`` infra error (excluded).
"""

import datetime as dt
import json
import math
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from bench_assets.config.models import PolicyConfig
from bench_assets.gate import (
    CanaryPair,
    Decision,
    GateInput,
    RunOutcome,
    TaskRow,
    bootstrap_sum_bounds,
    decide,
    fisher_worse_p,
    sign_test_p,
    t_cdf,
    t_quantile,
)
from bench_assets.kernel.errorkinds import ErrorKind

REPO = Path(__file__).resolve().parent.parent
NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
INC, CAND = "workflow", "candidate_workflow"
PAIRED = PolicyConfig(name="paired_v1")
"""The issue-4 rules; the v2 default is tested in tests/test_gate_v2.py."""
STRICT = PolicyConfig(name="strict")
KINDS = {"Y": None, "N": ErrorKind.ORACLE_FAILED, "S": ErrorKind.SKILL_NOT_INVOKED}
KINDS_X = {"X": ErrorKind.INFRA_ERROR}

Cells = list[RunOutcome]


def runs(
    task: str,
    arm: str,
    pattern: str,
    costs: Sequence[float | None],
    *,
    age_days: float = 1.0,
    reused: bool = False,
) -> Cells:
    """One arm's runs on one task."""
    assert len(pattern) == len(costs)
    out = []
    for i, (mark, cost) in enumerate(zip(pattern, costs, strict=True)):
        kind = KINDS[mark] if mark in KINDS else KINDS_X[mark]
        out.append(
            RunOutcome(
                task=task,
                arm=arm,
                run=i,
                resolved=mark == "Y",
                error_kind=kind,
                metric=cost,
                reused=reused,
                generation="g1" if reused else "g2",
                record_id=f"{task}-{arm}-{i}",
                data_version=f"dv-{task}-{arm}-{i}",
                recorded_at=NOW - dt.timedelta(days=age_days),
            )
        )
    return out


def costs(base: float, n: int = 3) -> list[float | None]:
    """Three slightly different costs around ``base``."""
    spread = (1.0, 1.1, 0.9, 1.05, 0.95)
    return [base * spread[i % len(spread)] for i in range(n)]


def world(n: int = 10, ratio: float = 0.7, inc: str = "YYY", cand: str = "YYY") -> dict[str, Cells]:
    """n tasks where the candidate is ``ratio`` times the incumbent's cost (with jitter)."""
    out = {}
    for i in range(n):
        task = f"task-{i:02d}"
        base = 0.5 + 0.1 * i
        jitter = 1.0 + 0.04 * ((i % 3) - 1)
        out[task] = runs(task, INC, inc, costs(base, len(inc))) + runs(
            task, CAND, cand, costs(base * ratio * jitter, len(cand))
        )
    return out


def with_task(w: dict[str, Cells], task: str, inc: Cells, cand: Cells) -> dict[str, Cells]:
    """Replace (or add) one task's cells."""
    out = dict(w)
    out[task] = inc + cand
    return out


def gate(w: dict[str, Cells], policy: PolicyConfig = PAIRED, **extra: object) -> GateInput:
    """A gate input over every task of ``w``."""
    fields: dict[str, object] = {
        "policy": policy,
        "model": "claude-sonnet-4-5-20250929",
        "incumbent_arm": INC,
        "candidate_arm": CAND,
        "tasks": list(w),
        "outcomes": [o for cells in w.values() for o in cells],
        "aborted": False,
        "now": NOW,
        "max_age_days": 90,
    }
    fields.update(extra)
    return GateInput.model_validate(fields)


def rules(d: Decision, effect: str | None = None) -> set[str]:
    return {f.rule for f in d.findings if effect is None or f.effect == effect}


def row(d: Decision, task: str) -> TaskRow:
    return next(r for r in d.tasks if r.task == task)


# ---------------------------------------------------------------------------------------------
# exact statistics


@pytest.mark.parametrize(
    ("wins", "losses", "expected"),
    [
        (0, 0, Fraction(1)),
        (1, 0, Fraction(1)),  # 2 · 1/2
        (2, 1, Fraction(1)),  # 2 · (1 + 3)/8 = 1
        (3, 3, Fraction(1)),
        (5, 0, Fraction(1, 16)),  # 2 · 1/32
        (6, 0, Fraction(1, 32)),  # 2 · 1/64
        (4, 1, Fraction(3, 8)),  # 2 · (1 + 5)/32
        (8, 2, Fraction(7, 64)),  # 2 · (1 + 10 + 45)/1024
        (9, 1, Fraction(11, 512)),  # 2 · (1 + 10)/1024
        (10, 0, Fraction(1, 512)),  # 2 · 1/1024
        (7, 3, Fraction(11, 32)),  # 2 · (1 + 10 + 45 + 120)/1024 = 352/1024
    ],
)
def test_sign_test_exact_values(wins: int, losses: int, expected: Fraction) -> None:
    assert sign_test_p(wins, losses) == expected
    assert sign_test_p(losses, wins) == expected


def test_sign_test_rejects_negative_counts() -> None:
    with pytest.raises(ValueError):
        sign_test_p(-1, 2)


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ((3, 3, 0, 3), Fraction(1, 20)),  # C(3,0)C(3,3)/C(6,3)
        ((3, 3, 1, 3), Fraction(1, 5)),  # C(4,1)C(2,2)/C(6,3)
        ((2, 3, 0, 3), Fraction(1, 5)),  # C(2,0)C(4,3)/C(6,3)
        ((3, 3, 3, 3), Fraction(1)),
        ((5, 5, 0, 5), Fraction(1, 252)),
        ((10, 10, 1, 10), Fraction(11, 184756)),  # C(11,1)C(9,9)/C(20,10)
    ],
)
def test_fisher_exact_values(table: tuple[int, int, int, int], expected: Fraction) -> None:
    assert fisher_worse_p(*table) == expected


def test_student_t_against_closed_forms_and_tables() -> None:
    for t in (-3.0, -0.5, 0.0, 1.0, 4.2):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    assert t_quantile(0.95, 9) == pytest.approx(1.8331129, abs=1e-6)
    assert t_quantile(0.975, 4) == pytest.approx(2.7764451, abs=1e-6)
    assert t_quantile(0.95, 1) == pytest.approx(6.3137515, abs=1e-6)
    assert t_quantile(0.05, 9) == pytest.approx(-1.8331129, abs=1e-6)


def test_bootstrap_bounds_are_seeded_and_exact() -> None:
    values = [0, 0, -1, 0, 2, 0, 0, -2, 1, 0]
    a = bootstrap_sum_bounds(values, samples=2000, seed=7, alpha=Fraction(1, 20))
    assert a == bootstrap_sum_bounds(values, samples=2000, seed=7, alpha=Fraction(1, 20))
    assert a[0] <= sum(values) <= a[1]
    assert bootstrap_sum_bounds([3, 3, 3], samples=500, seed=1, alpha=Fraction(1, 10)) == (9, 9)


# ---------------------------------------------------------------------------------------------
# both policies: evidence rules


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_positive_control_promotes(policy: PolicyConfig) -> None:
    d = decide(gate(world(), policy))
    assert d.decision == "promote", d.reasons
    assert d.reasons[0].startswith("promote")
    assert all(r.counted and r.gated for r in d.tasks)


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_aborted_generation_never_promotes(policy: PolicyConfig) -> None:
    d = decide(gate(world(), policy, aborted=True))
    assert d.decision == "insufficient_evidence"
    assert "aborted" in rules(d, "insufficient")


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_expired_evidence_is_insufficient(policy: PolicyConfig) -> None:
    w = world()
    old = runs("task-03", INC, "YYY", costs(0.8), age_days=90.5, reused=True)
    w = with_task(w, "task-03", old, w["task-03"][3:])
    d = decide(gate(w, policy))
    assert d.decision == "insufficient_evidence"
    assert "expired" in rules(d)
    # Exactly max_age old is still valid evidence: the control.
    edge = runs("task-03", INC, "YYY", costs(0.8), age_days=90, reused=True)
    assert decide(gate(with_task(w, "task-03", edge, w["task-03"][3:]), policy)).decision == (
        "promote"
    )


def test_expiry_and_reuse_are_reported() -> None:
    w = world(n=3)
    w = with_task(
        w,
        "task-01",
        runs("task-01", INC, "YYY", costs(0.6), age_days=30, reused=True),
        w["task-01"][3:],
    )
    d = decide(gate(w))
    assert d.evidence_oldest == NOW - dt.timedelta(days=30)
    assert d.evidence_expires_at == NOW + dt.timedelta(days=60)
    reused = [e for e in d.evidence if e.reused]
    assert {(e.task, e.arm, e.generation) for e in reused} == {("task-01", INC, "g1")}
    assert row(d, "task-01").incumbent.reused_runs == 3


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_evidence_from_the_future_is_refused(policy: PolicyConfig) -> None:
    w = world()
    late = runs("task-02", CAND, "YYY", costs(0.49), age_days=-1)
    d = decide(gate(with_task(w, "task-02", w["task-02"][:3], late), policy))
    assert d.decision == "insufficient_evidence"
    assert "future_evidence" in rules(d)


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_unnamed_model_is_insufficient(policy: PolicyConfig) -> None:
    d = decide(gate(world(), policy, model=" "))
    assert d.decision == "insufficient_evidence"
    assert "model_unnamed" in rules(d)


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_min_runs(policy: PolicyConfig) -> None:
    d = decide(gate(world(inc="YY", cand="YY"), policy))
    assert d.decision == "insufficient_evidence"
    assert "min_runs" in rules(d, "insufficient")
    assert not any(r.counted for r in d.tasks)
    # The same runs pass when the policy asks for two.
    relaxed = policy.model_copy(update={"min_runs": 2})
    assert decide(gate(world(inc="YY", cand="YY"), relaxed)).decision == "promote"


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_unequal_valid_runs(policy: PolicyConfig) -> None:
    w = world()
    w = with_task(w, "task-04", w["task-04"][:3], runs("task-04", CAND, "YYYY", costs(0.63, 4)))
    d = decide(gate(w, policy))
    assert d.decision == "insufficient_evidence"
    assert "unequal_runs" in rules(d)
    assert row(d, "task-04").counted is False


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_any_exclusion_is_insufficient(policy: PolicyConfig) -> None:
    # Four runs with one infra error: three valid runs each side, so only the exclusion trips.
    w = world()
    cand = runs("task-05", CAND, "YYYX", [0.7, 0.7, 0.7, None])
    w = with_task(w, "task-05", w["task-05"][:3], cand)
    d = decide(gate(w, policy))
    assert d.decision == "insufficient_evidence"
    assert rules(d, "insufficient") == {"exclusions"}
    r = row(d, "task-05")
    assert r.candidate.excluded_runs == 1
    assert r.candidate.error_kinds == {"infra-error": 1}


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_missing_arm(policy: PolicyConfig) -> None:
    w = world()
    w = with_task(w, "task-06", w["task-06"][:3], [])
    d = decide(gate(w, policy))
    assert d.decision == "insufficient_evidence"
    assert "missing_arm" in rules(d)


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_unmeasured_metric_can_never_help(policy: PolicyConfig) -> None:
    # The candidate is dearer on task-07; hiding that cost must not let it through, and
    # reading None as 0 would have made it look free.
    w = world()
    w = with_task(w, "task-07", w["task-07"][:3], runs("task-07", CAND, "YYY", [3.0, None, 3.0]))
    d = decide(gate(w, policy))
    assert d.decision == "insufficient_evidence"
    assert "metric_unmeasured" in rules(d, "insufficient")
    r = row(d, "task-07")
    assert r.candidate.median_metric is None
    assert r.candidate.unmeasured_runs == 1
    assert r.counted is False


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_zero_metric_is_insufficient(policy: PolicyConfig) -> None:
    w = world()
    w = with_task(w, "task-01", runs("task-01", INC, "YYY", [0.0, 0.0, 0.0]), w["task-01"][3:])
    d = decide(gate(w, policy))
    assert d.decision == "insufficient_evidence"
    assert "metric_zero" in rules(d)


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_gated_share(policy: PolicyConfig) -> None:
    # Six of ten tasks are mutually unresolved: 4/10 gated < 50 %.
    w = world()
    for i in range(6):
        task = f"task-{i:02d}"
        w = with_task(
            w, task, runs(task, INC, "NNN", costs(1.0)), runs(task, CAND, "NNN", costs(0.7))
        )
    d = decide(gate(w, policy))
    assert d.decision == "insufficient_evidence"
    assert "gated_share" in rules(d)
    assert d.strict.gated_tasks == 4
    assert len(d.strict.ungated_tasks) == 6
    assert all(not row(d, f"task-{i:02d}").gated for i in range(6))
    # Five of ten gated meets the 50 % share.
    w = with_task(
        w,
        "task-00",
        runs("task-00", INC, "YYY", costs(1.0)),
        runs("task-00", CAND, "YYY", costs(0.7)),
    )
    d = decide(gate(w, policy))
    assert "gated_share" not in rules(d)
    assert d.decision == "promote", d.reasons


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_no_gated_task(policy: PolicyConfig) -> None:
    d = decide(gate(world(inc="NNN", cand="NNN"), policy))
    assert d.decision == "insufficient_evidence"
    assert "no_gated" in rules(d)


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_no_planned_task(policy: PolicyConfig) -> None:
    d = decide(gate({}, policy))
    assert d.decision == "insufficient_evidence"
    assert "no_tasks" in rules(d)


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_ungated_spend_cap(policy: PolicyConfig) -> None:
    # A mutually unresolved task where the candidate spends 1.6x (cap 1.5x) blocks promotion.
    w = world()
    inc = runs("task-09", INC, "NNN", costs(1.0))
    d = decide(gate(with_task(w, "task-09", inc, runs("task-09", CAND, "NNN", costs(1.6))), policy))
    assert d.decision == "keep_incumbent"
    assert rules(d, "keep") == {"spend_cap"}
    assert row(d, "task-09").gated is False
    ok = with_task(w, "task-09", inc, runs("task-09", CAND, "NNN", costs(1.4)))
    assert decide(gate(ok, policy)).decision == "promote"


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_configured_quality_floor(policy: PolicyConfig) -> None:
    # Incumbent never resolves these tasks, the candidate sometimes: no regression and no
    # oracle floor (incumbent resolved nothing), but the configured floor of 0.8 is not met.
    w = world(inc="NNN", cand="YNN")
    floor = policy.model_copy(update={"quality_floor": 0.8})
    d = decide(gate(w, floor))
    assert d.decision == "keep_incumbent"
    assert "quality_floor" in rules(d, "keep")
    assert "quality_floor" not in rules(decide(gate(w, policy)))


# ---------------------------------------------------------------------------------------------
# strict: the original harness's rules


def test_strict_resolve_regression() -> None:
    w = world()
    w = with_task(w, "task-02", w["task-02"][:3], runs("task-02", CAND, "YYN", costs(0.49)))
    d = decide(gate(w, STRICT))
    assert d.decision == "keep_incumbent"
    assert "resolve_regression" in rules(d, "keep")
    # paired does not treat one lost run on one task as a regression.
    assert "resolve_regression" not in rules(decide(gate(w, PAIRED)))


def test_strict_oracle_floor() -> None:
    # Candidate improves 1/3 -> 2/3: no rate regression, but it must resolve every valid run.
    w = world()
    w = with_task(
        w,
        "task-03",
        runs("task-03", INC, "YNN", costs(0.8)),
        runs("task-03", CAND, "YYN", costs(0.56)),
    )
    d = decide(gate(w, STRICT))
    assert d.decision == "keep_incumbent"
    assert rules(d, "keep") == {"oracle_floor"}
    assert row(d, "task-03").quality_floor_enforced is True


def test_strict_skill_attributable_failure_is_gated() -> None:
    # Mutually unresolved, but the skill was not invoked: gated, floor enforced.
    w = world()
    w = with_task(
        w,
        "task-04",
        runs("task-04", INC, "NNN", costs(0.9)),
        runs("task-04", CAND, "SNN", costs(0.6)),
    )
    d = decide(gate(w, STRICT))
    r = row(d, "task-04")
    assert (r.gated, r.skill_attributable, r.quality_floor_enforced) == (True, True, True)
    assert d.decision == "keep_incumbent"
    assert "oracle_floor" in rules(d, "keep")


def test_strict_efficiency_cap() -> None:
    w = world()
    w = with_task(w, "task-08", w["task-08"][:3], runs("task-08", CAND, "YYY", costs(1.3 * 1.3)))
    d = decide(gate(w, STRICT))
    assert d.decision == "keep_incumbent"
    assert rules(d, "keep") == {"efficiency_cap"}
    assert row(d, "task-08").improvement_pct == pytest.approx(-30.0)
    # 20 % dearer on that task is inside the 25 % cap.
    w = with_task(w, "task-08", w["task-08"][:3], runs("task-08", CAND, "YYY", costs(1.3 * 1.2)))
    assert decide(gate(w, STRICT)).decision == "promote"


def test_strict_median_improvement() -> None:
    d = decide(gate(world(ratio=0.97), STRICT))
    assert d.decision == "keep_incumbent"
    assert rules(d, "keep") == {"median_improvement"}
    assert d.strict.median_improvement_pct is not None
    assert d.strict.median_improvement_pct < 5.0
    assert decide(gate(world(ratio=0.9), STRICT)).decision == "promote"


def test_strict_resolution_margin_of_two_promotes_without_savings() -> None:
    # The candidate resolves 3/3 where the incumbent resolved 0/3 (no floor: incumbent 0),
    # at 10 % higher cost everywhere: margin 3 >= 2 promotes; margin 1 does not.
    w = world(ratio=1.1)
    won = with_task(
        w,
        "task-00",
        runs("task-00", INC, "NNN", costs(0.5)),
        runs("task-00", CAND, "YYY", costs(0.55)),
    )
    d = decide(gate(won, STRICT))
    assert d.strict.resolution_margin == 3
    assert d.decision == "promote"
    assert "resolution_margin" in rules(d, "pass")
    one = with_task(
        w,
        "task-00",
        runs("task-00", INC, "NNN", costs(0.5)),
        runs("task-00", CAND, "YNN", costs(0.55)),
    )
    d = decide(gate(one, STRICT))
    assert d.strict.resolution_margin == 1
    assert d.decision == "keep_incumbent"
    assert rules(d, "keep") == {"median_improvement"}


# ---------------------------------------------------------------------------------------------
# paired


def test_paired_statistics_on_a_clear_win() -> None:
    d = decide(gate(world(ratio=0.7)))
    assert d.paired is not None
    assert d.paired.counted_tasks == 10
    resolve, cost = d.paired.resolve, d.paired.cost
    assert resolve is not None and cost is not None
    assert resolve.verdict == "non_inferior"
    assert resolve.difference.estimate == 0.0
    assert cost.verdict == "improved"
    assert cost.improvement.estimate == pytest.approx(0.3, abs=0.02)
    assert cost.log_ratio.upper < 0
    assert cost.df == 9
    assert d.paired.cost_sign_test.wins == 10
    assert d.paired.cost_sign_test.p_value == pytest.approx(1 / 512)
    assert d.paired.resolve_sign_test.ties == 10
    assert d.paired.noise_floor is None


def test_paired_single_task_hard_regression_blocks() -> None:
    w = world()
    bad = with_task(w, "task-05", w["task-05"][:3], runs("task-05", CAND, "NNN", costs(0.5)))
    d = decide(gate(bad))
    assert d.decision == "keep_incumbent"
    assert "hard_regression" in rules(d, "keep")
    assert d.paired is not None and d.paired.hard_regressions == ["task-05"]
    # 3/3 -> 1/3 on one task is no hard regression at 3 runs (Fisher p = 0.2).
    soft = with_task(w, "task-05", w["task-05"][:3], runs("task-05", CAND, "YNN", costs(0.5)))
    assert "hard_regression" not in rules(decide(gate(soft)))


def test_paired_hard_regression_uses_fisher_with_more_runs() -> None:
    # 10/10 -> 1/10 is not "all vs none", but Fisher p = 11/184756 is far below 0.05/10.
    w = world(inc="Y" * 10, cand="Y" * 10)
    w = with_task(
        w, "task-02", w["task-02"][:10], runs("task-02", CAND, "Y" + "N" * 9, costs(0.4, 10))
    )
    d = decide(gate(w))
    assert d.decision == "keep_incumbent"
    assert d.paired is not None and d.paired.hard_regressions == ["task-02"]


def test_paired_noninferiority_failure_is_inconclusive() -> None:
    # Four tasks lose one run each: mean −4/30; the 85 % bounds are −6/30 and −2/30, which
    # straddle the −0.1 margin.
    w = world()
    for i in (1, 3, 6, 8):
        task = f"task-{i:02d}"
        w = with_task(w, task, w[task][:3], runs(task, CAND, "YYN", costs((0.5 + 0.1 * i) * 0.7)))
    d = decide(gate(w))
    assert d.decision == "insufficient_evidence"
    assert d.paired is not None and d.paired.resolve is not None
    ni = d.paired.resolve
    assert ni.verdict == "inconclusive"
    assert ni.difference.estimate == pytest.approx(-4 / 30)
    assert ni.difference.lower == pytest.approx(-0.2)
    assert ni.difference.upper == pytest.approx(-2 / 30)
    assert rules(d, "inconclusive") == {"noninferiority"}
    assert d.paired.cost is not None and d.paired.cost.verdict == "improved"
    # With a 0.25 margin the same evidence is non-inferior and promotes.
    wide = PAIRED.model_copy(update={"resolve_margin": 0.25})
    assert decide(gate(w, wide)).decision == "promote"


def test_paired_clear_inferiority_keeps_incumbent() -> None:
    w = world(cand="YNN")
    d = decide(gate(w))
    assert d.decision == "keep_incumbent"
    assert d.paired is not None and d.paired.resolve is not None
    assert d.paired.resolve.verdict == "inferior"
    assert d.paired.resolve.difference.upper < -0.1
    assert d.paired.hard_regressions == []
    assert d.paired.resolve_sign_test.losses == 10
    assert d.paired.resolve_sign_test.p_value == pytest.approx(1 / 512)


def test_paired_margin_boundary_is_exact() -> None:
    # One lost run in 30: every bootstrap bound is a multiple of 1/30, and −3/30 meets −0.1
    # exactly; float rounding must not decide this.
    w = world()
    w = with_task(w, "task-00", w["task-00"][:3], runs("task-00", CAND, "YYN", [0.35, 0.35, 0.35]))
    d = decide(gate(w, PAIRED.model_copy(update={"noninferiority_confidence": 0.95})))
    assert d.paired is not None and d.paired.resolve is not None
    assert d.paired.resolve.difference.lower == pytest.approx(-0.1)
    assert d.paired.resolve.verdict == "non_inferior"


def test_paired_no_cost_improvement_keeps_incumbent() -> None:
    d = decide(gate(world(ratio=1.02)))
    assert d.decision == "keep_incumbent"
    assert d.paired is not None and d.paired.cost is not None
    assert d.paired.cost.verdict == "not_improved"
    assert "cost_improvement" in rules(d, "keep")


def test_paired_small_improvement_below_threshold_is_not_promoted() -> None:
    # Significantly cheaper, but only ~3 %: below min_improvement (5 %).
    d = decide(gate(world(ratio=0.97)))
    assert d.paired is not None and d.paired.cost is not None
    assert d.paired.cost.log_ratio.upper < 0
    assert d.decision != "promote"


def test_paired_noisy_cost_is_inconclusive() -> None:
    w = world()
    for i, factor in enumerate((0.5, 1.4, 0.6, 1.3, 0.9, 1.2, 0.55, 1.1, 0.8, 1.0)):
        task = f"task-{i:02d}"
        w = with_task(
            w, task, w[task][:3], runs(task, CAND, "YYY", costs((0.5 + 0.1 * i) * factor))
        )
    d = decide(gate(w))
    assert d.paired is not None and d.paired.cost is not None
    assert d.paired.cost.verdict == "inconclusive"
    assert d.decision == "insufficient_evidence"
    assert "cost_improvement" in rules(d, "inconclusive")


def test_paired_too_few_tasks() -> None:
    d = decide(gate(world(n=1)))
    assert d.decision == "insufficient_evidence"
    assert "too_few_tasks" in rules(d)
    assert d.paired is not None and d.paired.cost is None and d.paired.resolve is None
    assert decide(gate(world(n=2))).decision == "promote"


def test_paired_keep_outweighs_an_inconclusive_test() -> None:
    w = world()
    for i, factor in enumerate((0.5, 1.4, 0.6, 1.3, 0.9, 1.2, 0.55, 1.1, 0.8, 1.0)):
        task = f"task-{i:02d}"
        w = with_task(
            w, task, w[task][:3], runs(task, CAND, "YYY", costs((0.5 + 0.1 * i) * factor))
        )
    w = with_task(w, "task-03", w["task-03"][:3], runs("task-03", CAND, "NNN", costs(0.5)))
    d = decide(gate(w))
    assert "cost_improvement" in rules(d, "inconclusive")
    assert d.decision == "keep_incumbent"


def test_paired_noise_floor_from_canaries() -> None:
    canaries = [
        CanaryPair(task="task-00", arm=INC, run=0, fresh=1.1, reused=1.0),
        CanaryPair(task="task-01", arm=INC, run=2, fresh=0.9, reused=1.0),
        CanaryPair(task="task-02", arm=INC, run=1, fresh=None, reused=1.0),
    ]
    d = decide(gate(world(), canaries=canaries))
    assert d.decision == "promote"
    floor = d.paired.noise_floor if d.paired else None
    assert floor is not None
    assert (floor.pairs, floor.measured_pairs) == (3, 2)
    assert floor.mean_log_ratio == pytest.approx((math.log(1.1) + math.log(0.9)) / 2)
    assert floor.rms_log_ratio == pytest.approx(
        math.sqrt((math.log(1.1) ** 2 + math.log(0.9) ** 2) / 2)
    )
    assert "noise_floor" in rules(d, "info")


def test_paired_table_explains_every_task() -> None:
    w = world()
    w = with_task(
        w,
        "task-09",
        runs("task-09", INC, "NNN", costs(1.0)),
        runs("task-09", CAND, "NNN", costs(0.7)),
    )
    d = decide(gate(w))
    assert [r.task for r in d.tasks] == sorted(w)
    r9 = row(d, "task-09")
    assert (r9.gated, r9.counted) == (False, False)
    assert "mutually unresolved" in str(r9.why)
    r0 = row(d, "task-00")
    assert (r0.incumbent_resolved, r0.candidate_resolved, r0.why) == (
        "3/3",
        "3/3",
        "counted",
    )
    assert r0.log_ratio == pytest.approx(math.log(0.7 * 0.96))
    assert {e.task_counted for e in d.evidence if e.task == "task-09"} == {False}
    assert len(d.evidence) == 60


# ---------------------------------------------------------------------------------------------
# determinism, schema, input validation


@pytest.mark.parametrize("policy", [PAIRED, STRICT], ids=["paired", "strict"])
def test_decision_is_deterministic_and_recomputable(policy: PolicyConfig) -> None:
    w = world()
    w = with_task(w, "task-01", w["task-01"][:3], runs("task-01", CAND, "YYN", [0.5, 0.5, 0.5]))
    inp = gate(
        w, policy, canaries=[CanaryPair(task="task-00", arm=INC, run=0, fresh=1.0, reused=1.2)]
    )
    first = decide(inp)
    assert decide(inp).model_dump() == first.model_dump()
    stored = GateInput.model_validate_json(inp.model_dump_json())
    assert decide(stored).model_dump() == first.model_dump()
    assert Decision.model_validate_json(first.model_dump_json()) == first
    # Outcome order is not evidence.
    shuffled = inp.model_copy(update={"outcomes": list(reversed(inp.outcomes))})
    assert decide(shuffled).model_dump() == first.model_dump()


def test_decision_json_carries_schema_and_policy() -> None:
    d = decide(gate(world()))
    data = json.loads(d.model_dump_json())
    assert data["schema_version"] == 7
    assert data["policy_name"] == "paired_v1"
    assert data["policy"] == PAIRED.model_dump(mode="json")
    assert data["metric_warning"] is None
    tokens = PAIRED.model_copy(update={"metric": "total_tokens"})
    assert decide(gate(world(), tokens)).metric_warning


def test_bootstrap_seed_changes_only_the_resampling() -> None:
    w = world()
    w = with_task(w, "task-01", w["task-01"][:3], runs("task-01", CAND, "YYN", [0.5, 0.5, 0.5]))
    a = decide(gate(w, PAIRED.model_copy(update={"seed": 1})))
    b = decide(gate(w, PAIRED.model_copy(update={"seed": 2})))
    assert a.paired and b.paired and a.paired.resolve and b.paired.resolve
    assert a.paired.resolve.difference.estimate == b.paired.resolve.difference.estimate
    assert a.paired.cost == b.paired.cost


def _outcome(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "task": "task-00",
        "arm": INC,
        "run": 0,
        "resolved": True,
        "error_kind": None,
        "metric": 1.0,
        "reused": False,
        "generation": None,
        "record_id": "r",
        "data_version": "d",
        "recorded_at": NOW.isoformat(),
    }
    base.update(kw)
    return base


@pytest.mark.parametrize(
    "bad",
    [
        {"metric": float("nan")},
        {"metric": -1.0},
        {"resolved": True, "error_kind": "infra-error"},
        {"recorded_at": "2026-03-01T12:00:00"},
        {"surprise": 1},
    ],
)
def test_run_outcome_rejects_bad_values(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RunOutcome.model_validate(_outcome(**bad))


@pytest.mark.parametrize(
    "change",
    [
        {"candidate_arm": INC},
        {"tasks": ["task-00", "task-00"]},
        {"outcomes": [_outcome(), _outcome()]},
        {"outcomes": [_outcome(arm="baseline")]},
        {"outcomes": [_outcome(task="unplanned")]},
    ],
)
def test_gate_input_rejects_inconsistent_evidence(change: dict[str, object]) -> None:
    fields: dict[str, object] = {
        "policy": PAIRED.model_dump(),
        "model": "m",
        "incumbent_arm": INC,
        "candidate_arm": CAND,
        "tasks": ["task-00"],
        "outcomes": [],
        "aborted": False,
        "now": NOW.isoformat(),
        "max_age_days": 90,
    }
    fields.update(change)
    with pytest.raises(ValidationError):
        GateInput.model_validate(fields)


# ---------------------------------------------------------------------------------------------
# the shipped demo


def _demo_world() -> tuple[dict[str, Cells], PolicyConfig]:
    tasks = REPO / "tasks"
    expected = json.loads((tasks / "replays" / "expected.json").read_text(encoding="utf-8"))
    policy = PolicyConfig.model_validate(
        yaml.safe_load((tasks / "bench.yaml").read_text(encoding="utf-8"))["policy"]
    )
    w: dict[str, Cells] = {}
    for arm in (INC, CAND):
        replay = tasks / "replays" / f"{'workflow' if arm == INC else 'candidate_workflow'}.jsonl"
        for line in replay.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            task, run = rec["instance_id"], rec["run"]
            want = expected["workflow" if arm == INC else "candidate_workflow"][task][run]
            resolved = bool(want["verify"] and want["oracle"])
            kind = None if resolved else ErrorKind.ORACLE_FAILED
            w.setdefault(task, []).append(
                RunOutcome(
                    task=task,
                    arm=arm,
                    run=run,
                    resolved=resolved,
                    error_kind=kind,
                    metric=rec["usage"]["cost_usd"],
                    reused=False,
                    generation="demo",
                    record_id=f"{task}-{arm}-{run}",
                    data_version="demo",
                    recorded_at=NOW,
                )
            )
    return w, policy


def test_the_demo_evidence_promotes_under_its_policy() -> None:
    w, policy = _demo_world()
    assert policy.name == "paired"
    d = decide(gate(w, policy))
    assert d.decision == "promote", d.reasons
    assert d.paired_v2 is not None and d.paired_v2.resolve is not None
    assert d.paired_v2.resolve.difference.estimate > 0
    # The original harness's floor would keep the incumbent on the same evidence.
    strict = PolicyConfig(
        name="strict", min_runs=policy.min_runs, min_improvement=policy.min_improvement
    )
    assert decide(gate(w, strict)).decision == "keep_incumbent"
