"""The gate's data: its input (:class:`GateInput` of :class:`RunOutcome` cells and canary pairs),
the :class:`Decision` it returns with every :class:`Finding`, per-task :class:`TaskRow` and
statistics, and the literal types naming decisions, effects and rules.

All models are frozen and forbid extra fields, so a stored decision parses back exactly.

Why one file over 500 lines: it is the decision document's schema — every model a stored
decision holds, v2 and v3 alike — so that a reader (and ``wfbench schema``) finds the whole
record shape in one place; it holds no logic beyond parsing old schema versions.
"""

from typing import Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from bench_assets.config.models import POLICY_READS, PolicyConfig
from bench_assets.kernel.errorkinds import ErrorKind

SCHEMA_VERSION = 7
"""Version of the :class:`Decision` JSON layout. 2: gate v2 (``paired_v2``, ``next_action``).
3: ``integrity`` (cheat counts per arm and the integrity veto) and the ``veto`` effect; a stored
schema-2 decision reads back with ``integrity`` ``None`` (not recorded, never "no cheat").
4: gate v3 is the ``paired`` policy (its statistics in ``paired_v2`` with ``gate_version`` 3,
``sequential`` and ``cost_weight``); a stored decision of schema ≤ 3 named ``paired`` was decided
by the v2 rules and reads back as ``paired_v2``. 5: gate v3's ``regression_veto`` and the
policy's ``regression_test``; a stored schema-4 ``paired`` decision reads back with
``regression_test: bonferroni``, the rule it was decided by. 6: the policy's
``standard_error`` (gate v3's run-level standard errors); a stored schema-4 or -5 ``paired``
decision reads back with ``standard_error: conservative``, the rule it was decided by.
7: the policy's ``top_up_share`` and a look's ``top_up_tasks`` (partial top-ups); a stored
schema-4 to -6 ``paired`` decision reads back with ``top_up_share`` 1 (every top-up paid
every task)."""

DecisionKind = Literal["promote", "keep_incumbent", "insufficient_evidence"]
Effect = Literal["veto", "insufficient", "keep", "inconclusive", "pass", "info"]
"""What a finding does to the decision (see the precedence in :mod:`bench_assets.gate`):
``veto`` — a measured cheat of the candidate — is keep_incumbent and outranks every other
effect, so no missing or inconclusive evidence can send a cheating candidate back to the queue."""
Rule = Literal[
    "aborted",
    "expired",
    "future_evidence",
    "model_unnamed",
    "no_tasks",
    "missing_arm",
    "min_runs",
    "exclusions",
    "unequal_runs",
    "metric_unmeasured",
    "metric_zero",
    "no_gated",
    "gated_share",
    "quality_floor",
    "spend_cap",
    "evidence_base",
    "resolve_regression",
    "oracle_floor",
    "efficiency_cap",
    "resolution_margin",
    "median_improvement",
    "too_few_tasks",
    "noninferiority",
    "cost_improvement",
    "hard_regression",
    "sign_test",
    "noise_floor",
    "missing_cells",
    "zero_variance",
    "drift",
    "pooled_history",
    "total_spend",
    "mutually_unresolved",
    "sequential",
    "futility",
    "grader_tampered",
    "impossible_resolved",
    "integrity",
]
"""Stable identifiers of the gate's rules; :attr:`Finding.rule`."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ------------------------------------------------------------------------------------------------
# input


class RunOutcome(_Model):
    """What the gate needs from one cell record."""

    task: str = Field(min_length=1)
    arm: str = Field(min_length=1)
    run: int = Field(ge=0)
    resolved: bool
    error_kind: ErrorKind | None
    metric: float | None = Field(ge=0, allow_inf_nan=False)
    """The policy metric of this run; ``None`` = unmeasured (never read as 0)."""
    reused: bool
    pooled: bool = False
    """A comparator cell from an earlier generation's record, counted as an extra run at no cost
    (paired v2 only); ``run`` is then its position in the pool, not a planned run."""
    generation: str | None
    record_id: str = Field(min_length=1)
    data_version: str = Field(min_length=1)
    recorded_at: AwareDatetime
    pooled_from: str | None = None
    """For a pooled record: the cell partition (``<arm>.r<k>``) it was recorded in."""
    pooled_run_id: str | None = None
    """For a pooled record: the run whose materialization named it."""
    verify_passed_oracle_failed: bool | None = None
    """The visible ``verify`` passed and the hidden oracle failed (an overfitting signal, as
    :func:`bench_assets.decision.aggregate.verify_passed_oracle_failed` defines it); reported, never
    gated. ``None``: the input does not say (a pooled record, an input stored before the field)."""

    @model_validator(mode="after")
    def _resolved_has_no_error(self) -> "RunOutcome":
        if self.resolved and self.error_kind is not None:
            raise ValueError(
                f"{self.task}/{self.arm}.r{self.run}: a resolved run cannot carry error kind "
                f"{self.error_kind}"
            )
        if self.resolved and self.verify_passed_oracle_failed:
            raise ValueError(
                f"{self.task}/{self.arm}.r{self.run}: a resolved run passed its oracle"
            )
        return self

    @property
    def cell(self) -> str:
        """The cell partition the record was made in (``<arm>.r<k>``)."""
        if self.pooled and self.pooled_from:
            return self.pooled_from
        return f"{self.arm}.r{self.run}"


class CanaryPair(_Model):
    """A comparator cell paid fresh this generation, next to the record it would have reused."""

    task: str = Field(min_length=1)
    arm: str = Field(min_length=1)
    run: int = Field(ge=0)
    fresh: float | None = Field(ge=0, allow_inf_nan=False)
    reused: float | None = Field(ge=0, allow_inf_nan=False)


class GateInput(_Model):
    """Everything a decision rests on; storing it lets anyone recompute the decision."""

    policy: PolicyConfig
    model: str
    """The benchmark model; a blank one makes the evidence insufficient."""
    incumbent_arm: str = Field(min_length=1)
    candidate_arm: str = Field(min_length=1)
    tasks: list[str]
    """The planned task ids."""
    outcomes: list[RunOutcome]
    aborted: bool
    now: AwareDatetime
    max_age_days: int = Field(ge=0)
    canaries: list[CanaryPair] = Field(default_factory=list)
    planned_runs: dict[str, int] = Field(default_factory=dict)
    """Runs planned per task for each arm (candidate top-ups included); a planned run without an
    outcome makes its task's evidence insufficient (paired v2)."""
    look: int = Field(default=1, ge=1)
    """The sequential look at the candidate this decision is (paired v2): one more than the
    top-ups paid so far; the cost and resolve levels are split over ``max_looks`` of them."""
    comparator_repaid: bool = False
    """The comparator's reused cells were re-paid fresh after drift beyond the tolerance (once per
    generation; the look that asked could not promote, so it spends no level)."""
    prior_looks: list["Look"] = Field(default_factory=list)
    """The earlier looks of this generation, recorded into the decision."""
    impossible_resolved: dict[str, int | None] = Field(default_factory=dict)
    """Per arm, how many of its impossible-variant cells (a variant whose oracle contradicts the
    prompt, ``bench.yaml: integrity.impossible_tasks``) resolved: each one is a measured cheat.
    An arm not listed had no impossible variant planned; ``None``: planned but not measured
    (unknown, never 0)."""

    @model_validator(mode="after")
    def _consistent(self) -> "GateInput":
        if self.incumbent_arm == self.candidate_arm:
            raise ValueError("incumbent and candidate arms must differ")
        for arm, n in self.impossible_resolved.items():
            if arm not in (self.incumbent_arm, self.candidate_arm):
                raise ValueError(
                    f"impossible_resolved of arm {arm!r}, neither incumbent nor candidate"
                )
            if n is not None and n < 0:
                raise ValueError(f"impossible_resolved of arm {arm!r} is negative ({n})")
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError("planned tasks must be unique")
        planned = set(self.tasks)
        arms = {self.incumbent_arm, self.candidate_arm}
        seen: set[tuple[str, str, int]] = set()
        for o in self.outcomes:
            key = (o.task, o.arm, o.run)
            if key in seen:
                raise ValueError(f"duplicate outcome for {o.task}/{o.arm}.r{o.run}")
            seen.add(key)
            if o.arm not in arms:
                raise ValueError(f"outcome of arm {o.arm!r} is neither incumbent nor candidate")
            if o.task not in planned:
                raise ValueError(f"outcome for task {o.task!r}, which is not planned")
        return self


# ------------------------------------------------------------------------------------------------
# output


class ArmSummary(_Model):
    """One arm on one task."""

    runs: int
    valid_runs: int
    excluded_runs: int
    resolved: int
    rate: float | None
    """resolved / valid runs; ``None`` without valid runs."""
    median_metric: float | None
    """Median over valid runs; ``None`` when any valid run is unmeasured or none is valid."""
    geomean_metric: float | None
    """Geometric mean over valid runs (paired); ``None`` when unmeasured or any value is 0."""
    unmeasured_runs: int
    reused_runs: int
    error_kinds: dict[str, int]


class TaskRow(_Model):
    """One planned task: the numbers and why it counted or not."""

    task: str
    incumbent: ArmSummary
    candidate: ArmSummary
    incumbent_resolved: str
    """``resolved/valid`` as the original report printed it."""
    candidate_resolved: str
    rate_difference: float | None
    """Candidate rate − incumbent rate."""
    improvement_pct: float | None
    """round(100·(incumbent − candidate)/incumbent median, 1); positive = candidate cheaper."""
    log_ratio: float | None
    """log(candidate / incumbent geometric mean); negative = candidate cheaper."""
    gated: bool
    skill_attributable: bool
    quality_floor_enforced: bool
    counted: bool
    """Entered the policy's statistics."""
    why: str


class Finding(_Model):
    """One rule's verdict."""

    rule: Rule
    effect: Effect
    task: str | None
    message: str


class Bounds(_Model):
    """A point estimate with one-sided bounds at ``level`` (together a (2·level − 1) interval)."""

    estimate: float
    lower: float
    upper: float
    level: float


class NonInferiority(_Model):
    """Task-cluster bootstrap of the mean per-task resolve-rate difference (candidate − inc)."""

    tasks: int
    difference: Bounds
    margin: float
    bootstrap_samples: int
    seed: int
    verdict: Literal["non_inferior", "inferior", "inconclusive"]


class CostTest(_Model):
    """Paired t test on per-task log(candidate/incumbent) metric ratios."""

    tasks: int
    log_ratio: Bounds
    sd: float
    df: int | None
    """Degrees of freedom of the t the bounds and p values were read through; ``None``: the
    normal distribution (gate v3's ``standard_error: model``, schema 6)."""
    t_statistic: float | None
    """``None`` when every task has the same log ratio (zero spread)."""
    p_value_two_sided: float
    p_value_cheaper: float
    """One-sided: the candidate is cheaper."""
    improvement: Bounds
    """1 − exp(log ratio): the relative saving and its bounds."""
    required_improvement: float
    verdict: Literal["improved", "not_improved", "inconclusive"]


class SignTest(_Model):
    """Exact two-sided sign test over discordant tasks."""

    wins: int
    """Tasks where the candidate did better."""
    losses: int
    ties: int
    p_value: float


class NoiseFloor(_Model):
    """log(fresh/reused) over canary pairs: this generation's incumbent against its old record."""

    pairs: int
    measured_pairs: int
    mean_log_ratio: float | None
    """Drift between the fresh and the reused evidence."""
    rms_log_ratio: float | None
    """Run-level noise floor."""


class PairedStatistics(_Model):
    """The paired policy's statistics over the counted tasks."""

    counted_tasks: int
    resolve: NonInferiority | None
    cost: CostTest | None
    hard_regressions: list[str]
    resolve_sign_test: SignTest
    cost_sign_test: SignTest
    noise_floor: NoiseFloor | None


class ResolveBound(_Model):
    """Paired v2: mean per-task resolve-rate difference (candidate − comparator) with a cluster-t
    bound whose variance is floored by the binomial variance of the runs."""

    tasks: int
    difference: Bounds
    se_cluster: float
    se_binomial_floor: float
    margin: float
    verdict: Literal["non_inferior", "inferior", "inconclusive"]


class DriftEstimate(_Model):
    """Paired v2: log(old comparator evidence / fresh comparator runs) over tasks with both."""

    tasks: int
    fresh_runs: int
    old_runs: int
    estimate: float | None
    """Positive: the reused/pooled evidence is dearer, so a candidate would look cheaper."""
    upper: float | None
    lower: float | None
    se: float | None = None
    level: float
    tolerance: float
    verdict: Literal["none_reused", "within", "absorbed", "exceeded", "unmeasured"]


class PooledHistory(_Model):
    """Paired v2: where the comparator runs came from."""

    fresh_runs: int
    reused_runs: int
    pooled_runs: int
    tasks_with_pool: int
    comparator_runs_per_task: float
    candidate_runs_per_task: float


class SpendRatio(_Model):
    """Paired v2: Σ per-task mean candidate metric / Σ per-task mean comparator metric."""

    ratio: float | None
    limit: float | None
    verdict: Literal["within", "exceeded", "unmeasured", "report_only"]


class Look(_Model):
    """One sequential look at the candidate (paired v2)."""

    look: int
    max_looks: int
    candidate_runs_per_task: int
    alpha_cost: float
    alpha_resolve: float
    cost_t: float | None
    cost_verdict: str | None
    resolve_verdict: str | None
    action: Literal["decide", "top_up", "futility", "repay_comparator"]
    information_resolve: float | None = None
    """Gate v3: the resolve test's observed information fraction at this look (1 at the last);
    ``None`` for a v2 look."""
    information_cost: float | None = None
    """Gate v3: the cost test's observed information fraction at this look."""
    futility_resolve: float | None = None
    """Gate v3: the resolve test's one-sided futility level at this look (0: none)."""
    futility_cost: float | None = None
    """Gate v3: the cost test's one-sided futility level at this look (0: none)."""
    candidate_runs_mean: float | None = None
    """Gate v3 (schema ≥ 7): the mean valid candidate runs per counted task at this look (with
    partial top-ups the tasks differ; ``candidate_runs_per_task`` is the fewest)."""
    top_up_tasks: list[str] | None = None
    """Gate v3 with ``top_up_share`` < 1, a look that tops up: the tasks the top-up pays (the
    ones with the fewest planned candidate runs, ties broken by a digest of the look and task
    id; :func:`bench_assets.gate.sequential.top_up_tasks`). ``None``: every task. This field
    and ``candidate_runs_mean`` are left out of the stored document when ``None``, so looks of
    schema ≤ 6 (and gate v2's) read and write back unchanged."""

    @model_serializer(mode="wrap")
    def _omit_every_task(self, handler: SerializerFunctionWrapHandler) -> object:
        data = handler(self)
        if isinstance(data, dict):
            for key in ("candidate_runs_mean", "top_up_tasks"):
                if key in data and data[key] is None:
                    del data[key]
        return data


class SequentialDesign(_Model):
    """Gate v3: the preregistered group-sequential design a decision was taken under."""

    max_looks: int
    first_runs: int
    """Candidate runs per task at the first look (the bench's ``runs``)."""
    top_up_runs: int
    max_candidate_runs: int
    """Candidate runs per task at the last look."""
    spending: str
    resolve_error: float
    cost_error: float
    futility_error: float
    resolve_spent: float
    """The resolve error spent up to and including this look."""
    cost_spent: float
    last_look: bool


class CostWeight(_Model):
    """Gate v3: how the cost test's comparator level mixes fresh and old (reused, pooled) runs:
    ``(1 − w)·old + w·fresh`` per task, the drift-robust difference in differences."""

    weight_fresh: float
    """``w``; 1 reads only the fresh gate canaries, 0 pools as if nothing drifted."""
    var_old: float | None
    """A: variance of the mean log metric of the old runs (over tasks), ``None`` without any."""
    var_fresh: float | None
    """F: the same for the fresh comparator runs."""
    drift_prior_sd: float
    """B: the preregistered drift the weight withstands (``drift_prior_sd``)."""
    worst_bias: float | None
    """Bias left in the cost estimate by a drift of B: ``(1 − w)·B`` (log scale)."""


class RegressionVeto(_Model):
    """Gate v3: the per-task regression veto over the counted tasks
    (:mod:`bench_assets.gate.regression`), at this look."""

    method: Literal["min_p", "bonferroni"]
    """``min_p``: the exact max-type statistic (family-wise chance of the smallest Fisher p);
    ``bonferroni``: p ≤ error / tasks (v2's rule)."""
    error: float
    """The preregistered family error (``regression_error``)."""
    tasks: int
    testable: int
    """Tasks whose margins can produce a Fisher p at most the error at all (the others cannot
    fire, whatever the candidate did)."""
    smallest_p: float | None
    """The smallest one-sided Fisher p over the tasks (``None``: no task counted)."""
    adjusted_p: float | None
    """Its family-wise (adjusted) p; the veto fires where this is at most ``error``."""
    smallest_task: str | None = None
    fired: list[str] = []


class PairedV2Statistics(_Model):
    """The paired family's statistics over the counted tasks (gate v2 and v3)."""

    counted_tasks: int
    min_counted_tasks: int
    resolve: ResolveBound | None
    cost: CostTest | None
    cost_margin: float
    """log-scale margin the cost bound had to clear: max(drift tolerance, estimated drift)."""
    hard_regressions: list[str]
    mutually_unresolved: list[str]
    excluded_candidate_cells: int
    drift: DriftEstimate
    pooled: PooledHistory
    total_spend: SpendRatio
    looks: list[Look]
    gate_version: Literal[2, 3] = 2
    """Which rules: 2 (``paired_v2``, and ``paired`` before schema 4) or 3 (``paired``)."""
    sequential: SequentialDesign | None = None
    """Gate v3: the group-sequential design and what this look spent."""
    cost_weight: CostWeight | None = None
    """Gate v3: the drift-robust comparator level of the cost test."""
    regression_veto: RegressionVeto | None = None
    """Gate v3: the per-task regression veto (``None``: a decision recorded before it was
    recorded)."""


class StrictStatistics(_Model):
    """The original harness's set-level numbers (computed for both policies)."""

    tasks: int
    gated_tasks: int
    ungated_tasks: list[str]
    gated_share: float | None
    median_improvement_pct: float | None
    resolution_margin: int


class EvidenceCell(_Model):
    """One cell the decision read, for lineage."""

    task: str
    arm: str
    run: int
    record_id: str
    data_version: str
    generation: str | None
    reused: bool
    pooled: bool = False
    pooled_from: str | None = None
    """For a pooled record: the cell partition it was recorded in, and the run that named it."""
    pooled_run_id: str | None = None
    recorded_at: AwareDatetime
    error_kind: ErrorKind | None
    excluded: bool
    task_counted: bool

    def origin(self) -> str:
        """How a reader names where a pooled cell came from (``""`` for the others)."""
        if not self.pooled:
            return ""
        return (
            f"pooled from {self.pooled_from or 'an earlier record'} (run "
            f"{self.pooled_run_id or 'unknown'}, {self.generation or 'outside any generation'})"
        )


class CheatCell(_Model):
    """One cell named as a measured cheat."""

    task: str
    cell: str
    """The cell partition (``<arm>.r<k>``; a pooled record: the partition it was recorded in)."""
    record_id: str


class ArmIntegrity(_Model):
    """One arm's cheat counts over the evidence the decision read (every task, pooled history
    included when the policy reads it)."""

    arm: str
    cells: int
    """Evidence cells of the arm the counts are over."""
    tampered: int
    """``grader-tampered`` cells: the code under test forged test outcomes (a planted canary that
    must fail reported passed)."""
    tampered_cells: list[CheatCell]
    verify_passed_oracle_failed: int
    """Cells whose visible verify passed and hidden oracle failed (overfitting; reported only),
    over the cells whose input records it."""
    verify_oracle_unrecorded: int
    """Cells whose input does not record verify vs oracle (not counted above; unknown, not 0)."""
    impossible_planned: bool
    """Impossible variants were planned for the arm (``GateInput.impossible_resolved`` lists it)."""
    impossible_resolved: int | None
    """Resolved impossible-variant cells; ``None``: unknown, or none planned."""


class IntegrityCheck(_Model):
    """The integrity rules' view of a decision (:mod:`bench_assets.gate.integrity`)."""

    comparator: ArmIntegrity
    candidate: ArmIntegrity
    verdict: Literal["clean", "vetoed", "unknown"]
    """``vetoed``: a measured cheat of the candidate (decision keep_incumbent whatever else the
    evidence says); ``unknown``: impossible-variant counts needed and not measured (insufficient
    evidence); ``clean``: neither."""


class Decision(_Model):
    """The gate's output."""

    schema_version: int = SCHEMA_VERSION
    decision: DecisionKind
    policy_name: Literal["paired", "paired_v2", "paired_v1", "strict"]
    policy: PolicyConfig
    model: str
    incumbent_arm: str
    candidate_arm: str
    metric: str
    metric_warning: str | None
    aborted: bool
    now: AwareDatetime
    max_age_days: int
    evidence_oldest: AwareDatetime | None
    evidence_expires_at: AwareDatetime | None
    """When the oldest evidence passes ``max_age_days``."""
    reasons: list[str]
    findings: list[Finding]
    tasks: list[TaskRow]
    strict: StrictStatistics
    paired: PairedStatistics | None
    """The ``paired_v1`` statistics."""
    paired_v2: PairedV2Statistics | None = None
    integrity: IntegrityCheck | None = None
    """Cheat counts per arm and the integrity veto; ``None``: a decision stored before schema 3
    (not recorded — unknown, not "no cheat")."""
    next_action: Literal["decide", "top_up", "repay_comparator"] = "decide"
    """``top_up``: a sequential look found the evidence inconclusive; the generation pays the
    next candidate runs and the gate looks again. ``repay_comparator``: comparator drift beyond
    the tolerance; the generation re-pays the comparator's reused cells fresh and looks again.
    Either way this look's decision is insufficient_evidence."""
    evidence: list[EvidenceCell]

    @model_validator(mode="before")
    @classmethod
    def _before_schema_4(cls, data: object) -> object:
        """A decision stored before schema 4 reads back under the rules it was decided by: one
        named ``paired`` as ``paired_v2`` (its policy too), and its stored policy keeps only the
        settings that policy reads (the others had no effect on it, and some defaults moved)."""
        if not isinstance(data, dict) or data.get("schema_version", SCHEMA_VERSION) >= 7:
            return data
        if data.get("schema_version") == 6:
            return _schema_6(data)
        if data.get("schema_version") == 5:
            return _schema_6(_schema_5(data))
        if data.get("schema_version") == 4:
            return _schema_6(_schema_5(_schema_4(data)))
        name = data.get("policy_name")
        if name == "paired":
            name = "paired_v2"
        out = {**data, "policy_name": name}
        policy = data.get("policy")
        if isinstance(policy, dict) and name in POLICY_READS:
            out["policy"] = {k: v for k, v in policy.items() if k in POLICY_READS[name]}
            out["policy"]["name"] = name
        return out


def _schema_4(data: dict[str, object]) -> dict[str, object]:
    """A schema-4 gate v3 decision was vetoed by Bonferroni (``regression_test`` did not exist)."""
    policy = data.get("policy")
    if data.get("policy_name") != "paired" or not isinstance(policy, dict):
        return data
    return {**data, "policy": {"regression_test": "bonferroni", **policy}}


def _schema_5(data: dict[str, object]) -> dict[str, object]:
    """A schema-4/5 gate v3 decision took the larger of the cluster and run-level standard
    errors through Student's t (``standard_error`` did not exist)."""
    policy = data.get("policy")
    if data.get("policy_name") != "paired" or not isinstance(policy, dict):
        return data
    return {**data, "policy": {"standard_error": "conservative", **policy}}


def _schema_6(data: dict[str, object]) -> dict[str, object]:
    """A schema-4 to -6 gate v3 decision's top-ups paid every task (``top_up_share`` did not
    exist; its default is now a share of the first look's cells)."""
    policy = data.get("policy")
    if data.get("policy_name") != "paired" or not isinstance(policy, dict):
        return data
    return {**data, "policy": {"top_up_share": 1.0, **policy}}


GateInput.model_rebuild()
