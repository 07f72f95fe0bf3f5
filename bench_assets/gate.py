"""The promotion gate (SPEC §9): pure, deterministic code that decides from cell outcomes.

:func:`decide` turns a :class:`GateInput` (one :class:`RunOutcome` per cell of the incumbent and
candidate arms, the preregistered :class:`~bench_assets.models.PolicyConfig`, the planned tasks,
evidence timestamps and optional canary pairs) into a :class:`Decision`. It reads no clock, no
file and no environment; the bootstrap is seeded with ``policy.seed``, so the same input always
gives the same decision (the stored decision can be recomputed and compared).

Three answers. ``insufficient_evidence`` (the evidence cannot support a conclusion) is distinct
from ``keep_incumbent`` (the evidence shows the candidate is not better, or is worse).

Common rules (both policies)
----------------------------
Per planned task (sorted by id), with per arm: *valid* runs = runs whose error kind is not
excluded (:func:`~bench_assets.errorkinds.is_excluded`), *rate* = resolved / valid runs, the
*median* metric over valid runs (null when any valid run is unmeasured), and the original
harness's ``improvement_pct = round(100·(inc − cand)/inc, 1)`` of the medians (null when either is
null or the incumbent median is 0):

* *fully measured* = both arms have ≥ ``min_runs`` valid runs, equally many, and no excluded run;
  *skill-attributable* = a ``skill-not-invoked`` run in either arm; *mutually unresolved* = fully
  measured and neither arm resolved a run. A task is **gated** unless it is mutually unresolved,
  not skill-attributable and has a non-null improvement. The *oracle floor* is enforced on a task
  when the incumbent resolved ≥ 1 run or the task is skill-attributable.
* Ungated task: only the spend cap — ``improvement_pct < −100·(ungated_spend_cap − 1)`` →
  keep_incumbent (the original harness used 100 %, i.e. a cap of 2×).
* Gated task, evidence (→ insufficient_evidence): an arm with no outcome; fewer than ``min_runs``
  valid runs; any excluded run; unequal valid runs; a valid run with unmeasured metric (unknown is
  never zero, so it can never help a candidate pass); incumbent median 0 (strict) or a metric ≤ 0
  on a valid run (paired: its log is undefined).
* A task is **counted** (enters the statistics) when it is gated and passes every evidence rule.
* Set level (→ insufficient_evidence): aborted generation; any outcome older than
  ``max_age_days`` at ``now`` (expired) or recorded more than 5 minutes after ``now``; unnamed
  model; no planned task; no gated task; gated tasks < ``min_gated_share`` · planned tasks.
* ``quality_floor`` > 0: the candidate's pooled resolve rate over counted tasks below it →
  keep_incumbent.

``strict`` — the original harness's rules, faithfully (reference seed-system §9)
-------------------------------------------------------------------------------
On a gated, fully measured task: candidate rate < incumbent rate → keep (resolve regression);
oracle floor enforced and the candidate did not resolve every valid run → keep ("must resolve
every valid run for the oracle-backed quality floor");
``improvement_pct < −100·efficiency_regression_cap`` → keep (task cap). Then
``median_improvement_pct`` = median of the gated tasks' improvements (1 dp), and
``resolution_margin`` = Σ candidate resolved − Σ incumbent resolved over all tasks with both arms.
Decision: any insufficiency → insufficient_evidence; any regression → keep_incumbent;
margin ≥ 2 → promote; else median ≥ ``100·min_improvement`` → promote; else keep_incumbent.
The paired-only settings (``resolve_margin``, the confidences, the bootstrap) are not used: the
original allowed no per-task drop at all.

``paired`` (default) — the same questions, judged statistically
----------------------------------------------------------------
Over the *n* counted tasks (n ≥ 2, else insufficient_evidence):

1. **Resolve-rate non-inferiority.** ``d_t`` = candidate rate − incumbent rate per task.
   Task-cluster paired bootstrap (``bootstrap_samples`` resamples of n tasks with replacement,
   ``numpy`` PCG64 seeded with ``policy.seed``; the statistic is the mean of ``d_t``, computed in
   exact integer units so that lattice values never meet a margin through float rounding). With
   ``a = 1 − noninferiority_confidence`` and ``k = max(1, ⌊a·B⌋)``, the lower bound ``L`` is the
   k-th smallest resample mean and the upper bound ``U`` the k-th largest.
   ``L ≥ −resolve_margin`` → non-inferior; ``U < −resolve_margin`` → inferior (keep_incumbent);
   otherwise inconclusive (insufficient_evidence).
2. **Cost improvement.** ``x_t`` = log(geometric mean of the candidate's valid-run metric) −
   log(geometric mean of the incumbent's), a paired log ratio per task. One-sample Student t on
   ``x_t`` (df = n − 1); ``lo``/``hi`` = one-sided bounds at ``confidence``. Improved when
   ``hi < 0`` (significantly cheaper) **and** ``1 − exp(mean x) ≥ min_improvement`` (the estimate
   clears the practical threshold) → pass; ``lo > log(1 − min_improvement)`` (confidently less than
   the threshold, or dearer) → keep_incumbent; otherwise inconclusive (insufficient_evidence).
3. **Single-task hard regression** → keep_incumbent, on any task whose runs are complete: the
   incumbent resolved every valid run and the candidate none, or a one-sided Fisher exact test of
   "candidate resolves less" has ``p ≤ (1 − confidence) / m`` over the m tested tasks (Bonferroni,
   so the guard does not fire more often as tasks are added; at 3 runs only 3/3 vs 0/3 trips it,
   via the first clause, whose exact p is 1/20).
4. Promote only when 1 and 2 pass and no rule above or in the common rules objects.

Precedence: any insufficiency of evidence → insufficient_evidence; else any keep rule →
keep_incumbent (an observed regression outweighs an inconclusive test); else any inconclusive test
→ insufficient_evidence; else promote.

The strict per-task efficiency cap is not applied by ``paired``: with lognormal run noise σ = 0.3
a single task's median ratio exceeds 1.25 about one time in five even for identical arms, so the
mean log-ratio test carries that question instead. Reported only (never decisive): exact two-sided
sign tests over tasks discordant in resolve rate and in cost, and the canary noise floor (RMS and
mean of log(fresh/reused) over canary pairs) — one canary cell per comparator arm is too few runs
to gate on without adding more noise than it removes.

Unlike strict's resolution-margin path, ``paired`` never promotes on resolve rate alone: a
candidate that resolves more at equal cost ends keep_incumbent or insufficient_evidence (adding
that path would spend part of the 5 % false-promotion budget; it is not calibrated).

Why ``noninferiority_confidence`` (0.85) defaults below ``confidence`` (0.95): see
``bench/gate_calibration.py``. At 10 tasks × 3 runs the standard error of the mean rate
difference is ≈ 0.115 when tasks resolve at 0.3–0.95, so a 95 % bound clears a 0.10 margin only
when the candidate is observed ≈ 0.08 *better*; at 0.95–1 it fails as soon as the candidate loses
two runs more than the incumbent. The level trades resolve-regression protection for power, and
the calibration prints both sides of that trade.

The bootstrap draws come from numpy's PCG64 stream: a decision recomputes bit-for-bit on the same
numpy release; a numpy upgrade that changed ``Generator.integers`` would move bootstrap bounds.
"""

import datetime as dt
import functools
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from bench_assets.errorkinds import ErrorKind, is_excluded
from bench_assets.models import PolicyConfig

SCHEMA_VERSION = 1
"""Version of the :class:`Decision` JSON layout."""

STRICT_RESOLUTION_MARGIN = 2
"""Runs the candidate must resolve beyond the incumbent to promote on resolution alone (strict)."""

CLOCK_SKEW = dt.timedelta(minutes=5)
"""Evidence recorded later than ``now`` plus this is refused as a clock error."""

DecisionKind = Literal["promote", "keep_incumbent", "insufficient_evidence"]
Effect = Literal["insufficient", "keep", "inconclusive", "pass", "info"]
"""What a finding does to the decision (see the precedence in the module docstring)."""
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
]
"""Stable identifiers of the gate's rules; :attr:`Finding.rule`."""

_METRIC_WARNINGS = {
    "total_tokens": "token counts may cover only the main agent loop; cost_usd is the metric "
    "that includes subagent spend",
    "turns": "turn counts may cover only the main agent loop; cost_usd is the metric that "
    "includes subagent spend",
}


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
    generation: str | None
    record_id: str = Field(min_length=1)
    data_version: str = Field(min_length=1)
    recorded_at: AwareDatetime

    @model_validator(mode="after")
    def _resolved_has_no_error(self) -> "RunOutcome":
        if self.resolved and self.error_kind is not None:
            raise ValueError(
                f"{self.task}/{self.arm}.r{self.run}: a resolved run cannot carry error kind "
                f"{self.error_kind}"
            )
        return self


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

    @model_validator(mode="after")
    def _consistent(self) -> "GateInput":
        if self.incumbent_arm == self.candidate_arm:
            raise ValueError("incumbent and candidate arms must differ")
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
    df: int
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
    recorded_at: AwareDatetime
    error_kind: ErrorKind | None
    excluded: bool
    task_counted: bool


class Decision(_Model):
    """The gate's output."""

    schema_version: int = SCHEMA_VERSION
    decision: DecisionKind
    policy_name: Literal["paired", "strict"]
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
    evidence: list[EvidenceCell]


# ------------------------------------------------------------------------------------------------
# exact and numeric statistics


def _exact(value: float) -> Fraction:
    # repr() gives the shortest decimal that round-trips, so 0.95 becomes exactly 19/20 and
    # thresholds written in bench.yaml compare exactly against counts.
    return Fraction(repr(value))


def sign_test_p(wins: int, losses: int) -> Fraction:
    """Exact two-sided sign-test p-value over ``wins + losses`` discordant pairs.

    Args:
        wins: Pairs favouring one side.
        losses: Pairs favouring the other side.

    Returns:
        ``min(1, 2·P(X ≤ min(wins, losses)))`` for ``X ~ Binomial(wins + losses, 1/2)``; 1 when
        there is no discordant pair.
    """
    if wins < 0 or losses < 0:
        raise ValueError("counts must be non-negative")
    n = wins + losses
    if n == 0:
        return Fraction(1)
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1))
    return min(Fraction(1), Fraction(2 * tail, 2**n))


def fisher_worse_p(
    inc_resolved: int, inc_runs: int, cand_resolved: int, cand_runs: int
) -> Fraction:
    """One-sided Fisher exact p-value that the candidate resolves less than the incumbent.

    Args:
        inc_resolved: Incumbent resolved runs.
        inc_runs: Incumbent valid runs.
        cand_resolved: Candidate resolved runs.
        cand_runs: Candidate valid runs.

    Returns:
        ``P(X ≤ cand_resolved)`` for the hypergeometric count of candidate successes given the
        table's margins.
    """
    if not (0 <= inc_resolved <= inc_runs and 0 <= cand_resolved <= cand_runs):
        raise ValueError("resolved must be between 0 and runs")
    total = inc_runs + cand_runs
    successes = inc_resolved + cand_resolved
    low = max(0, successes - inc_runs)
    hits = sum(
        math.comb(successes, x) * math.comb(total - successes, cand_runs - x)
        for x in range(low, cand_resolved + 1)
    )
    return Fraction(hits, math.comb(total, cand_runs))


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c = 1.0
    d = 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 + even * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + even / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + odd * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + odd / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def _regularized_beta(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    # The continued fraction converges fast only on this side of the mode; use symmetry otherwise.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: int) -> float:
    """Cumulative distribution function of Student's t.

    Args:
        t: The statistic.
        df: Degrees of freedom (≥ 1).

    Returns:
        ``P(T ≤ t)``.
    """
    if df < 1:
        raise ValueError("df must be at least 1")
    tail = 0.5 * _regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """Inverse of :func:`t_cdf` by bisection (deterministic to ~1e-12).

    Args:
        p: Probability in (0, 1).
        df: Degrees of freedom (≥ 1).

    Returns:
        ``t`` with ``P(T ≤ t) = p``.
    """
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    lo, hi = -1.0, 1.0
    while t_cdf(lo, df) > p:
        lo *= 2.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2.0


@functools.lru_cache(maxsize=64)
def _resample_indices(seed: int, n: int, samples: int) -> npt.NDArray[np.int64]:
    rng = np.random.Generator(np.random.PCG64(seed))
    idx = rng.integers(0, n, size=(samples, n), dtype=np.int64)
    idx.setflags(write=False)
    return idx


def bootstrap_sum_bounds(
    values: Sequence[int], *, samples: int, seed: int, alpha: Fraction
) -> tuple[int, int]:
    """Percentile bounds of the resampled sum of integer per-task values.

    Tasks are resampled with replacement (``samples`` resamples of ``len(values)``); the lower
    bound is the k-th smallest resample sum and the upper the k-th largest, ``k = max(1, ⌊α·B⌋)``.

    Args:
        values: One integer per task (exact, so sums never round).
        samples: Number of resamples B.
        seed: PCG64 seed.
        alpha: One-sided error rate of each bound.

    Returns:
        ``(lower, upper)`` resample sums.
    """
    if not values:
        raise ValueError("nothing to resample")
    idx = _resample_indices(seed, len(values), samples)
    sums = np.sort(np.asarray(values, dtype=np.int64)[idx].sum(axis=1))
    k = max(1, math.floor(alpha * samples))
    return int(sums[k - 1]), int(sums[samples - k])


def _t_test(xs: Sequence[float], level: float) -> tuple[Bounds, float, float | None, float, float]:
    n = len(xs)
    mean = math.fsum(xs) / n
    sd = statistics.stdev(xs)
    se = sd / math.sqrt(n)
    df = n - 1
    if se == 0.0:
        t_stat = None
        two_sided = 1.0 if mean == 0.0 else 0.0
        cheaper = 0.0 if mean < 0.0 else 1.0
        half = 0.0
    else:
        t_stat = mean / se
        two_sided = min(1.0, 2.0 * t_cdf(-abs(t_stat), df))
        cheaper = t_cdf(t_stat, df)
        half = t_quantile(level, df) * se
    bounds = Bounds(estimate=mean, lower=mean - half, upper=mean + half, level=level)
    return bounds, sd, t_stat, two_sided, cheaper


# ------------------------------------------------------------------------------------------------
# per-task evaluation


class _Arm:
    """Counts of one arm on one task, read from its outcomes."""

    def __init__(self, outcomes: Iterable[RunOutcome]) -> None:
        rows = list(outcomes)
        valid = [o for o in rows if not is_excluded(o.error_kind)]
        self.runs = len(rows)
        self.valid = len(valid)
        self.excluded = self.runs - self.valid
        self.resolved = sum(1 for o in valid if o.resolved)
        self.metrics = [o.metric for o in valid]
        self.unmeasured = sum(1 for m in self.metrics if m is None)
        self.reused = sum(1 for o in rows if o.reused)
        self.kinds = Counter(str(o.error_kind) for o in rows if o.error_kind is not None)

    @property
    def measured(self) -> list[float] | None:
        if self.valid == 0 or self.unmeasured:
            return None
        return [m for m in self.metrics if m is not None]

    @property
    def median(self) -> float | None:
        values = self.measured
        return None if values is None else float(statistics.median(values))

    @property
    def mean_log(self) -> float | None:
        values = self.measured
        if values is None or any(v <= 0 for v in values):
            return None
        return math.fsum(math.log(v) for v in values) / len(values)

    def rate(self) -> Fraction | None:
        return Fraction(self.resolved, self.valid) if self.valid else None

    def summary(self) -> ArmSummary:
        rate = self.rate()
        mean_log = self.mean_log
        return ArmSummary(
            runs=self.runs,
            valid_runs=self.valid,
            excluded_runs=self.excluded,
            resolved=self.resolved,
            rate=None if rate is None else float(rate),
            median_metric=self.median,
            geomean_metric=None if mean_log is None else math.exp(mean_log),
            unmeasured_runs=self.unmeasured,
            reused_runs=self.reused,
            error_kinds=dict(sorted(self.kinds.items())),
        )


class _Task:
    """One task's arms, the derived flags, and its findings."""

    def __init__(self, task: str, inc: _Arm, cand: _Arm, policy: PolicyConfig) -> None:
        self.task = task
        self.inc = inc
        self.cand = cand
        self.findings: list[Finding] = []
        self.present = inc.runs > 0 and cand.runs > 0
        inc_median, cand_median = inc.median, cand.median
        self.improvement_pct: float | None = None
        if inc_median is not None and cand_median is not None and inc_median != 0:
            self.improvement_pct = round(100.0 * (inc_median - cand_median) / inc_median, 1)
        inc_log, cand_log = inc.mean_log, cand.mean_log
        self.log_ratio = None if inc_log is None or cand_log is None else cand_log - inc_log
        self.fully_measured = (
            self.present
            and inc.valid >= policy.min_runs
            and cand.valid >= policy.min_runs
            and inc.valid == cand.valid
            and inc.excluded == 0
            and cand.excluded == 0
        )
        self.skill_attributable = (
            inc.kinds[ErrorKind.SKILL_NOT_INVOKED.value] > 0
            or cand.kinds[ErrorKind.SKILL_NOT_INVOKED.value] > 0
        )
        mutually_unresolved = self.fully_measured and inc.resolved == 0 and cand.resolved == 0
        self.gated = not (
            mutually_unresolved and not self.skill_attributable and self.improvement_pct is not None
        )
        self.floor_enforced = inc.resolved >= 1 or self.skill_attributable
        self.fisher_p: Fraction | None = None
        """One-sided Fisher p of "candidate resolves less"; set once the runs are complete."""
        self.hard_regression = False

    def add(self, rule: Rule, effect: Effect, message: str) -> None:
        self.findings.append(Finding(rule=rule, effect=effect, task=self.task, message=message))

    @property
    def counted(self) -> bool:
        return self.gated and not any(f.effect == "insufficient" for f in self.findings)

    def rate_numerator(self, scale: int) -> int:
        # (r_c − r_i)/n in units of 1/scale; exact because scale is a multiple of n.
        return (self.cand.resolved - self.inc.resolved) * (scale // self.inc.valid)

    def row(self) -> TaskRow:
        inc_rate, cand_rate = self.inc.rate(), self.cand.rate()
        diff = None if inc_rate is None or cand_rate is None else float(cand_rate - inc_rate)
        if self.findings:
            why = " ".join(f.message for f in self.findings)
        elif not self.gated:
            why = "mutually unresolved: not gated; only the spend cap applies"
        else:
            why = "counted"
        return TaskRow(
            task=self.task,
            incumbent=self.inc.summary(),
            candidate=self.cand.summary(),
            incumbent_resolved=f"{self.inc.resolved}/{self.inc.valid}",
            candidate_resolved=f"{self.cand.resolved}/{self.cand.valid}",
            rate_difference=diff,
            improvement_pct=self.improvement_pct,
            log_ratio=self.log_ratio,
            gated=self.gated,
            skill_attributable=self.skill_attributable,
            quality_floor_enforced=self.floor_enforced,
            counted=self.counted,
            why=why,
        )


def _pct(value: float) -> str:
    return f"{100.0 * value:.1f}%"


def _check_task(t: _Task, policy: PolicyConfig) -> None:
    inc, cand = t.inc, t.cand
    if not t.present:
        missing = [name for name, arm in (("incumbent", inc), ("candidate", cand)) if arm.runs == 0]
        t.add("missing_arm", "insufficient", f"{t.task}: no {' or '.join(missing)} run recorded.")
        return
    if not t.gated:
        cap = -100.0 * float(_exact(policy.ungated_spend_cap) - 1)
        assert t.improvement_pct is not None
        if t.improvement_pct < cap:
            t.add(
                "spend_cap",
                "keep",
                f"{t.task}: mutually unresolved, and the candidate spent "
                f"{-t.improvement_pct:.1f}% more than the incumbent (cap "
                f"{policy.ungated_spend_cap:g}x).",
            )
        return
    evidence_ok = True
    if inc.valid < policy.min_runs or cand.valid < policy.min_runs:
        t.add(
            "min_runs",
            "insufficient",
            f"{t.task}: {inc.valid} incumbent / {cand.valid} candidate valid runs, "
            f"{policy.min_runs} required.",
        )
        evidence_ok = False
    if inc.excluded or cand.excluded:
        t.add(
            "exclusions",
            "insufficient",
            f"{t.task}: {inc.excluded} incumbent / {cand.excluded} candidate runs excluded "
            "(re-run them; an excluded run is not evidence).",
        )
        evidence_ok = False
    if inc.valid != cand.valid:
        t.add(
            "unequal_runs",
            "insufficient",
            f"{t.task}: unequal valid runs ({inc.valid} incumbent vs {cand.valid} candidate).",
        )
        evidence_ok = False
    if not evidence_ok:
        return
    if policy.name == "strict":
        if cand.resolved * inc.valid < inc.resolved * cand.valid:
            t.add(
                "resolve_regression",
                "keep",
                f"{t.task}: resolve rate fell from {inc.resolved}/{inc.valid} to "
                f"{cand.resolved}/{cand.valid}.",
            )
        if t.floor_enforced and cand.resolved != cand.valid:
            t.add(
                "oracle_floor",
                "keep",
                f"{t.task}: candidate resolved {cand.resolved}/{cand.valid}; it must resolve every "
                "valid run for the oracle-backed quality floor.",
            )
    else:
        t.fisher_p = fisher_worse_p(inc.resolved, inc.valid, cand.resolved, cand.valid)
    if inc.unmeasured or cand.unmeasured:
        t.add(
            "metric_unmeasured",
            "insufficient",
            f"{t.task}: {policy.metric} unmeasured on {inc.unmeasured} incumbent / "
            f"{cand.unmeasured} candidate valid runs (unknown is not zero).",
        )
        return
    if policy.name == "strict":
        if t.improvement_pct is None:
            t.add(
                "metric_zero",
                "insufficient",
                f"{t.task}: incumbent median {policy.metric} is 0; no relative improvement exists.",
            )
            return
        if t.improvement_pct < -100.0 * float(_exact(policy.efficiency_regression_cap)):
            t.add(
                "efficiency_cap",
                "keep",
                f"{t.task}: {policy.metric} regressed {-t.improvement_pct:.1f}% (task cap "
                f"{_pct(policy.efficiency_regression_cap)}).",
            )
    elif t.log_ratio is None:
        t.add(
            "metric_zero",
            "insufficient",
            f"{t.task}: a valid run has {policy.metric} 0, so its log ratio is undefined.",
        )


# ------------------------------------------------------------------------------------------------
# set level


def _timestamps(
    inp: GateInput, findings: list[Finding]
) -> tuple[dt.datetime | None, dt.datetime | None]:
    if not inp.outcomes:
        return None, None
    oldest = min(o.recorded_at for o in inp.outcomes)
    newest = max(o.recorded_at for o in inp.outcomes)
    max_age = dt.timedelta(days=inp.max_age_days)
    expired = [o for o in inp.outcomes if inp.now - o.recorded_at > max_age]
    if expired:
        findings.append(
            Finding(
                rule="expired",
                effect="insufficient",
                task=None,
                message=f"{len(expired)} cell(s) are older than {inp.max_age_days} days "
                f"(oldest recorded {oldest.isoformat()}); evidence expired.",
            )
        )
    if newest > inp.now + CLOCK_SKEW:
        findings.append(
            Finding(
                rule="future_evidence",
                effect="insufficient",
                task=None,
                message=f"evidence recorded at {newest.isoformat()}, after the decision time "
                f"{inp.now.isoformat()}; check the clocks.",
            )
        )
    return oldest, oldest + max_age


def _hard_regressions(tasks: list[_Task], policy: PolicyConfig) -> None:
    tested = [t for t in tasks if t.fisher_p is not None]
    if not tested:
        return
    # Bonferroni over the tested tasks: the chance that any task of an unchanged candidate trips
    # the test stays below 1 − confidence however many tasks there are.
    alpha = (1 - _exact(policy.confidence)) / len(tested)
    for t in tested:
        assert t.fisher_p is not None
        all_vs_none = t.inc.resolved == t.inc.valid and t.cand.resolved == 0
        if all_vs_none or t.fisher_p <= alpha:
            t.hard_regression = True
            t.add(
                "hard_regression",
                "keep",
                f"{t.task}: hard regression: candidate resolved {t.cand.resolved}/{t.cand.valid} "
                f"where the incumbent resolved {t.inc.resolved}/{t.inc.valid} (one-sided Fisher "
                f"p = {float(t.fisher_p):.4f}).",
            )


def _strict_statistics(tasks: list[_Task]) -> StrictStatistics:
    gated = [t for t in tasks if t.gated]
    improvements = [t.improvement_pct for t in gated if t.improvement_pct is not None]
    paired = [t for t in tasks if t.present]
    return StrictStatistics(
        tasks=len(tasks),
        gated_tasks=len(gated),
        ungated_tasks=[t.task for t in tasks if not t.gated],
        gated_share=len(gated) / len(tasks) if tasks else None,
        median_improvement_pct=(
            round(float(statistics.median(improvements)), 1) if improvements else None
        ),
        resolution_margin=sum(t.cand.resolved - t.inc.resolved for t in paired),
    )


def _strict_set(policy: PolicyConfig, stats: StrictStatistics, findings: list[Finding]) -> None:
    margin = stats.resolution_margin
    if margin >= STRICT_RESOLUTION_MARGIN:
        findings.append(
            Finding(
                rule="resolution_margin",
                effect="pass",
                task=None,
                message=f"improves total task resolution by {margin} runs.",
            )
        )
        return
    if margin == 1:
        findings.append(
            Finding(
                rule="resolution_margin",
                effect="info",
                task=None,
                message="resolution margin of 1 run is treated as noise.",
            )
        )
    median = stats.median_improvement_pct
    threshold = float(_exact(policy.min_improvement) * 100)
    shown = 0.0 if median is None else median
    if median is not None and median >= threshold:
        findings.append(
            Finding(
                rule="median_improvement",
                effect="pass",
                task=None,
                message=f"median {policy.metric} improvement {shown:.1f}% meets the "
                f"{threshold:.1f}% threshold.",
            )
        )
    else:
        findings.append(
            Finding(
                rule="median_improvement",
                effect="keep",
                task=None,
                message=f"median {policy.metric} improvement {shown:.1f}% is below the "
                f"{threshold:.1f}% threshold.",
            )
        )


def _sign(wins: int, losses: int, ties: int) -> SignTest:
    return SignTest(wins=wins, losses=losses, ties=ties, p_value=float(sign_test_p(wins, losses)))


def _noise_floor(canaries: list[CanaryPair]) -> NoiseFloor | None:
    if not canaries:
        return None
    logs = [
        math.log(c.fresh / c.reused)
        for c in canaries
        if c.fresh is not None and c.reused is not None and c.fresh > 0 and c.reused > 0
    ]
    return NoiseFloor(
        pairs=len(canaries),
        measured_pairs=len(logs),
        mean_log_ratio=math.fsum(logs) / len(logs) if logs else None,
        rms_log_ratio=math.sqrt(math.fsum(x * x for x in logs) / len(logs)) if logs else None,
    )


def _noninferiority(
    counted: list[_Task], policy: PolicyConfig, findings: list[Finding]
) -> NonInferiority:
    scale = math.lcm(*(t.inc.valid for t in counted))
    values = [t.rate_numerator(scale) for t in counted]
    level = policy.noninferiority_confidence
    lo_sum, hi_sum = bootstrap_sum_bounds(
        values,
        samples=policy.bootstrap_samples,
        seed=policy.seed,
        alpha=1 - _exact(level),
    )
    denom = len(counted) * scale
    boundary = -_exact(policy.resolve_margin) * denom
    verdict: Literal["non_inferior", "inferior", "inconclusive"]
    if lo_sum >= boundary:
        verdict = "non_inferior"
    elif hi_sum < boundary:
        verdict = "inferior"
    else:
        verdict = "inconclusive"
    diff = Bounds(
        estimate=sum(values) / denom, lower=lo_sum / denom, upper=hi_sum / denom, level=level
    )
    text = (
        f"resolve rate: candidate − incumbent = {diff.estimate:+.3f} over {len(counted)} tasks, "
        f"one-sided {level:g} bounds [{diff.lower:+.3f}, {diff.upper:+.3f}] (task-cluster "
        f"bootstrap), margin −{policy.resolve_margin:g}"
    )
    effects: dict[str, Effect] = {
        "non_inferior": "pass",
        "inferior": "keep",
        "inconclusive": "inconclusive",
    }
    effect = effects[verdict]
    ending = {
        "non_inferior": "non-inferior.",
        "inferior": "inferior beyond the margin.",
        "inconclusive": "non-inferiority not shown.",
    }[verdict]
    findings.append(
        Finding(rule="noninferiority", effect=effect, task=None, message=f"{text}: {ending}")
    )
    return NonInferiority(
        tasks=len(counted),
        difference=diff,
        margin=policy.resolve_margin,
        bootstrap_samples=policy.bootstrap_samples,
        seed=policy.seed,
        verdict=verdict,
    )


def _cost_test(counted: list[_Task], policy: PolicyConfig, findings: list[Finding]) -> CostTest:
    xs = [t.log_ratio for t in counted if t.log_ratio is not None]
    bounds, sd, t_stat, two_sided, cheaper = _t_test(xs, policy.confidence)
    threshold = math.log1p(-policy.min_improvement)
    improvement = Bounds(
        estimate=-math.expm1(bounds.estimate),
        lower=-math.expm1(bounds.upper),
        upper=-math.expm1(bounds.lower),
        level=bounds.level,
    )
    verdict: Literal["improved", "not_improved", "inconclusive"]
    if bounds.upper < 0 and improvement.estimate >= policy.min_improvement:
        verdict = "improved"
    elif bounds.lower > threshold:
        verdict = "not_improved"
    else:
        verdict = "inconclusive"
    text = (
        f"{policy.metric}: candidate/incumbent geometric-mean ratio saves "
        f"{_pct(improvement.estimate)} over {len(xs)} tasks, one-sided {policy.confidence:g} "
        f"bounds [{_pct(improvement.lower)}, {_pct(improvement.upper)}] (paired t, p = "
        f"{cheaper:.4f}), required {_pct(policy.min_improvement)}"
    )
    effects: dict[str, Effect] = {
        "improved": "pass",
        "not_improved": "keep",
        "inconclusive": "inconclusive",
    }
    effect = effects[verdict]
    ending = {
        "improved": "significant improvement.",
        "not_improved": "confidently below the required improvement.",
        "inconclusive": "improvement not shown.",
    }[verdict]
    findings.append(
        Finding(rule="cost_improvement", effect=effect, task=None, message=f"{text}: {ending}")
    )
    return CostTest(
        tasks=len(xs),
        log_ratio=bounds,
        sd=sd,
        df=len(xs) - 1,
        t_statistic=t_stat,
        p_value_two_sided=two_sided,
        p_value_cheaper=cheaper,
        improvement=improvement,
        required_improvement=policy.min_improvement,
        verdict=verdict,
    )


def _paired_set(inp: GateInput, tasks: list[_Task], findings: list[Finding]) -> PairedStatistics:
    policy = inp.policy
    counted = [t for t in tasks if t.counted]
    resolve: NonInferiority | None = None
    cost: CostTest | None = None
    if len(counted) < 2:
        findings.append(
            Finding(
                rule="too_few_tasks",
                effect="insufficient",
                task=None,
                message=f"{len(counted)} counted task(s); the paired tests need at least 2.",
            )
        )
    else:
        resolve = _noninferiority(counted, policy, findings)
        cost = _cost_test(counted, policy, findings)
    rate_wins = sum(
        1 for t in counted if t.cand.resolved * t.inc.valid > t.inc.resolved * t.cand.valid
    )
    rate_losses = sum(
        1 for t in counted if t.cand.resolved * t.inc.valid < t.inc.resolved * t.cand.valid
    )
    ratios = [t.log_ratio for t in counted if t.log_ratio is not None]
    cost_wins = sum(1 for x in ratios if x < 0)
    cost_losses = sum(1 for x in ratios if x > 0)
    resolve_sign = _sign(rate_wins, rate_losses, len(counted) - rate_wins - rate_losses)
    cost_sign = _sign(cost_wins, cost_losses, len(ratios) - cost_wins - cost_losses)
    findings.append(
        Finding(
            rule="sign_test",
            effect="info",
            task=None,
            message=f"sign tests (report only): resolve {resolve_sign.wins} better / "
            f"{resolve_sign.losses} worse / {resolve_sign.ties} tied, p = "
            f"{resolve_sign.p_value:.4f}; {policy.metric} {cost_sign.wins} cheaper / "
            f"{cost_sign.losses} dearer, p = {cost_sign.p_value:.4f}.",
        )
    )
    floor = _noise_floor(inp.canaries)
    if floor is not None:
        if floor.rms_log_ratio is None or floor.mean_log_ratio is None:
            text = f"canary noise floor: none of {floor.pairs} canary pair(s) measured."
        else:
            text = (
                f"canary noise floor (report only): fresh vs reused {policy.metric} differ by "
                f"±{_pct(math.expm1(floor.rms_log_ratio))} per run (RMS over "
                f"{floor.measured_pairs} pair(s)), drift {_pct(math.expm1(floor.mean_log_ratio))}."
            )
            if cost is not None and abs(cost.log_ratio.estimate) <= floor.rms_log_ratio:
                text += " The estimated effect is within one run's noise floor."
        findings.append(Finding(rule="noise_floor", effect="info", task=None, message=text))
    return PairedStatistics(
        counted_tasks=len(counted),
        resolve=resolve,
        cost=cost,
        hard_regressions=[t.task for t in tasks if t.hard_regression],
        resolve_sign_test=resolve_sign,
        cost_sign_test=cost_sign,
        noise_floor=floor,
    )


def _verdict(findings: list[Finding]) -> DecisionKind:
    effects = {f.effect for f in findings}
    if "insufficient" in effects:
        return "insufficient_evidence"
    if "keep" in effects:
        return "keep_incumbent"
    if "inconclusive" in effects or "pass" not in effects:
        return "insufficient_evidence"
    return "promote"


_DECISIVE: dict[DecisionKind, tuple[Effect, ...]] = {
    "insufficient_evidence": ("insufficient", "inconclusive"),
    "keep_incumbent": ("keep",),
    "promote": ("pass",),
}


def decide(inp: GateInput) -> Decision:
    """Decide whether the candidate arm replaces the incumbent.

    Args:
        inp: The evidence and the preregistered policy.

    Returns:
        The decision with every finding, the per-task table, the statistics and the evidence
        cells it rests on. Pure: equal inputs give equal decisions.
    """
    policy = inp.policy
    findings: list[Finding] = []
    if inp.aborted:
        findings.append(
            Finding(
                rule="aborted",
                effect="insufficient",
                task=None,
                message="generation aborted; partial evidence cannot promote.",
            )
        )
    oldest, expires = _timestamps(inp, findings)
    if not inp.model.strip():
        findings.append(
            Finding(
                rule="model_unnamed",
                effect="insufficient",
                task=None,
                message="the benchmark model is not named.",
            )
        )

    grouped: dict[tuple[str, str], list[RunOutcome]] = {}
    for o in sorted(inp.outcomes, key=lambda o: (o.task, o.arm, o.run)):
        grouped.setdefault((o.task, o.arm), []).append(o)
    tasks: list[_Task] = []
    for task in sorted(inp.tasks):
        inc = _Arm(grouped.get((task, inp.incumbent_arm), []))
        cand = _Arm(grouped.get((task, inp.candidate_arm), []))
        t = _Task(task, inc, cand, policy)
        _check_task(t, policy)
        tasks.append(t)
    if policy.name == "paired":
        _hard_regressions(tasks, policy)
    for t in tasks:
        findings.extend(t.findings)

    strict = _strict_statistics(tasks)
    n_tasks, n_gated = len(tasks), strict.gated_tasks
    if not tasks:
        findings.append(
            Finding(rule="no_tasks", effect="insufficient", task=None, message="no planned task.")
        )
    elif n_gated == 0:
        findings.append(
            Finding(
                rule="no_gated",
                effect="insufficient",
                task=None,
                message="no task supplied quality signal (every task is mutually unresolved).",
            )
        )
    elif n_gated < _exact(policy.min_gated_share) * n_tasks:
        findings.append(
            Finding(
                rule="gated_share",
                effect="insufficient",
                task=None,
                message=f"evidence base is too thin: {n_gated}/{n_tasks} tasks gated, "
                f"{_pct(policy.min_gated_share)} required.",
            )
        )
    if tasks:
        ungated = ", ".join(strict.ungated_tasks) or "none"
        findings.append(
            Finding(
                rule="evidence_base",
                effect="info",
                task=None,
                message=f"evidence base: {n_gated}/{n_tasks} paired tasks gated; ungated "
                f"(mutually unresolved): {ungated}.",
            )
        )

    counted = [t for t in tasks if t.counted]
    if policy.quality_floor > 0 and counted:
        resolved = sum(t.cand.resolved for t in counted)
        valid = sum(t.cand.valid for t in counted)
        if Fraction(resolved, valid) < _exact(policy.quality_floor):
            findings.append(
                Finding(
                    rule="quality_floor",
                    effect="keep",
                    task=None,
                    message=f"candidate resolved {resolved}/{valid} runs on counted tasks, below "
                    f"the quality floor {_pct(policy.quality_floor)}.",
                )
            )

    paired: PairedStatistics | None = None
    if policy.name == "strict":
        _strict_set(policy, strict, findings)
    else:
        paired = _paired_set(inp, tasks, findings)

    decision = _verdict(findings)
    decisive = [f.message for f in findings if f.effect in _DECISIVE[decision]]
    others = [f.message for f in findings if f.effect not in _DECISIVE[decision]]
    headline = f"{decision} ({policy.name} policy, {inp.candidate_arm} vs {inp.incumbent_arm})."
    counted_names = {t.task for t in counted}
    return Decision(
        decision=decision,
        policy_name=policy.name,
        policy=policy,
        model=inp.model,
        incumbent_arm=inp.incumbent_arm,
        candidate_arm=inp.candidate_arm,
        metric=policy.metric,
        metric_warning=_METRIC_WARNINGS.get(policy.metric),
        aborted=inp.aborted,
        now=inp.now,
        max_age_days=inp.max_age_days,
        evidence_oldest=oldest,
        evidence_expires_at=expires,
        reasons=[headline, *decisive, *others],
        findings=findings,
        tasks=[t.row() for t in tasks],
        strict=strict,
        paired=paired,
        evidence=[
            EvidenceCell(
                task=o.task,
                arm=o.arm,
                run=o.run,
                record_id=o.record_id,
                data_version=o.data_version,
                generation=o.generation,
                reused=o.reused,
                recorded_at=o.recorded_at,
                error_kind=o.error_kind,
                excluded=is_excluded(o.error_kind),
                task_counted=o.task in counted_names,
            )
            for o in sorted(inp.outcomes, key=lambda o: (o.task, o.arm, o.run))
        ],
    )
