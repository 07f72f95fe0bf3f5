"""The promotion gate: pure, deterministic code that decides from cell outcomes.

This docstring is the authoritative description of the gate's rules; the README section
"Generations, reuse and the gate" summarizes it, and ``bench/gate_calibration.py`` measures the
rules' false-promotion rate and power.

:func:`decide` turns a :class:`GateInput` (one :class:`RunOutcome` per cell of the incumbent and
candidate arms, the preregistered :class:`~bench_assets.config.models.PolicyConfig`, the planned
tasks, evidence timestamps and optional canary pairs) into a :class:`Decision`. It reads no clock,
no file and no environment; the bootstrap is seeded with ``policy.seed``, so the same input always
gives the same decision (the stored decision can be recomputed and compared).

The package: :mod:`~bench_assets.gate.models` (input and output models),
:mod:`~bench_assets.gate.numerics` (exact tests, Student's t, the bootstrap),
:mod:`~bench_assets.gate.folding` (cells folded into per-task rows, and the per-task rules the
policies share), :mod:`~bench_assets.gate.strict`, :mod:`~bench_assets.gate.paired` (v1) and
:mod:`~bench_assets.gate.paired2` (v2) (each policy's own rules); the set-level rules shared by
the policies and the precedence live here.

Three answers. ``insufficient_evidence`` (the evidence cannot support a conclusion) is distinct
from ``keep_incumbent`` (the evidence shows the candidate is not better, or is worse).

Integrity (every policy)
------------------------
:mod:`bench_assets.gate.integrity` (whose docstring is the authoritative description) counts the
cheats of each arm over the outcomes the policy reads — grader-tampered cells, cells whose verify
passed and oracle failed (reported only), impossible-variant cells resolved — into
:attr:`Decision.integrity`. Any grader-tampered candidate cell, or more impossible-resolved
candidate cells than the comparator's, is a **veto**: keep_incumbent, whatever every other rule
says, at any look.

Common rules (both policies)
----------------------------
Per planned task (sorted by id), with per arm: *valid* runs = runs whose error kind is not
excluded (:func:`~bench_assets.kernel.errorkinds.is_excluded`), *rate* = resolved / valid runs, the
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

``strict`` — the original harness's rules, faithfully
-----------------------------------------------------
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

``paired`` (default) — gate v3
------------------------------
Issue 23's rules, in :mod:`bench_assets.gate.paired3` (whose docstring is their authoritative
description): one resolve margin (``resolve_margin``), a group-sequential design with
Lan–DeMets error spending over the looks and a mirror-image futility boundary, a drift-robust
(difference-in-differences) cost test with no tolerance band, run-level standard errors read
through the normal quantile (``standard_error``; the cluster-or-floor Student t rule on request
and for decisions of schema ≤ 5), a last look that answers, an exact min-p per-task veto, and v2's
per-task evidence rules, pooled history and total spend. A setting the chosen
policy does not read is refused by :class:`~bench_assets.config.models.PolicyConfig`.
:mod:`bench_assets.decision.power` says before any spending what a suite can promise under it.

``paired_v2`` — gate v2 (issue 13), kept for comparison
-------------------------------------------------------
In :mod:`bench_assets.gate.paired2`: a cluster-t resolve bound with a binomial variance floor
against ``v2_resolve_margin``, the comparator's pooled history and its drift against fresh runs
(absorbed up to ``drift_tolerance``), missing cells never passing, a zero-variance guard,
``min_counted_tasks``, total spend, Bonferroni-only veto, Bonferroni-split looks. A decision
stored before schema 4 under the name ``paired`` reads back as ``paired_v2``. The common rules
above apply to both paired versions except the per-task run rules (they have their own) and the
mutually-unresolved exemption (they count those tasks, preregistered).

``paired_v1`` — the issue-4 rules, kept for comparison
------------------------------------------------------
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

Precedence: an integrity veto → keep_incumbent; else any insufficiency of evidence →
insufficient_evidence; else any keep rule → keep_incumbent (an observed regression outweighs an
inconclusive test); else any inconclusive test → insufficient_evidence; else promote.

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

May import: kernel, config, scorers; it decides from a :class:`GateInput` alone (its
explanation and power report, which read decisions, are ``decision/explain.py`` and
``decision/power.py``).
"""

import datetime as dt
from fractions import Fraction

from bench_assets.config.models import PolicyConfig
from bench_assets.gate import folding, integrity, paired, paired2, paired3, sequential, strict
from bench_assets.gate.folding import Task
from bench_assets.gate.models import (
    SCHEMA_VERSION,
    ArmIntegrity,
    ArmSummary,
    Bounds,
    CanaryPair,
    CheatCell,
    CostTest,
    Decision,
    DecisionKind,
    Effect,
    EvidenceCell,
    Finding,
    GateInput,
    IntegrityCheck,
    NoiseFloor,
    NonInferiority,
    PairedStatistics,
    PairedV2Statistics,
    Rule,
    RunOutcome,
    SignTest,
    StrictStatistics,
    TaskRow,
)
from bench_assets.gate.numerics import (
    bootstrap_sum_bounds,
    exact,
    fisher_worse_p,
    pct,
    sign_test_p,
    t_cdf,
    t_quantile,
)
from bench_assets.gate.strict import STRICT_RESOLUTION_MARGIN
from bench_assets.kernel.errorkinds import is_excluded

__all__ = [
    "CLOCK_SKEW",
    "SCHEMA_VERSION",
    "STRICT_RESOLUTION_MARGIN",
    "ArmIntegrity",
    "ArmSummary",
    "Bounds",
    "CanaryPair",
    "CheatCell",
    "CostTest",
    "Decision",
    "DecisionKind",
    "Effect",
    "EvidenceCell",
    "Finding",
    "GateInput",
    "IntegrityCheck",
    "NoiseFloor",
    "NonInferiority",
    "PairedStatistics",
    "Rule",
    "RunOutcome",
    "SignTest",
    "StrictStatistics",
    "TaskRow",
    "bootstrap_sum_bounds",
    "decide",
    "fisher_worse_p",
    "sign_test_p",
    "t_cdf",
    "t_quantile",
]

CLOCK_SKEW = dt.timedelta(minutes=5)
"""Evidence recorded later than ``now`` plus this is refused as a clock error."""

_METRIC_WARNINGS = {
    "total_tokens": "token counts may cover only the main agent loop; cost_usd is the metric "
    "that includes subagent spend",
    "turns": "turn counts may cover only the main agent loop; cost_usd is the metric that "
    "includes subagent spend",
}


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


def _check_task(t: Task, policy: PolicyConfig) -> None:
    """One task's rules in order: shared run rules, the policy's resolve rules, the shared
    unmeasured-metric rule, the policy's metric rules; each stage stops the task when it fails."""
    if not folding.check_runs(t, policy):
        return
    if policy.name == "strict":
        strict.check_resolve(t)
    else:
        paired.check_resolve(t)
    if not folding.check_measured(t, policy):
        return
    if policy.name == "strict":
        strict.check_metric(t, policy)
    else:
        paired.check_metric(t, policy)


def _verdict(findings: list[Finding]) -> DecisionKind:
    effects = {f.effect for f in findings}
    if "veto" in effects:
        return "keep_incumbent"
    if "insufficient" in effects:
        return "insufficient_evidence"
    if "keep" in effects:
        return "keep_incumbent"
    if "inconclusive" in effects or "pass" not in effects:
        return "insufficient_evidence"
    return "promote"


_DECISIVE: dict[DecisionKind, tuple[Effect, ...]] = {
    "insufficient_evidence": ("insufficient", "inconclusive"),
    "keep_incumbent": ("veto", "keep"),
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

    v2 = policy.name in ("paired", "paired_v2")
    outcomes = paired2.select_outcomes(inp) if v2 else list(inp.outcomes)
    integrity_check = integrity.check(inp, outcomes, findings)
    tasks = folding.fold(inp.model_copy(update={"outcomes": outcomes}))
    if v2:
        by_task: dict[str, dict[str, list[RunOutcome]]] = {}
        for o in outcomes:
            by_task.setdefault(o.task, {}).setdefault(o.arm, []).append(o)
        for t in tasks:
            paired2.check_task(t, inp, by_task.get(t.task, {}))
            if policy.name == "paired":
                sequential.missing_top_ups(t, inp, by_task.get(t.task, {}))
    else:
        for t in tasks:
            _check_task(t, policy)
    if policy.name == "paired_v1":
        paired.hard_regressions(tasks, policy)
    for t in tasks:
        findings.extend(t.findings)

    strict_stats = strict.set_statistics(tasks)
    n_tasks, n_gated = len(tasks), strict_stats.gated_tasks
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
    elif n_gated < exact(policy.min_gated_share) * n_tasks:
        findings.append(
            Finding(
                rule="gated_share",
                effect="insufficient",
                task=None,
                message=f"evidence base is too thin: {n_gated}/{n_tasks} tasks gated, "
                f"{pct(policy.min_gated_share)} required.",
            )
        )
    if tasks:
        ungated = ", ".join(strict_stats.ungated_tasks) or "none"
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
        if Fraction(resolved, valid) < exact(policy.quality_floor):
            findings.append(
                Finding(
                    rule="quality_floor",
                    effect="keep",
                    task=None,
                    message=f"candidate resolved {resolved}/{valid} runs on counted tasks, below "
                    f"the quality floor {pct(policy.quality_floor)}.",
                )
            )

    paired_stats: PairedStatistics | None = None
    v2_stats: PairedV2Statistics | None = None
    step = "decide"
    if policy.name == "strict":
        strict.check_set(policy, strict_stats, findings)
    elif policy.name == "paired_v1":
        paired_stats = paired.check_set(inp, tasks, findings)
    elif policy.name == "paired_v2":
        v2_stats, step = paired2.check_set(inp, tasks, outcomes, findings)
    else:
        v2_stats, step = paired3.check_set(inp, tasks, outcomes, findings)

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
        strict=strict_stats,
        paired=paired_stats,
        paired_v2=v2_stats,
        integrity=integrity_check,
        next_action=step if step in ("top_up", "repay_comparator") else "decide",  # type: ignore[arg-type]
        evidence=[
            EvidenceCell(
                task=o.task,
                arm=o.arm,
                run=o.run,
                record_id=o.record_id,
                data_version=o.data_version,
                generation=o.generation,
                reused=o.reused,
                pooled=o.pooled,
                pooled_from=o.pooled_from,
                pooled_run_id=o.pooled_run_id,
                recorded_at=o.recorded_at,
                error_kind=o.error_kind,
                excluded=is_excluded(o.error_kind),
                task_counted=o.task in counted_names,
            )
            for o in sorted(outcomes, key=lambda o: (o.task, o.arm, o.pooled, o.run))
        ],
    )
