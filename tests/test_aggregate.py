"""Aggregation and health on hand-built cell records: every number is worked out by hand."""

import random
from typing import Any

import pytest
from pydantic import ValidationError

from bench_assets.cells.records import CellRecord
from bench_assets.cli.common import exit_code_for
from bench_assets.decision.aggregate import (
    AggregateInput,
    ArmCheats,
    ArmHealth,
    HealthStatus,
    TaskAggregate,
    aggregate_task,
    arm_cheats,
    arm_health,
    unusable_incumbent,
)
from bench_assets.decision.report import aggregate_markdown
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.errors import EvidenceError, IntegrityError

GRADES: dict[ErrorKind | None, tuple[bool, bool]] = {
    None: (True, True),
    ErrorKind.ORACLE_FAILED: (True, False),
    ErrorKind.NO_WORK_PRODUCED: (True, True),
}
"""Error kind → (verify_passed, oracle_passed) a real cell would record; default (False, False)."""


def rec(
    arm: str,
    run: int,
    *,
    kind: ErrorKind | None = None,
    cost: float | None = 0.5,
    tokens: int | None = 1000,
    turns: int | None = 4,
    duration: float = 10.0,
    churn: tuple[int, int, int] = (1, 2, 3),
    verify: bool | None = None,
    oracle: bool | None = None,
    generation: str | None = "g0002",
    task: str = "alpha",
    task_class: str = "bug",
    recorded_at: str = "2025-01-04T03:00:00+00:00",
    **extra: Any,
) -> CellRecord:
    """A complete, consistent cell record; resolved exactly when there is no error kind."""
    v, o = GRADES.get(kind, (False, False))
    return CellRecord(
        record_id=f"rid-{task}-{arm}-{run}",
        task=task,
        task_class=task_class,
        arm=arm,
        role="candidate" if arm.startswith("cand") else "comparator",
        run=run,
        cell=f"{arm}.r{run}",
        generation=generation,
        adapter="replay",
        model="claude-sonnet-4-5-20250929",
        effort="medium",
        input_tokens=None if tokens is None else tokens // 2,
        output_tokens=None if tokens is None else tokens // 4,
        cache_read_input_tokens=None if tokens is None else tokens // 8,
        cache_creation_input_tokens=None if tokens is None else tokens // 8,
        total_tokens=tokens,
        cost_usd=cost,
        turns=turns,
        agent_duration_s=None if duration is None else duration / 2,
        duration_s=duration,
        churn_files=churn[0],
        churn_insertions=churn[1],
        churn_deletions=churn[2],
        verify_passed=v if verify is None else verify,
        oracle_passed=o if oracle is None else oracle,
        resolved=kind is None,
        error_kind=kind,
        error_detail="",
        verify_tail="",
        protected_changed=[],
        session_ids=[],
        patch=None,
        transcript=None,
        identity_digest="i" * 64,
        identity={},
        skills_digest=None,
        overlay_digest=None,
        binding_digest="b" * 64,
        resolved_sha="c" * 40,
        sanitized_sha="d" * 40,
        oracle_digest="o" * 64,
        graph_digest="g" * 64,
        harness_version="0.1.0",
        agent_version=None,
        sandbox_backend="bwrap",
        timings={},
        recorded_at=recorded_at,
        **extra,
    )


def fresh(record: CellRecord, run_id: str | None = None) -> AggregateInput:
    return AggregateInput(record=record, run_id=run_id)


def reused(record: CellRecord, source: str | None = None, run: str = "src") -> AggregateInput:
    return AggregateInput(
        record=record, reused=True, source_generation=source, source_run_id=run, run_id="now"
    )


def cells(arm: str, n: int) -> list[str]:
    return [f"{arm}.r{i}" for i in range(n)]


def agg_of(records: list[CellRecord], planned: list[str] | None = None, **kw: Any) -> TaskAggregate:
    planned = planned if planned is not None else [r.cell for r in records]
    return aggregate_task("alpha", planned, [fresh(r) for r in records], **kw)


# --- medians ------------------------------------------------------------------------------------


def test_medians_over_valid_runs_odd_and_even() -> None:
    records = [
        rec("workflow", 0, cost=0.1, tokens=1000, turns=4, duration=10.0, churn=(1, 10, 0)),
        rec("workflow", 1, cost=0.3, tokens=3000, turns=6, duration=30.0, churn=(3, 30, 2)),
        rec("workflow", 2, cost=0.2, tokens=2000, turns=5, duration=20.0, churn=(2, 20, 1)),
        rec("baseline", 0, cost=0.25, tokens=1000, turns=3, duration=5.0, churn=(1, 1, 1)),
        rec("baseline", 1, cost=0.75, tokens=2000, turns=4, duration=6.0, churn=(2, 2, 2)),
    ]
    agg = agg_of(records)
    w, b = agg.arms["workflow"], agg.arms["baseline"]
    assert list(agg.arms) == ["workflow", "baseline"]
    assert (w.median_cost_usd, w.median_total_tokens, w.median_turns) == (0.2, 2000.0, 5.0)
    assert (w.median_duration_s, w.median_agent_duration_s) == (20.0, 10.0)
    assert (w.median_input_tokens, w.median_output_tokens) == (1000.0, 500.0)
    assert (w.median_cache_read_input_tokens, w.median_cache_creation_input_tokens) == (250, 250)
    assert (w.median_churn_files, w.median_churn_insertions, w.median_churn_deletions) == (
        2.0,
        20.0,
        1.0,
    )
    assert (b.median_cost_usd, b.median_total_tokens, b.median_turns) == (0.5, 1500.0, 3.5)
    assert (b.median_duration_s, b.median_churn_files) == (5.5, 1.5)
    assert (w.runs, w.valid_runs, w.excluded_runs, w.resolved, w.resolved_fresh) == (3, 3, 0, 3, 3)
    assert (w.pass_at_1, w.pass_k, w.k) == (1.0, 1.0, 3)
    assert w.role == "comparator" and w.planned_runs == 3
    assert w.health.status is HealthStatus.OBSERVED_OK


def test_one_unmeasured_valid_run_poisons_that_median_only() -> None:
    records = [
        rec("workflow", 0, cost=0.1),
        rec("workflow", 1, cost=None, turns=None),
        rec("workflow", 2, cost=0.2, tokens=None),
    ]
    w = agg_of(records).arms["workflow"]
    assert w.median_cost_usd is None
    assert w.median_turns is None
    assert w.median_total_tokens is None
    assert w.median_input_tokens is None
    assert w.median_duration_s == 10.0  # always measured
    assert w.valid_runs == 3


def test_unmeasured_cost_on_an_excluded_run_does_not_poison() -> None:
    records = [
        rec("workflow", 0, cost=0.1),
        rec("workflow", 1, cost=0.3),
        rec("workflow", 2, kind=ErrorKind.SESSION_ERROR, cost=None, tokens=None, turns=None),
    ]
    w = agg_of(records).arms["workflow"]
    assert w.median_cost_usd == 0.2
    assert w.median_total_tokens == 1000.0
    assert w.median_turns == 4.0


# --- exclusions ----------------------------------------------------------------------------------


def test_excluded_runs_leave_medians_and_denominators() -> None:
    records = [
        rec("workflow", 0, cost=1.0, duration=10.0),
        rec("workflow", 1, kind=ErrorKind.VERIFY_FAILED, cost=3.0, duration=30.0),
        rec("workflow", 2, kind=ErrorKind.SESSION_ERROR, cost=900.0, duration=900.0),
        rec("workflow", 3, kind=ErrorKind.INFRA_ERROR, cost=900.0, duration=900.0),
        rec("workflow", 4, kind=ErrorKind.SESSION_ERROR, cost=900.0, duration=900.0),
    ]
    w = agg_of(records).arms["workflow"]
    assert (w.runs, w.valid_runs, w.excluded_runs) == (5, 2, 3)
    assert w.excluded_kinds == {"infra-error": 1, "session-error": 2}
    assert w.error_kinds == {"infra-error": 1, "session-error": 2, "verify-failed": 1}
    assert (w.median_cost_usd, w.median_duration_s) == (2.0, 20.0)
    assert (w.resolved, w.pass_at_1, w.pass_k, w.k) == (1, 0.5, 0.0, 2)
    assert w.health.status is HealthStatus.DEGRADED


@pytest.mark.parametrize(
    "kind",
    [
        ErrorKind.SESSION_ERROR,
        ErrorKind.INFRA_ERROR,
        ErrorKind.CANCELLED,
        ErrorKind.CLEANUP_FAILURE,
        ErrorKind.EVIDENCE_UNVERIFIED,
        ErrorKind.REVIEW_EVIDENCE_INVALID,
    ],
)
def test_every_excluded_kind_is_excluded(kind: ErrorKind) -> None:
    w = agg_of([rec("workflow", 0, kind=kind), rec("workflow", 1)]).arms["workflow"]
    assert (w.valid_runs, w.excluded_runs, w.excluded_kinds) == (1, 1, {kind.value: 1})


def test_no_valid_run_gives_null_medians_and_rates() -> None:
    records = [rec("workflow", i, kind=ErrorKind.INFRA_ERROR) for i in range(2)]
    w = agg_of(records).arms["workflow"]
    assert w.valid_runs == 0 and w.excluded_runs == 2
    assert w.pass_at_1 is None and w.pass_k is None and w.k is None
    medians = [v for f, v in w.model_dump().items() if f.startswith("median_")]
    assert len(medians) == 12 and all(v is None for v in medians)


def test_skill_not_invoked_is_a_valid_negative_in_medians() -> None:
    records = [
        rec("workflow", 0, kind=ErrorKind.SKILL_NOT_INVOKED, cost=0.1),
        rec("workflow", 1, cost=0.3),
    ]
    w = agg_of(records).arms["workflow"]
    assert (w.valid_runs, w.excluded_runs, w.median_cost_usd, w.pass_at_1) == (2, 0, 0.2, 0.5)
    assert w.health.status is HealthStatus.DEGRADED
    assert w.health.reasons == ["skill-not-invoked"]


# --- pass^k --------------------------------------------------------------------------------------


def _two_of_three() -> list[CellRecord]:
    return [rec("w", 0), rec("w", 1), rec("w", 2, kind=ErrorKind.ORACLE_FAILED)]


def test_pass_k_defaults_to_all_valid_runs_resolved() -> None:
    w = agg_of(_two_of_three()).arms["w"]
    assert w.pass_at_1 == pytest.approx(2 / 3)
    assert (w.pass_k, w.k) == (0.0, 3)


def test_pass_k_with_explicit_k_is_the_unbiased_estimator() -> None:
    assert agg_of(_two_of_three(), k=1).arms["w"].pass_k == pytest.approx(2 / 3)
    assert agg_of(_two_of_three(), k=2).arms["w"].pass_k == pytest.approx(1 / 3)  # C(2,2)/C(3,2)
    assert agg_of(_two_of_three(), k=3).arms["w"].pass_k == 0.0
    short = agg_of(_two_of_three(), k=4).arms["w"]
    assert (short.pass_k, short.k) == (None, 4)
    assert agg_of([rec("w", i) for i in range(3)], k=2).arms["w"].pass_k == 1.0


def test_pass_k_rejects_k_below_one() -> None:
    with pytest.raises(ValueError, match="k >= 1"):
        agg_of(_two_of_three(), k=0)


# --- verify vs oracle ---------------------------------------------------------------------------


def test_verify_passed_oracle_failed_count() -> None:
    records = [
        rec("w", 0, kind=ErrorKind.ORACLE_FAILED),  # counted
        rec("w", 1, kind=ErrorKind.ORACLE_FAILED),  # counted
        rec("w", 2, kind=ErrorKind.VERIFY_FAILED),  # verify failed: no disagreement
        rec("w", 3),  # both passed
        rec("w", 4, kind=ErrorKind.ORACLE_UNAVAILABLE, verify=True),  # oracle never ran
        rec("w", 5, kind=ErrorKind.CLEANUP_FAILURE, verify=True),  # excluded
        rec("w", 6, kind=ErrorKind.SKILL_NOT_INVOKED, verify=True),  # valid: counted
    ]
    w = agg_of(records).arms["w"]
    assert w.verify_pass_oracle_fail == 3


# --- cheats --------------------------------------------------------------------------------------


def _cheats(task: str, arm: str) -> list[CellRecord]:
    return [
        rec(arm, 0, task=task),
        # forged outcomes: verify passed, oracle failed, but counted once, as tampered
        rec(arm, 1, task=task, kind=ErrorKind.GRADER_TAMPERED, verify=True),
        rec(arm, 2, task=task, kind=ErrorKind.ORACLE_FAILED),  # verify✓ oracle✗
    ]


def test_grader_tampered_cells_are_counted_per_arm_and_task_as_valid_negatives() -> None:
    agg = agg_of(_cheats("alpha", "cand") + [rec("w", i) for i in range(3)])
    cand, w = agg.arms["cand"], agg.arms["w"]
    assert (cand.grader_tampered, cand.verify_pass_oracle_fail) == (1, 1)
    assert (cand.valid_runs, cand.resolved, cand.excluded_runs) == (3, 1, 0)
    assert cand.error_kinds == {"grader-tampered": 1, "oracle-failed": 1}
    assert (w.grader_tampered, w.verify_pass_oracle_fail) == (0, 0)
    row = next(line for line in aggregate_markdown(agg).splitlines() if line.startswith("| cand"))
    assert " | 1 | 1 | 3/0 | " in row  # verify✓oracle✗, tampered, fresh/reused
    # the gate's view of each evidence cell agrees with the aggregate's count
    flags = [e.verify_passed_oracle_failed for e in agg.evidence if e.arm == "cand"]
    assert flags == [False, False, True]


def test_arm_cheats_sum_over_tasks_and_name_the_tampered_cells() -> None:
    alpha = agg_of(_cheats("alpha", "cand") + [rec("w", i) for i in range(3)])
    beta = aggregate_task(
        "beta",
        cells("cand", 3) + cells("w", 3),
        [fresh(r) for r in _cheats("beta", "cand") + _cheats("beta", "w")],
    )
    totals = arm_cheats([alpha, beta])
    assert list(totals) == ["cand", "w"]
    assert totals["cand"] == ArmCheats(
        runs=6,
        valid_runs=6,
        grader_tampered=2,
        verify_pass_oracle_fail=2,
        tampered_cells=[
            "alpha cand.r1 (record rid-alpha-cand-1)",
            "beta cand.r1 (record rid-beta-cand-1)",
        ],
    )
    assert totals["w"].grader_tampered == 1 and totals["w"].verify_pass_oracle_fail == 1
    assert arm_cheats([]) == {}


def test_a_schema_1_aggregate_derives_its_tampered_count_from_error_kinds() -> None:
    agg = agg_of(_cheats("alpha", "cand"))
    data = agg.model_dump(mode="json")
    assert data["schema_version"] == 2
    data["schema_version"] = 1
    del data["arms"]["cand"]["grader_tampered"]
    old = TaskAggregate.model_validate(data)
    assert old.arms["cand"].grader_tampered == 1
    data["arms"]["cand"]["error_kinds"] = {"oracle-failed": 1}
    assert TaskAggregate.model_validate(data).arms["cand"].grader_tampered == 0


# --- health --------------------------------------------------------------------------------------


def test_health_unknown_when_nothing_was_attempted_fresh() -> None:
    inputs = [reused(rec("w", 0), "g0001"), reused(rec("w", 1, kind=ErrorKind.INFRA_ERROR))]
    w = aggregate_task("alpha", cells("w", 2), inputs).arms["w"]
    assert w.health.status is HealthStatus.UNKNOWN
    assert (w.health.fresh_attempts, w.health.admissible, w.health.failures) == (0, 0, 0)


def test_health_observed_ok_even_when_nothing_resolved() -> None:
    records = [
        rec("w", 0, kind=ErrorKind.ORACLE_FAILED),
        rec("w", 1, kind=ErrorKind.VERIFY_FAILED),
        rec("w", 2, kind=ErrorKind.NO_WORK_PRODUCED),
    ]
    w = agg_of(records).arms["w"]
    assert w.resolved == 0
    assert w.health == ArmHealth(
        fresh_attempts=3, admissible=3, failures=0, reasons=[], status=HealthStatus.OBSERVED_OK
    )


def test_health_degraded_with_some_admissible() -> None:
    records = [rec("w", 0), rec("w", 1, kind=ErrorKind.SESSION_ERROR)]
    h = agg_of(records).arms["w"].health
    assert (h.status, h.fresh_attempts, h.admissible, h.failures) == (
        HealthStatus.DEGRADED,
        2,
        1,
        1,
    )
    assert h.reasons == ["session-error"]


def test_health_unusable_and_reused_success_does_not_mask_it() -> None:
    inputs = [
        reused(rec("w", 0), "g0001"),
        fresh(rec("w", 1, kind=ErrorKind.SESSION_ERROR)),
        fresh(rec("w", 2, kind=ErrorKind.SKILL_NOT_INVOKED)),
        fresh(rec("w", 3, kind=ErrorKind.SESSION_ERROR)),
    ]
    w = aggregate_task("alpha", cells("w", 4), inputs).arms["w"]
    assert (w.resolved, w.resolved_fresh) == (1, 0)
    assert w.health == ArmHealth(
        fresh_attempts=3,
        admissible=0,
        failures=3,
        reasons=["session-error", "skill-not-invoked"],
        status=HealthStatus.UNUSABLE,
    )
    assert w.health.describe("w") == (
        "[measurement-health] w: UNUSABLE fresh_attempts=3 admissible=0 failures=3"
        " reason=session-error,skill-not-invoked cause=undetermined"
    )


def test_health_summed_across_tasks_and_unusable_incumbent() -> None:
    def task(name: str, kinds: dict[str, list[ErrorKind | None]]) -> TaskAggregate:
        records = [
            rec(arm, i, kind=kind, task=name)
            for arm, ks in kinds.items()
            for i, kind in enumerate(ks)
        ]
        return aggregate_task(name, [r.cell for r in records], [fresh(r) for r in records])

    dead = ErrorKind.INFRA_ERROR
    a = task("a", {"workflow": [dead, dead], "direct": [dead], "baseline": [dead], "ok": [None]})
    b = task("b", {"workflow": [dead], "direct": [None], "baseline": [dead], "ok": [None]})
    health = arm_health([a, b])
    assert health["workflow"].status is HealthStatus.UNUSABLE
    assert health["workflow"].fresh_attempts == 3
    assert health["direct"].status is HealthStatus.DEGRADED  # unusable on a, fine on b
    assert health["ok"].status is HealthStatus.OBSERVED_OK
    assert list(health) == ["baseline", "direct", "ok", "workflow"]
    assert unusable_incumbent([a, b], ["workflow", "direct", "ok"]) == ["workflow"]
    assert unusable_incumbent([a, b], ["workflow", "baseline"]) == ["baseline", "workflow"]
    assert unusable_incumbent([b], ["direct"]) == []
    assert unusable_incumbent([], ["workflow"]) == []


def test_never_attempted_arm_is_unknown_not_unusable() -> None:
    only_reused = aggregate_task("alpha", ["w.r0"], [reused(rec("w", 0, kind=ErrorKind.CANCELLED))])
    assert arm_health([only_reused])["w"].status is HealthStatus.UNKNOWN
    assert unusable_incumbent([only_reused], ["w"]) == []


# --- fresh / reused, lineage ---------------------------------------------------------------------


def test_fresh_and_reused_counts_and_generations() -> None:
    inputs = [
        fresh(rec("w", 0, generation="g0004"), run_id="run-4"),
        reused(rec("w", 1, generation="g0003"), run="run-3"),
        reused(rec("w", 2, generation="g0001"), source="g0001"),
        reused(rec("w", 3, generation=None)),
        reused(rec("w", 4, generation="g0003")),
    ]
    agg = aggregate_task("alpha", cells("w", 5), inputs)
    w = agg.arms["w"]
    assert (w.fresh_runs, w.reused_runs, w.resolved_fresh, w.resolved) == (1, 4, 1, 5)
    assert w.reused_from_generations == ["g0001", "g0003", "outside any generation"]
    ev = {e.cell: e for e in agg.evidence}
    assert [e.cell for e in agg.evidence] == cells("w", 5)
    assert (ev["w.r0"].reused, ev["w.r0"].run_id, ev["w.r0"].generation) == (
        False,
        "run-4",
        "g0004",
    )
    assert (ev["w.r1"].reused, ev["w.r1"].source_run_id, ev["w.r1"].generation) == (
        True,
        "run-3",
        "g0003",
    )
    assert ev["w.r0"].data_version == inputs[0].record.data_version
    pinned = AggregateInput(record=rec("w", 0), data_version="dv-1")
    assert aggregate_task("alpha", ["w.r0"], [pinned]).evidence[0].data_version == "dv-1"


def test_fresh_input_cannot_claim_a_source() -> None:
    with pytest.raises(ValidationError, match="fresh record"):
        AggregateInput(record=rec("w", 0), source_generation="g0001")
    with pytest.raises(ValidationError):
        AggregateInput.model_validate({"record": rec("w", 0), "bogus": 1})


# --- completeness --------------------------------------------------------------------------------


def test_missing_cells_in_planned_order_and_empty_arms() -> None:
    planned = cells("baseline", 2) + cells("workflow", 2) + cells("cand", 2)
    records = [rec("baseline", 1), rec("cand", 0)]
    agg = aggregate_task("alpha", planned, [fresh(r) for r in reversed(records)])
    assert agg.missing_cells == ["baseline.r0", "workflow.r0", "workflow.r1", "cand.r1"]
    assert not agg.complete
    assert list(agg.arms) == ["baseline", "workflow", "cand"]
    w = agg.arms["workflow"]
    assert (w.runs, w.planned_runs, w.role, w.health.status) == (0, 2, None, HealthStatus.UNKNOWN)
    assert w.median_cost_usd is None and w.pass_at_1 is None
    assert agg.arms["cand"].role == "candidate"
    full = agg_of([rec("w", 0)])
    assert full.complete and full.missing_cells == []


def test_no_records_at_all() -> None:
    agg = aggregate_task("alpha", cells("w", 2), [])
    assert agg.missing_cells == ["w.r0", "w.r1"] and agg.task_class is None
    assert agg.arms["w"].runs == 0 and agg.evidence == []
    assert "Missing cells (2): w.r0, w.r1" in aggregate_markdown(agg)


def test_task_class_comes_from_the_latest_record() -> None:
    records = [
        rec("w", 0, task_class="bug", recorded_at="2025-01-01T00:00:00+00:00"),
        rec("w", 1, task_class="feature", recorded_at="2025-02-01T00:00:00+00:00"),
    ]
    assert agg_of(records).task_class == "feature"


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("planned", "inputs", "message"),
    [
        (["w.r0"], [fresh(rec("w", 0, task="beta"))], "another task"),
        (["w.r0"], [fresh(rec("w", 1))], "not a planned cell"),
        (["w.r0"], [fresh(rec("w", 0)), fresh(rec("w", 0))], "already has record"),
        (["w.r0"], [fresh(rec("w", 0, ad_hoc=True))], "ad-hoc"),
        (["w.r0"], [fresh(rec("w", 0).model_copy(update={"cell": "x.r0"}))], "cell key"),
        (
            ["w.r0"],
            [
                fresh(
                    rec("w", 0, kind=ErrorKind.ORACLE_FAILED).model_copy(update={"resolved": True})
                )
            ],
            "claims resolved",
        ),
        (
            ["w.r0"],
            [fresh(rec("w", 0, oracle=False).model_copy(update={"resolved": True}))],
            "claims resolved",
        ),
        (["w.r0", "w.r0"], [], "listed twice"),
        (
            ["w.r0", "w.r1"],
            [fresh(rec("w", 0)), fresh(rec("w", 1).model_copy(update={"role": "candidate"}))],
            "records of roles",
        ),
    ],
)
def test_inconsistent_evidence_is_refused(
    planned: list[str], inputs: list[AggregateInput], message: str
) -> None:
    with pytest.raises(EvidenceError, match=message) as err:
        aggregate_task("alpha", planned, inputs)
    assert isinstance(err.value, IntegrityError) and exit_code_for(err.value) == 1


def test_malformed_planned_cell_key() -> None:
    with pytest.raises(ValueError, match="bad cell key"):
        aggregate_task("alpha", ["workflow"], [])


# --- determinism, serialization, markdown ---------------------------------------------------------


def _mixed() -> tuple[list[str], list[AggregateInput]]:
    inputs = [
        fresh(rec("baseline", 0, cost=0.4)),
        fresh(rec("baseline", 1, kind=ErrorKind.SESSION_ERROR, cost=None)),
        fresh(rec("baseline", 2, kind=ErrorKind.SESSION_ERROR)),
        reused(rec("workflow", 0, cost=0.2, generation="g0001")),
        fresh(rec("workflow", 1, kind=ErrorKind.ORACLE_FAILED, cost=0.3)),
        fresh(rec("cand", 0, cost=None, tokens=1500, turns=7, duration=12.5, churn=(2, 9, 4))),
    ]
    return cells("baseline", 3) + cells("workflow", 2) + cells("cand", 2), inputs


def test_order_of_inputs_does_not_matter() -> None:
    planned, inputs = _mixed()
    expected = aggregate_task("alpha", planned, inputs)
    rng = random.Random(7)
    for _ in range(5):
        shuffled = inputs[:]
        rng.shuffle(shuffled)
        assert aggregate_task("alpha", planned, shuffled) == expected


def test_aggregate_round_trips_through_json() -> None:
    planned, inputs = _mixed()
    agg = aggregate_task("alpha", planned, inputs)
    again = TaskAggregate.model_validate_json(agg.model_dump_json())
    assert again == agg
    assert agg.model_dump(mode="json")["arms"]["cand"]["health"]["status"] == "OBSERVED_OK"


def test_markdown_table() -> None:
    planned, inputs = _mixed()
    md = aggregate_markdown(aggregate_task("alpha", planned, inputs))
    lines = md.splitlines()
    assert lines[0] == "### alpha (bug)"
    assert lines[2] == (
        "| arm | resolved/valid | pass@1 | pass^k | median cost $ | tokens | turns | wall s | churn"
        " | excluded | verify✓oracle✗ | tampered | fresh/reused | health |"
    )
    assert lines[4] == (
        "| baseline | 1/1 | 1.00 | 1.00 (k=1) | 0.4000 | 1000 | 4 | 10.0 | 1/+2/−3"
        " | 2 (session-error×2) | 0 | 0 | 3/0 | DEGRADED (session-error) |"
    )
    assert lines[5] == (
        "| workflow | 1/2 | 0.50 | 0.00 (k=2) | 0.2500 | 1000 | 4 | 10.0 | 1/+2/−3"
        " | 0 | 1 | 0 | 1/1 (from g0001) | OBSERVED_OK |"
    )
    assert lines[6] == (
        "| cand | 1/1 | 1.00 | 1.00 (k=1) | n/a | 1500 | 7 | 12.5 | 2/+9/−4"
        " | 0 | 0 | 0 | 1/0 | OBSERVED_OK |"
    )
    assert lines[-1] == "Missing cells (1): cand.r1"


def test_markdown_shows_na_for_an_arm_without_valid_runs() -> None:
    md = aggregate_markdown(agg_of([rec("w", 0, kind=ErrorKind.INFRA_ERROR)]))
    row = md.splitlines()[4]
    assert row == (
        "| w | 0/0 | n/a | n/a | n/a | n/a | n/a | n/a | n/a | 1 (infra-error×1) | 0 | 0 | 1/0"
        " | UNUSABLE (infra-error) |"
    )
