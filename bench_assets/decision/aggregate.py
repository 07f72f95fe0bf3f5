"""Per-task aggregation of cell records, and measurement health (defined below).

:func:`aggregate_task` folds every cell record of one task into one :class:`ArmAggregate` per arm
(plain Python: a task has a handful of rows, where a pandas frame cost ~30 ms per task, 31 s
of a 1,000-task decision). The rules, which the promotion gate and the report rely on:

* **valid runs** are records whose error kind is not excluded (:func:`errorkinds.is_excluded`):
  an excluded run says nothing about the arm's quality, so it is left out of every median and
  every rate's denominator; it is counted in ``excluded_runs`` and ``excluded_kinds``.
* **medians** are taken over valid runs only. A nullable metric (tokens, cost, turns, agent time)
  is ``None`` when any valid run left it unmeasured — one unmeasured run poisons the arm's median
  rather than letting the median quietly come from fewer, possibly cheaper, runs; every median is
  ``None`` when there is no valid run. Unmeasured is never 0. ``cost_usd_spread`` (the min–max
  the report draws as error bars) follows the same rules (:mod:`bench_assets.decision.spread`).
* ``skill-not-invoked`` runs are valid negatives: they enter the medians and ``valid_runs`` (the
  seed harness's deliberately pinned gap — filtering them would bias the medians toward
  promotion), but they count as failed measurements for health.
* ``resolved`` counts resolved records over all rows, reused included; ``resolved_fresh`` counts
  only rows this generation paid for, so reused successes never mask fresh failures. A resolved
  record never carries an error kind (checked), so every resolved run is a valid run.
* ``pass@1`` is ``resolved / valid_runs`` (``None`` without a valid run).
* ``pass^k`` is the probability that *k* independent runs all resolve the task. By default *k* is
  the arm's own number of valid runs, which makes it 1.0 when every valid run resolved and 0.0
  otherwise. With an explicit ``k`` (e.g. the planned runs, so arms are compared at the same
  *k*) it is the unbiased estimator ``C(c, k) / C(n, k)`` over *n* valid runs of which *c*
  resolved, and ``None`` when fewer than *k* runs are valid. At ``k == n`` the two coincide.
* **verify✓oracle✗** counts valid runs whose visible ``verify`` passed while the hidden oracle ran
  and failed: the agent satisfied its own tests but not the behaviour (an overfitting signal,
  :func:`verify_passed_oracle_failed`). A run whose oracle was unavailable did not fail the
  oracle and is not counted; nor is a ``grader-tampered`` run, whose outcomes were forged — it is
  counted once, as tampered.
* **grader-tampered** (``grader_tampered``) counts runs the grader found forging test outcomes (a
  planted canary test that must fail reported passed): a valid negative, and a measured cheat —
  the gate never promotes a candidate with one (:mod:`bench_assets.gate.integrity`).
  :func:`arm_cheats` sums both cheat counts per arm over tasks and names the tampered cells.
* **review metrics** (review arms only, ``review``): each score field folded over the valid runs
  by :func:`bench_assets.scorers.review_scoring.reduce_scores` — median, ``min`` for blocker recall,
  ``all()`` for the verdict and clean-control flags, unknown unless every valid run has a value.
* **health** (as the original harness defined it) looks only at fresh attempts. A fresh attempt is
  *admissible* when it is neither excluded nor ``skill-not-invoked`` (an evidence failure: the
  skill under test was never exercised). ``UNKNOWN``: no fresh attempt; ``UNUSABLE``: fresh
  attempts, none admissible; ``DEGRADED``: some failures, at least one admissible; ``OBSERVED_OK``:
  no failure. A resolve failure (``verify-failed``, ``oracle-failed`` …) is a valid negative and
  still OK.

:func:`arm_health` sums health across tasks and :func:`unusable_incumbent` lists the incumbent arms
whose summed health is ``UNUSABLE`` — the generation must fail loudly on those, after its evidence
is written. Everything here is plain Python; no Dagster.

The file is a little over 500 lines because this docstring is the specification of the rules
above; the code itself is under 450 lines.
"""

import enum
import math
import statistics
from collections import Counter
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from bench_assets.cells.cellkeys import parse_cell_key
from bench_assets.cells.records import CellRecord
from bench_assets.decision.spread import Spread, min_max
from bench_assets.kernel.errorkinds import ErrorKind, is_excluded, is_health_failure
from bench_assets.kernel.errors import EvidenceError
from bench_assets.scorers.review_scoring import ReviewScore, ReviewSummary, reduce_scores

SCHEMA_VERSION = 2
"""2: ``grader_tampered`` per arm (a schema-1 aggregate derives it from its ``error_kinds``)."""
OUTSIDE_GENERATIONS = "outside any generation"
"""How the reuse summary names evidence paid for outside any generation (a UI materialization)."""
_MEDIANS: dict[str, str] = {
    "median_input_tokens": "input_tokens",
    "median_output_tokens": "output_tokens",
    "median_cache_read_input_tokens": "cache_read_input_tokens",
    "median_cache_creation_input_tokens": "cache_creation_input_tokens",
    "median_total_tokens": "total_tokens",
    "median_cost_usd": "cost_usd",
    "median_turns": "turns",
    "median_agent_duration_s": "agent_duration_s",
    "median_duration_s": "duration_s",
    "median_churn_files": "churn_files",
    "median_churn_insertions": "churn_insertions",
    "median_churn_deletions": "churn_deletions",
}
"""Aggregate field → record field, for every median."""


class HealthStatus(enum.StrEnum):
    """Whether an arm's current environment produced usable measurements."""

    UNKNOWN = "UNKNOWN"
    OBSERVED_OK = "OBSERVED_OK"
    DEGRADED = "DEGRADED"
    UNUSABLE = "UNUSABLE"


class AggregateInput(BaseModel):
    """One cell record as used by an aggregate, with where it came from.

    Attributes:
        record: The cell record.
        reused: The cell was not paid for in this materialization; the record was carried over.
        run_id: The Dagster run whose materialization supplied the record.
        source_run_id: For reused records, the run that paid for the session.
        source_generation: For reused records, the generation the evidence was paid for in;
            defaults to the record's own ``generation``.
        data_version: The cell partition's data version; defaults to the record's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    record: CellRecord
    reused: bool = False
    run_id: str | None = None
    source_run_id: str | None = None
    source_generation: str | None = None
    data_version: str | None = None

    @model_validator(mode="after")
    def _fresh_has_no_source(self) -> "AggregateInput":
        if not self.reused and (self.source_run_id or self.source_generation):
            raise ValueError("a fresh record has no source run or source generation")
        return self

    @property
    def evidence_generation(self) -> str | None:
        """The generation that paid for this evidence (``None``: made outside any generation)."""
        gen = self.source_generation if self.reused else None
        return gen or self.record.generation

    @property
    def effective_data_version(self) -> str:
        """The data version given, or the record's own content digest."""
        return self.data_version or self.record.data_version


class CellEvidence(BaseModel):
    """One cell an aggregate rests on: what it measured and where it came from (lineage)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cell: str
    arm: str
    run: int
    record_id: str
    recorded_at: str
    generation: str | None
    """The generation that paid for the evidence (``None``: made outside any generation)."""
    reused: bool
    run_id: str | None
    source_run_id: str | None
    data_version: str
    excluded: bool
    error_kind: str | None
    resolved: bool
    verify_passed: bool
    oracle_passed: bool
    cost_usd: float | None
    total_tokens: int | None
    turns: int | None
    duration_s: float
    review: ReviewScore | None = None
    """Review arms: the run's score against the hidden labels (None: not scored)."""

    @property
    def verify_passed_oracle_failed(self) -> bool:
        """The overfitting signal of this cell (:func:`verify_passed_oracle_failed`)."""
        kind = None if self.error_kind is None else ErrorKind(self.error_kind)
        return verify_passed_oracle_failed(kind, self.verify_passed, self.oracle_passed)


def verify_passed_oracle_failed(
    kind: ErrorKind | None, verify_passed: bool, oracle_passed: bool
) -> bool:
    """A valid run whose visible verify passed while the hidden oracle ran and failed (see the
    module docstring: not an excluded, oracle-unavailable or grader-tampered run)."""
    if is_excluded(kind) or kind in (ErrorKind.ORACLE_UNAVAILABLE, ErrorKind.GRADER_TAMPERED):
        return False
    return verify_passed and not oracle_passed


class ArmHealth(BaseModel):
    """Measurement health of one arm over fresh attempts (one task, or summed over tasks)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fresh_attempts: int
    admissible: int
    failures: int
    """Fresh attempts that are not admissible (each counted once)."""
    reasons: list[str]
    """Sorted distinct error kinds of the failed fresh attempts."""
    status: HealthStatus

    @classmethod
    def from_counts(cls, fresh: int, admissible: int, reasons: Iterable[str]) -> "ArmHealth":
        """Health from counts of fresh and admissible attempts.

        Args:
            fresh: Fresh (non-reused) attempts.
            admissible: Fresh attempts that are neither excluded nor skill-not-invoked.
            reasons: Error kinds of the failed fresh attempts (duplicates allowed).

        Returns:
            The health with its status derived per the module rules.
        """
        failures = fresh - admissible
        if fresh == 0:
            status = HealthStatus.UNKNOWN
        elif admissible == 0:
            status = HealthStatus.UNUSABLE
        elif failures > 0:
            status = HealthStatus.DEGRADED
        else:
            status = HealthStatus.OBSERVED_OK
        return cls(
            fresh_attempts=fresh,
            admissible=admissible,
            failures=failures,
            reasons=sorted(set(reasons)),
            status=status,
        )

    def describe(self, arm: str) -> str:
        """One log line naming the arm and its status; never guesses a cause.

        Args:
            arm: The arm's name.

        Returns:
            ``[measurement-health] <arm>: <STATUS> fresh_attempts=… admissible=… failures=…``
            plus the failing kinds, and ``cause=undetermined`` for an unusable arm.
        """
        line = (
            f"[measurement-health] {arm}: {self.status.value} fresh_attempts={self.fresh_attempts}"
            f" admissible={self.admissible} failures={self.failures}"
        )
        if self.reasons:
            line += f" reason={','.join(self.reasons)}"
        if self.status is HealthStatus.UNUSABLE:
            line += " cause=undetermined"
        return line


class ArmAggregate(BaseModel):
    """Everything one arm did on one task, folded (see the module docstring for the rules)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arm: str
    role: Literal["comparator", "candidate"] | None
    """From the records; ``None`` when the arm has no record yet."""
    planned_runs: int
    runs: int
    valid_runs: int
    excluded_runs: int
    excluded_kinds: dict[str, int]
    error_kinds: dict[str, int]
    """Kind → count over all runs, excluded or not."""
    resolved: int
    resolved_fresh: int
    pass_at_1: float | None
    pass_k: float | None
    k: int | None
    """The *k* of ``pass_k``; ``None`` when there is no valid run."""
    median_input_tokens: float | None
    median_output_tokens: float | None
    median_cache_read_input_tokens: float | None
    median_cache_creation_input_tokens: float | None
    median_total_tokens: float | None
    median_cost_usd: float | None
    median_turns: float | None
    median_agent_duration_s: float | None
    median_duration_s: float | None
    median_churn_files: float | None
    median_churn_insertions: float | None
    median_churn_deletions: float | None
    verify_pass_oracle_fail: int
    """Valid runs whose verify passed and oracle failed (:func:`verify_passed_oracle_failed`)."""
    grader_tampered: int
    """Runs the grader found forging test outcomes (``grader-tampered``): measured cheats."""
    fresh_runs: int
    reused_runs: int
    reused_from_generations: list[str]
    """Sorted distinct generations the reused evidence was paid for in."""
    health: ArmHealth
    review: ReviewSummary | None = None
    """Review arms: the review metrics folded over valid runs (see
    :func:`bench_assets.scorers.review_scoring.reduce_scores`); None on other arms."""
    cost_usd_spread: Spread | None = None
    """Min–max of ``cost_usd`` over valid runs; None when unknown (see
    :mod:`bench_assets.decision.spread`, or an aggregate written before the field existed)."""

    @model_validator(mode="before")
    @classmethod
    def _tampered_of_schema_1(cls, data: Any) -> Any:
        # A schema-1 aggregate has no ``grader_tampered``; its ``error_kinds`` (every run's kind)
        # holds the exact count, so the field is derived, never assumed 0.
        if isinstance(data, dict) and "grader_tampered" not in data and "error_kinds" in data:
            kinds = data["error_kinds"]
            if isinstance(kinds, dict):
                tampered = kinds.get(ErrorKind.GRADER_TAMPERED.value, 0)
                data = {**data, "grader_tampered": tampered}
        return data


class TaskAggregate(BaseModel):
    """The aggregate of one task: one entry per planned arm, the evidence, and what is missing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = SCHEMA_VERSION
    task: str
    task_class: str | None
    """The class of the most recent record; ``None`` without records."""
    planned_cells: list[str]
    missing_cells: list[str]
    """Planned cells without a record, in planned order."""
    arms: dict[str, ArmAggregate]
    """Arms in the order they first appear among the planned cells."""
    evidence: list[CellEvidence]
    """Every record used, sorted by arm order then run."""

    @property
    def complete(self) -> bool:
        """Every planned cell has a record."""
        return not self.missing_cells


def _check_inputs(
    task_id: str, planned: list[str], inputs: list[AggregateInput]
) -> dict[str, AggregateInput]:
    """Index inputs by cell key, refusing anything that would make the aggregate lie."""
    if len(set(planned)) != len(planned):
        dupes = sorted({c for c in planned if planned.count(c) > 1})
        raise EvidenceError(f"task {task_id}: planned cells listed twice: {', '.join(dupes)}")
    by_cell: dict[str, AggregateInput] = {}
    for item in inputs:
        r = item.record
        where = f"task {task_id}: record {r.record_id} ({r.task}/{r.cell})"
        if r.task != task_id:
            raise EvidenceError(f"{where} belongs to another task")
        if r.ad_hoc:
            raise EvidenceError(f"{where} is an ad-hoc `wfbench try` cell, never evidence")
        if parse_cell_key(r.cell) != (r.arm, r.run):
            raise EvidenceError(f"{where} has cell key {r.cell!r} but arm {r.arm!r} run {r.run}")
        if r.cell not in planned:
            raise EvidenceError(f"{where} is not a planned cell of this generation")
        if r.cell in by_cell:
            other = by_cell[r.cell].record.record_id
            raise EvidenceError(f"{where}: cell {r.cell} already has record {other}")
        if r.resolved and (r.error_kind is not None or not (r.verify_passed and r.oracle_passed)):
            raise EvidenceError(
                f"{where} claims resolved with error kind {r.error_kind or '-'}, "
                f"verify={r.verify_passed}, oracle={r.oracle_passed}"
            )
        by_cell[r.cell] = item
    return by_cell


def _row(item: AggregateInput) -> dict[str, Any]:
    """One record's derived booleans (summed per arm) and measures (``None``: unmeasured)."""
    r = item.record
    kind = r.error_kind
    fresh = not item.reused
    admissible = not is_health_failure(kind)
    row: dict[str, Any] = {
        "arm": r.arm,
        "kind": None if kind is None else kind.value,
        "generation": item.evidence_generation,
        "valid": not is_excluded(kind),
        "resolved": r.resolved,
        "resolved_fresh": r.resolved and fresh,
        "fresh": fresh,
        "reused": item.reused,
        "disagree": verify_passed_oracle_failed(kind, r.verify_passed, r.oracle_passed),
        "tampered": kind is ErrorKind.GRADER_TAMPERED,
        "admissible": fresh and admissible,
        "failure": fresh and not admissible,
    }
    for field in _MEDIANS.values():
        value = getattr(r, field)
        row[field] = None if value is None or math.isnan(float(value)) else float(value)
    return row


def _pass_k(valid: int, resolved: int, k: int | None) -> tuple[float | None, int | None]:
    """``pass^k`` and its *k* (see the module docstring)."""
    if valid == 0:
        return None, None
    k_eff = valid if k is None else k
    if k_eff > valid:
        return None, k_eff
    return math.comb(resolved, k_eff) / math.comb(valid, k_eff), k_eff


def _kind_counts(kinds: Iterable[str | None]) -> dict[str, int]:
    counts = Counter(k for k in kinds if k is not None)
    return {key: counts[key] for key in sorted(counts)}


def _median(values: list[float | None]) -> float | None:
    """The median of an arm's valid runs; ``None`` without one or when any is unmeasured."""
    if not values or any(v is None for v in values):
        return None
    return float(statistics.median(v for v in values if v is not None))


def aggregate_task(
    task_id: str,
    planned_cells: list[str],
    inputs: Iterable[AggregateInput],
    *,
    k: int | None = None,
) -> TaskAggregate:
    """Fold one task's cell records into per-arm aggregates.

    Args:
        task_id: The task partition.
        planned_cells: Every cell key (``<arm>.r<k>``) planned for the task; arms appear in the
            aggregate in the order they first appear here, even those without any record.
        inputs: The records to fold, with their reuse provenance; order does not matter.
        k: The *k* of ``pass^k``; ``None`` uses each arm's number of valid runs.

    Returns:
        The task aggregate.

    Raises:
        EvidenceError: A record of another task, an unplanned or duplicated cell, an ad-hoc
            record, or a record claiming ``resolved`` with an error kind or a failed grader.
        ValueError: A malformed planned cell key, or ``k < 1``.
    """
    if k is not None and k < 1:
        raise ValueError(f"pass^k needs k >= 1, got {k}")
    planned = list(planned_cells)
    planned_arms: dict[str, int] = {}
    for key in planned:
        arm, _ = parse_cell_key(key)
        planned_arms[arm] = planned_arms.get(arm, 0) + 1
    by_cell = _check_inputs(task_id, planned, list(inputs))
    order = {arm: i for i, arm in enumerate(planned_arms)}
    items = sorted(by_cell.values(), key=lambda it: (order[it.record.arm], it.record.run))
    rows = [_row(it) for it in items]

    arms: dict[str, ArmAggregate] = {}
    for arm, n_planned in planned_arms.items():
        sub = [row for row in rows if row["arm"] == arm]
        valid_rows = [row for row in sub if row["valid"]]

        def count(col: str, sub: list[dict[str, Any]] = sub) -> int:
            return sum(1 for row in sub if row[col])

        median_values = {
            name: _median([row[field] for row in valid_rows]) for name, field in _MEDIANS.items()
        }
        runs = len(sub)
        valid = count("valid")
        resolved = count("resolved")
        pass_k, k_used = _pass_k(valid, resolved, k)
        roles = {it.record.role for it in items if it.record.arm == arm}
        if len(roles) > 1:
            raise EvidenceError(f"task {task_id}: arm {arm} has records of roles {sorted(roles)}")
        failed_kinds = [row["kind"] for row in sub if row["failure"] and row["kind"] is not None]
        arms[arm] = ArmAggregate(
            arm=arm,
            role=next(iter(roles)) if roles else None,
            planned_runs=n_planned,
            runs=runs,
            valid_runs=valid,
            excluded_runs=runs - valid,
            excluded_kinds=_kind_counts(row["kind"] for row in sub if not row["valid"]),
            error_kinds=_kind_counts(row["kind"] for row in sub),
            resolved=resolved,
            resolved_fresh=count("resolved_fresh"),
            pass_at_1=resolved / valid if valid else None,
            pass_k=pass_k,
            k=k_used,
            verify_pass_oracle_fail=count("disagree"),
            grader_tampered=count("tampered"),
            fresh_runs=count("fresh"),
            reused_runs=count("reused"),
            reused_from_generations=sorted(
                {
                    g if isinstance(g, str) else OUTSIDE_GENERATIONS
                    for g in (row["generation"] for row in sub if row["reused"])
                }
            ),
            health=ArmHealth.from_counts(
                count("fresh"), count("admissible"), (str(x) for x in failed_kinds)
            ),
            review=_review_summary([it.record for it in items if it.record.arm == arm]),
            cost_usd_spread=min_max(
                it.record.cost_usd
                for it in items
                if it.record.arm == arm and not is_excluded(it.record.error_kind)
            ),
            **median_values,
        )

    latest = max(items, key=lambda it: (it.record.recorded_at, it.record.record_id), default=None)
    return TaskAggregate(
        task=task_id,
        task_class=latest.record.task_class if latest else None,
        planned_cells=planned,
        missing_cells=[c for c in planned if c not in by_cell],
        arms=arms,
        evidence=[_evidence(it) for it in items],
    )


def _review_summary(records: list[CellRecord]) -> ReviewSummary | None:
    """Review metrics over the valid runs of a review arm (records that carry a review verdict)."""
    if not any(r.review_evidence_valid is not None for r in records):
        return None
    return reduce_scores([r.review for r in records if not is_excluded(r.error_kind)])


def _evidence(item: AggregateInput) -> CellEvidence:
    r = item.record
    return CellEvidence(
        cell=r.cell,
        arm=r.arm,
        run=r.run,
        record_id=r.record_id,
        recorded_at=r.recorded_at,
        generation=item.evidence_generation,
        reused=item.reused,
        run_id=item.run_id,
        source_run_id=item.source_run_id,
        data_version=item.effective_data_version,
        excluded=is_excluded(r.error_kind),
        error_kind=None if r.error_kind is None else r.error_kind.value,
        resolved=r.resolved,
        verify_passed=r.verify_passed,
        oracle_passed=r.oracle_passed,
        cost_usd=r.cost_usd,
        total_tokens=r.total_tokens,
        turns=r.turns,
        duration_s=r.duration_s,
        review=r.review,
    )


def arm_health(aggs: Iterable[TaskAggregate]) -> dict[str, ArmHealth]:
    """Health per arm summed over tasks (the status is recomputed from the sums).

    Args:
        aggs: Task aggregates.

    Returns:
        Arm → summed health, arms sorted by name.
    """
    sums: dict[str, tuple[int, int, list[str]]] = {}
    for agg in aggs:
        for arm, a in agg.arms.items():
            fresh, admissible, reasons = sums.get(arm, (0, 0, []))
            h = a.health
            sums[arm] = (fresh + h.fresh_attempts, admissible + h.admissible, reasons + h.reasons)
    return {arm: ArmHealth.from_counts(*sums[arm]) for arm in sorted(sums)}


class ArmCheats(BaseModel):
    """One arm's cheat counts summed over tasks (:func:`arm_cheats`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: int
    valid_runs: int
    grader_tampered: int
    verify_pass_oracle_fail: int
    tampered_cells: list[str]
    """``<task> <arm>.r<k> (record <id>)`` of every tampered cell, in task then run order."""


_CHEAT_COUNTS = ("runs", "valid_runs", "grader_tampered", "verify_pass_oracle_fail")


def arm_cheats(aggs: Iterable[TaskAggregate]) -> dict[str, ArmCheats]:
    """Cheat counts per arm summed over tasks, naming the tampered cells.

    Args:
        aggs: Task aggregates.

    Returns:
        Arm → its totals, arms sorted by name.
    """
    totals: dict[str, dict[str, int]] = {}
    cells: dict[str, list[str]] = {}
    for agg in aggs:
        for arm, a in agg.arms.items():
            t = totals.setdefault(arm, dict.fromkeys(_CHEAT_COUNTS, 0))
            for name in _CHEAT_COUNTS:
                t[name] += getattr(a, name)
        for e in agg.evidence:
            if e.error_kind == ErrorKind.GRADER_TAMPERED.value:
                cells.setdefault(e.arm, []).append(f"{agg.task} {e.cell} (record {e.record_id})")
    return {
        arm: ArmCheats(**t, tampered_cells=cells.get(arm, [])) for arm, t in sorted(totals.items())
    }


def unusable_incumbent(aggs: Iterable[TaskAggregate], incumbent_arms: Iterable[str]) -> list[str]:
    """Incumbent arms whose health, summed over tasks, is ``UNUSABLE``.

    A non-empty answer means the generation must fail loudly (exit 1) once its evidence, decision
    and report are written. Arms never attempted fresh are ``UNKNOWN``, not unusable.

    Args:
        aggs: Task aggregates of the generation.
        incumbent_arms: The arms whose measurement must be usable.

    Returns:
        The unusable incumbent arms, sorted.
    """
    health = arm_health(aggs)
    wanted = set(incumbent_arms)
    return sorted(
        arm for arm, h in health.items() if arm in wanted and h.status is HealthStatus.UNUSABLE
    )
