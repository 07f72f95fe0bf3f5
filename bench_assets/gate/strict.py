"""The ``strict`` policy: the original harness's rules (see :mod:`bench_assets.gate`).

Per task, once the shared run rules pass: the resolve regression and the oracle floor, then (with
every run measured) the zero incumbent median and the per-task efficiency cap. Over the set: the
resolution margin, else the median improvement. :func:`set_statistics` is computed for both
policies; the decision reads its gated-task counts.
"""

import statistics

from bench_assets.config.models import PolicyConfig
from bench_assets.gate.folding import Task
from bench_assets.gate.models import Finding, StrictStatistics
from bench_assets.gate.numerics import exact, pct

STRICT_RESOLUTION_MARGIN = 2
"""Runs the candidate must resolve beyond the incumbent to promote on resolution alone (strict)."""


def check_resolve(t: Task) -> None:
    """Resolve regression and oracle floor on a task whose runs passed the shared rules."""
    inc, cand = t.inc, t.cand
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


def check_metric(t: Task, policy: PolicyConfig) -> None:
    """Zero incumbent median and the efficiency cap on a task whose runs are all measured."""
    if t.improvement_pct is None:
        t.add(
            "metric_zero",
            "insufficient",
            f"{t.task}: incumbent median {policy.metric} is 0; no relative improvement exists.",
        )
        return
    if t.improvement_pct < -100.0 * float(exact(policy.efficiency_regression_cap)):
        t.add(
            "efficiency_cap",
            "keep",
            f"{t.task}: {policy.metric} regressed {-t.improvement_pct:.1f}% (task cap "
            f"{pct(policy.efficiency_regression_cap)}).",
        )


def set_statistics(tasks: list[Task]) -> StrictStatistics:
    """The original harness's set-level numbers: gated share, median improvement, margin."""
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


def check_set(policy: PolicyConfig, stats: StrictStatistics, findings: list[Finding]) -> None:
    """The set rules: promote on the resolution margin, else on the median improvement."""
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
    threshold = float(exact(policy.min_improvement) * 100)
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
