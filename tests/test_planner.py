"""The generation planner, canary rotation, generation ids, the candidate queue and the breaker."""

import datetime as dt
from typing import Any

import pytest

from bench_assets.cells.cellkeys import identity_digest
from bench_assets.generation.planner import (
    PriorCell,
    choose_canaries,
    identity_diff,
    plan_generation,
    summary,
)
from bench_assets.generation.queue import OutageBreaker, next_candidate, next_generation
from bench_assets.kernel.errorkinds import ErrorKind

NOW = dt.datetime(2026, 11, 28, 3, 0, tzinfo=dt.UTC)


def ident(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "harness_version": "0.1.0",
        "arm": {"skills": "incumbent", "agent": {"adapter": "replay"}},
        "agent": {"adapter": "replay", "version": "1.0"},
        "model": "claude-sonnet-4-5-20250929",
        "effort": "medium",
        "sandbox_backend": "bwrap",
        "resources": {"session_s": 1800.0},
        "run": 0,
        "binding": {"prompt_digest": "p1", "verify_digest": "v1", "resolved_sha": "s1"},
        "oracle": "o1",
        "graph": "g1",
        "sanitized_sha": "t1",
        "skills": "k1",
        "overlay": None,
    }
    for k, v in over.items():
        if "." in k:
            outer, inner = k.split(".", 1)
            base[outer] = {**base[outer], inner: v}
        else:
            base[k] = v
    return base


def prior(
    identity: dict[str, Any],
    kind: ErrorKind | None = None,
    days: int = 7,
    generation: str = "g0001",
) -> PriorCell:
    return PriorCell(
        identity=identity,
        identity_digest=identity_digest(identity),
        error_kind=kind,
        recorded_at=NOW - dt.timedelta(days=days),
        generation=generation,
    )


def plan_one(
    current: dict[str, Any],
    before: PriorCell | None,
    *,
    role: str = "comparator",
    canary: bool = False,
):
    key = ("alpha", "workflow", 0)
    (cell,) = plan_generation(
        current={key: current},
        prior={key: before},
        roles={"workflow": role},  # type: ignore[dict-item]
        canary_cells={key} if canary else set(),
        max_age_days=90,
        now=NOW,
    )
    return cell


def test_unchanged_cell_is_reused() -> None:
    cell = plan_one(ident(), prior(ident()))
    assert (cell.action, cell.kind) == ("reuse", "reusable")
    assert "generation g0001" in cell.reason


def test_missing_cell_runs() -> None:
    assert (plan_one(ident(), None).kind, plan_one(ident(), None).action) == ("missing", "run")


@pytest.mark.parametrize(
    "kind",
    [
        ErrorKind.SESSION_ERROR,
        ErrorKind.INFRA_ERROR,
        ErrorKind.CANCELLED,
        ErrorKind.CLEANUP_FAILURE,
    ],
)
def test_excluded_previous_result_runs(kind: ErrorKind) -> None:
    cell = plan_one(ident(), prior(ident(), kind))
    assert (cell.action, cell.kind) == ("run", "excluded") and str(kind) in cell.reason


@pytest.mark.parametrize(
    "kind",
    [
        ErrorKind.VERIFY_FAILED,
        ErrorKind.ORACLE_FAILED,
        ErrorKind.NO_WORK_PRODUCED,
        ErrorKind.SKILL_NOT_INVOKED,
    ],
)
def test_valid_negatives_are_reusable(kind: ErrorKind) -> None:
    assert plan_one(ident(), prior(ident(), kind)).action == "reuse"


def test_expired_record_runs() -> None:
    cell = plan_one(ident(), prior(ident(), days=91))
    assert (cell.action, cell.kind) == ("run", "expired") and "90 days" in cell.reason


@pytest.mark.parametrize(
    ("change", "named", "kind"),
    [
        ({"model": "claude-opus-4-1-20250805"}, "model", "code"),
        ({"effort": "high"}, "effort", "code"),
        ({"agent.version": "1.1"}, "agent.version", "code"),
        ({"sandbox_backend": "other"}, "sandbox_backend", "code"),
        ({"harness_version": "0.2.0"}, "harness_version", "code"),
        ({"resources": {"session_s": 60.0}}, "resources.session_s", "code"),
        ({"binding.prompt_digest": "p2"}, "binding.prompt_digest", "upstream"),
        ({"oracle": "o2"}, "oracle", "upstream"),
        ({"graph": "g2"}, "graph", "upstream"),
        ({"skills": "k2"}, "skills", "upstream"),
    ],
)
def test_changes_name_the_field(change: dict[str, Any], named: str, kind: str) -> None:
    cell = plan_one(ident(**change), prior(ident()))
    assert (cell.action, cell.kind) == ("run", kind)
    assert named in cell.changed and named in cell.reason


def test_candidate_cells_run_for_a_new_overlay_only() -> None:
    old = ident(overlay="ov1")
    assert plan_one(ident(overlay="ov2"), prior(old), role="candidate").kind == "candidate"
    assert plan_one(ident(overlay="ov1"), prior(old), role="candidate").action == "reuse"
    assert plan_one(ident(overlay="ov2"), None, role="candidate").action == "run"


def test_canary_is_paid_even_when_reusable() -> None:
    cell = plan_one(ident(), prior(ident()), canary=True)
    assert (cell.action, cell.kind) == ("run", "canary")
    # A canary slot on a cell that must run anyway does not change why it runs.
    assert plan_one(ident(model="x-20250101"), prior(ident()), canary=True).kind == "code"


def test_canaries_one_per_comparator_arm_rotating_by_generation() -> None:
    tasks = ["a", "b", "c"]
    picks = [
        choose_canaries(tasks, ["baseline", "workflow"], 3, f"g{n:04d}", 1) for n in range(1, 10)
    ]
    for chosen in picks:
        assert sorted(arm for _, arm, _ in chosen) == ["baseline", "workflow"]
    workflow = [next(c for c in chosen if c[1] == "workflow") for chosen in picks]
    assert len(set(workflow)) == 9, "rotation visits every cell before repeating"
    assert choose_canaries(tasks, ["workflow"], 3, "g0004", 1) == {
        c for c in picks[3] if c[1] == "workflow"
    }
    assert choose_canaries(tasks, ["workflow"], 3, "g0004", 0) == set()


def test_identity_diff_names_leaves() -> None:
    assert identity_diff({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": 1, "c": 5}, "e": 3}) == [
        "a.c",
        "d",
        "e",
    ]


def test_summary_counts() -> None:
    cells = [plan_one(ident(), prior(ident())), plan_one(ident(), None)]
    assert summary(cells) == {"run": 1, "reuse": 1, "reusable": 1, "missing": 1}


def test_generation_ids() -> None:
    assert next_generation([]) == "g0001"
    assert next_generation(["g0001", None, "g0009", "bogus", "g0003"]) == "g0010"


def test_queue_takes_each_candidate_once() -> None:
    assert next_candidate(["c2", "c1", "c3"], []) == "c1"
    assert next_candidate(["c2", "c1", "c3"], ["c1", None]) == "c2"
    assert next_candidate(["c1"], ["c1"]) is None


def test_breaker_trips_on_five_consecutive_systemic_failures() -> None:
    b = OutageBreaker(5)
    kinds = [
        ErrorKind.SESSION_ERROR,
        ErrorKind.INFRA_ERROR,
        ErrorKind.SESSION_ERROR,
        ErrorKind.CLEANUP_FAILURE,
        ErrorKind.INFRA_ERROR,
    ]
    assert [b.observe(k) for k in kinds] == [False, False, False, False, True]
    assert b.observe(None) is True, "a tripped breaker stays tripped"


def test_breaker_ignores_valid_negatives_and_resets_on_success() -> None:
    b = OutageBreaker(5)
    for _ in range(5):
        assert not b.observe(ErrorKind.ORACLE_FAILED)
    for _ in range(4):
        b.observe(ErrorKind.SESSION_ERROR)
    assert not b.observe(None)
    for _ in range(4):
        assert not b.observe(ErrorKind.INFRA_ERROR)
    assert b.observe(ErrorKind.INFRA_ERROR)


@pytest.mark.parametrize("kind", [ErrorKind.INFRA_ERROR, ErrorKind.SESSION_ERROR])
def test_an_excluded_candidate_cell_is_paid_again_never_reused(kind: ErrorKind) -> None:
    """A candidate cell that failed for infrastructure reasons (disk full, API down) with the
    same overlay used to be reused by the next run: a fault became a permanent result."""
    same = ident(overlay="c1")
    cell = plan_one(same, prior(same, kind), role="candidate")
    assert (cell.action, cell.kind) == ("run", "excluded")
    ok = plan_one(same, prior(same, ErrorKind.ORACLE_FAILED), role="candidate")
    assert (ok.action, ok.kind) == ("reuse", "reusable"), "a valid negative is still reusable"


def test_an_insufficient_candidate_stays_queued_behind_fresh_ones() -> None:
    from bench_assets.generation.queue import next_candidate_requeue

    queue = ["c1", "c2", "c3"]
    # c1 was insufficient: the never-evaluated c2 goes first, then c1 again.
    assert next_candidate_requeue(queue, [("c1", "insufficient_evidence")], 2) == "c2"
    done = [("c1", "insufficient_evidence"), ("c2", "keep_incumbent"), ("c3", "promote")]
    assert next_candidate_requeue(queue, done, 2) == "c1"
    # ...at most `requeue` more times; a decided candidate never comes back.
    thrice = done + [("c1", "insufficient_evidence")] * 2
    assert next_candidate_requeue(queue, thrice, 2) is None
    assert next_candidate_requeue(queue, done, 0) is None
    later = [("c1", "insufficient_evidence"), ("c1", "keep_incumbent"), ("c2", "promote")]
    assert next_candidate_requeue(queue[:2], later, 5) is None
