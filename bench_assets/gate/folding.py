"""Per-task folding: the cells of both arms on one task become a :class:`Task` (counts, medians,
geometric means, the improvement and log ratio, and the gated / skill-attributable / floor flags),
which collects the task's findings and renders its :class:`~bench_assets.gate.models.TaskRow`.

Also the per-task rules both policies share: a missing arm, the ungated spend cap, the run
evidence rules and the unmeasured metric. The policy-specific per-task rules are in
:mod:`bench_assets.gate.strict` and :mod:`bench_assets.gate.paired`.
"""

import math
import statistics
from collections import Counter
from collections.abc import Iterable
from fractions import Fraction

from bench_assets.config.models import PolicyConfig
from bench_assets.gate.models import (
    ArmSummary,
    Effect,
    Finding,
    GateInput,
    Rule,
    RunOutcome,
    TaskRow,
)
from bench_assets.gate.numerics import exact
from bench_assets.kernel.errorkinds import ErrorKind, is_excluded


class Arm:
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


class Task:
    """One task's arms, the derived flags, and its findings."""

    def __init__(self, task: str, inc: Arm, cand: Arm, policy: PolicyConfig) -> None:
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
        self.count_ungated = False
        """Paired v2 counts mutually unresolved tasks (preregistered), so ungated tasks count."""

    def add(self, rule: Rule, effect: Effect, message: str) -> None:
        self.findings.append(Finding(rule=rule, effect=effect, task=self.task, message=message))

    @property
    def counted(self) -> bool:
        return (self.gated or self.count_ungated) and not any(
            f.effect == "insufficient" for f in self.findings
        )

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


def fold(inp: GateInput) -> list[Task]:
    """Every planned task, sorted by id, with its incumbent and candidate outcomes."""
    grouped: dict[tuple[str, str], list[RunOutcome]] = {}
    for o in sorted(inp.outcomes, key=lambda o: (o.task, o.arm, o.run)):
        grouped.setdefault((o.task, o.arm), []).append(o)
    tasks: list[Task] = []
    for task in sorted(inp.tasks):
        inc = Arm(grouped.get((task, inp.incumbent_arm), []))
        cand = Arm(grouped.get((task, inp.candidate_arm), []))
        tasks.append(Task(task, inc, cand, inp.policy))
    return tasks


def check_runs(t: Task, policy: PolicyConfig) -> bool:
    """The shared rules on a task's runs; ``True`` when the policy's own rules apply next.

    ``False`` for a missing arm, an ungated task (after its spend cap) and a gated task whose runs
    are too few, include an excluded run or are unequal between the arms.
    """
    inc, cand = t.inc, t.cand
    if not t.present:
        missing = [name for name, arm in (("incumbent", inc), ("candidate", cand)) if arm.runs == 0]
        t.add("missing_arm", "insufficient", f"{t.task}: no {' or '.join(missing)} run recorded.")
        return False
    if not t.gated:
        cap = -100.0 * float(exact(policy.ungated_spend_cap) - 1)
        assert t.improvement_pct is not None
        if t.improvement_pct < cap:
            t.add(
                "spend_cap",
                "keep",
                f"{t.task}: mutually unresolved, and the candidate spent "
                f"{-t.improvement_pct:.1f}% more than the incumbent (cap "
                f"{policy.ungated_spend_cap:g}x).",
            )
        return False
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
    return evidence_ok


def check_measured(t: Task, policy: PolicyConfig) -> bool:
    """The unmeasured-metric rule; ``True`` when every valid run of both arms is measured."""
    inc, cand = t.inc, t.cand
    if inc.unmeasured or cand.unmeasured:
        t.add(
            "metric_unmeasured",
            "insufficient",
            f"{t.task}: {policy.metric} unmeasured on {inc.unmeasured} incumbent / "
            f"{cand.unmeasured} candidate valid runs (unknown is not zero).",
        )
        return False
    return True
