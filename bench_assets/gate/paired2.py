"""The ``paired`` policy, gate v2 (the default); ``paired_v1`` keeps the issue-4 rules.

Why a v2 (issue 13): the v1 bootstrap bound was anti-conservative at ~10 tasks and collapsed to
zero width when tasks tie; its all-vs-none veto was not Bonferroni-controlled; reused comparator
cells could drift; one excluded cell ended a candidate; deterministic costs gave p = 0; two tasks
could promote; a geometric mean could pass while total spend rose; mutually unresolved tasks were
dropped after the outcome was seen. ``bench/gate_calibration.py`` measures every rule below.

Per task (sorted by id), the comparator's valid runs are its fresh runs of this generation, its
reused cells and (``pooled_history``) up to ``max_pooled_runs`` earlier-generation cells of the
same identity (:attr:`RunOutcome.pooled`, newest first); the candidate's are its planned runs
including sequential top-ups. Per task, insufficient evidence when: an arm has no outcome; a run
planned in :attr:`GateInput.planned_runs` has no outcome (missing cells never pass); a planned cell
is still excluded after the retries (excluded pooled cells are merely dropped); an arm has fewer
than ``min_runs`` valid runs; a valid run is unmeasured or has metric ≤ 0. Runs need not be equal
between the arms. Mutually unresolved tasks are counted (preregistered ``mutually_unresolved:
count``) and listed.

Over the *n* counted tasks (n ≥ ``min_counted_tasks``, else insufficient):

1. **Resolve non-inferiority.** ``d_t`` = candidate rate − comparator rate. Bound
   ``d̄ ∓ t(1 − a, n − 1)·SE`` with ``SE = max(sd(d)/√n, √Σ v_t / n)``, where
   ``v_t = Σ_arm p̃(1 − p̃)/m`` with ``p̃ = (r + ½)/(m + 1)`` per arm: the binomial
   variance floor keeps the bound honest when most tasks tie (the cluster SD is then ~0).
   ``a = (1 − v2_noninferiority_confidence) / max_looks``. Lower ≥ −margin → non-inferior; upper <
   −margin → inferior (keep); otherwise inconclusive.
2. **Cost.** ``x_t`` = mean log candidate metric − mean log comparator metric. Student t on ``x``
   with ``SE = max(sd(x)/√n, run-level floor)`` (the floor is the pooled within-task variance of
   log metric times ``1/m_c + 1/m_i``); SE = 0 (deterministic costs) is insufficient evidence,
   never p = 0. ``a = (1 − v2_confidence) / max_looks``. Improved when the upper bound is below
   ``−cost_margin`` and ``1 − exp(x̄) ≥ min_improvement``; not improved (keep) when the lower
   bound is above ``log(1 − min_improvement)``; otherwise inconclusive.
   ``cost_margin = max(log(1 + drift_tolerance), δ̂ − drift_absorb_sd·SE)`` (see 3).
3. **Drift.** On every task (counted or not) with both fresh and old (reused or pooled) comparator
   runs,
   ``δ_t`` = mean log old − mean log fresh; ``δ̂`` their mean with the larger of the cluster and
   run-level SE. Old evidence but no fresh comparator run to check it: insufficient (pay canaries).
   Lower bound at ``drift_confidence`` above ``log(1 + drift_tolerance)``: the generation re-pays
   the comparator's reused cells fresh and sets the pooled history aside (``next_action =
   repay_comparator``, once per generation, at any look: a look that cannot promote spends no
   level); when it was re-paid already, insufficient. Otherwise
   ``δ̂ − drift_absorb_sd·SE``, when above the tolerance, becomes the cost margin (0.5 SE: the
   calibration's trade between a spurious margin eating power and a real 10 % drift leaking
   through).
4. **Hard regression** (keep): one-sided Fisher p ≤ (1 − v2_confidence)/m over the m counted tasks
   (Bonferroni only; at 3 vs 3 runs it cannot fire, which is its honest power).
5. **Total spend**: Σ_t mean candidate metric / Σ_t mean comparator metric above
   ``max_total_spend_ratio`` → keep (``None``: reported only).
6. **Sequential looks**: at a look before ``max_looks`` whose only objections are inconclusive
   tests, a cost t statistic above ``futility_t`` stops for futility (keep), otherwise the
   decision asks for ``top_up_runs`` more candidate runs per task (``next_action = top_up``,
   insufficient_evidence meanwhile). The per-look levels are Bonferroni-split, so the overall
   error holds for any stopping pattern. An integrity veto (:mod:`bench_assets.gate.integrity`)
   is final at any look: neither a top-up nor a comparator re-payment is asked for.

Longer than the house ~500 lines on purpose: one policy's rules, read top to bottom against this
docstring, are easier to review in one file than spread over helpers.
"""

import math
import statistics
from typing import Literal

from bench_assets.gate import pairedkit as kit
from bench_assets.gate.folding import Task
from bench_assets.gate.models import (
    Bounds,
    CostTest,
    DriftEstimate,
    Finding,
    GateInput,
    Look,
    PairedV2Statistics,
    PooledHistory,
    ResolveBound,
    RunOutcome,
    SpendRatio,
)
from bench_assets.gate.numerics import fisher_worse_p, pct, t_quantile
from bench_assets.kernel.errorkinds import is_excluded


def select_outcomes(inp: GateInput) -> list[RunOutcome]:
    """The outcomes v2 reads: pooled cells only when enabled, the newest ``max_pooled_runs`` per
    task, and only of the comparator arm (a pooled candidate cell is refused by the validator of
    the caller, not silently read)."""
    policy = inp.policy
    kept = [o for o in inp.outcomes if not o.pooled]
    if not policy.pooled_history:
        return kept
    by_task: dict[str, list[RunOutcome]] = {}
    for o in inp.outcomes:
        if o.pooled and o.arm == inp.incumbent_arm:
            by_task.setdefault(o.task, []).append(o)
    for rows in by_task.values():
        rows.sort(key=lambda o: (o.recorded_at, o.record_id), reverse=True)
        kept.extend(rows[: policy.max_pooled_runs])
    return kept


DriftVerdict = Literal["none_reused", "within", "absorbed", "exceeded", "unmeasured"]


_logs = kit.logs
_mean = kit.mean
_within_variance = kit.within_variance


def check_task(t: Task, inp: GateInput, rows: dict[str, list[RunOutcome]]) -> None:
    """The v2 per-task evidence rules (see the module docstring)."""
    policy = inp.policy
    t.count_ungated = True
    inc, cand = t.inc, t.cand
    if not t.present:
        missing = [
            name for name, arm in (("comparator", inc), ("candidate", cand)) if arm.runs == 0
        ]
        t.add("missing_arm", "insufficient", f"{t.task}: no {' or '.join(missing)} run recorded.")
        return
    for arm in (inp.incumbent_arm, inp.candidate_arm):
        planned = inp.planned_runs.get(arm, 0)
        have = {o.run for o in rows.get(arm, []) if not o.pooled}
        missing_runs = [r for r in range(planned) if r not in have]
        if missing_runs:
            t.add(
                "missing_cells",
                "insufficient",
                f"{t.task}: planned {arm} run(s) {', '.join(f'r{r}' for r in missing_runs)} "
                "have no outcome (a missing cell never passes).",
            )
    excluded = [
        f"{o.arm}.r{o.run}"
        for arm in (inp.incumbent_arm, inp.candidate_arm)
        for o in rows.get(arm, [])
        if not o.pooled and is_excluded(o.error_kind)
    ]
    if excluded:
        t.add(
            "exclusions",
            "insufficient",
            f"{t.task}: {', '.join(excluded)} still excluded after {policy.retries} retr"
            f"{'y' if policy.retries == 1 else 'ies'} (an excluded run is not evidence).",
        )
    if inc.valid < policy.min_runs or cand.valid < policy.min_runs:
        t.add(
            "min_runs",
            "insufficient",
            f"{t.task}: {inc.valid} comparator / {cand.valid} candidate valid runs, "
            f"{policy.min_runs} required.",
        )
        return
    if inc.unmeasured or cand.unmeasured:
        t.add(
            "metric_unmeasured",
            "insufficient",
            f"{t.task}: {policy.metric} unmeasured on {inc.unmeasured} comparator / "
            f"{cand.unmeasured} candidate valid runs (unknown is not zero).",
        )
        return
    if t.log_ratio is None:
        t.add(
            "metric_zero",
            "insufficient",
            f"{t.task}: a valid run has {policy.metric} 0, so its log ratio is undefined.",
        )


def _resolve(counted: list[Task], inp: GateInput, findings: list[Finding]) -> ResolveBound:
    policy = inp.policy
    n = len(counted)
    d = [t.cand.resolved / t.cand.valid - t.inc.resolved / t.inc.valid for t in counted]
    mean = _mean(d)
    se_cluster = statistics.stdev(d) / math.sqrt(n)
    floor = 0.0
    for t in counted:
        for arm in (t.cand, t.inc):
            # Per arm (a pooled p̃ would borrow the comparator's many runs near 1 and understate
            # the candidate's variance); (r + ½)/(m + 1) keeps 3/3 from reading as certainty.
            p = (arm.resolved + 0.5) / (arm.valid + 1)
            floor += p * (1 - p) / arm.valid
    se_floor = math.sqrt(floor) / n
    se = max(se_cluster, se_floor)
    alpha = (1 - policy.v2_noninferiority_confidence) / policy.max_looks
    q = t_quantile(1 - alpha, n - 1)
    lower, upper = mean - q * se, mean + q * se
    margin = policy.v2_resolve_margin
    if lower >= -margin:
        verdict, effect, ending = "non_inferior", "pass", "non-inferior."
    elif upper < -margin:
        verdict, effect, ending = "inferior", "keep", "inferior beyond the margin."
    else:
        verdict, effect, ending = "inconclusive", "inconclusive", "non-inferiority not shown."
    findings.append(
        Finding(
            rule="noninferiority",
            effect=effect,  # type: ignore[arg-type]
            task=None,
            message=f"resolve rate: candidate − comparator = {mean:+.3f} over {n} tasks, "
            f"one-sided {1 - alpha:.4g} bounds [{lower:+.3f}, {upper:+.3f}] (cluster t, SE "
            f"{se:.3f} = max(cluster {se_cluster:.3f}, binomial floor {se_floor:.3f})), margin "
            f"−{margin:g}: {ending}",
        )
    )
    return ResolveBound(
        tasks=n,
        difference=Bounds(estimate=mean, lower=lower, upper=upper, level=1 - alpha),
        se_cluster=se_cluster,
        se_binomial_floor=se_floor,
        margin=margin,
        verdict=verdict,  # type: ignore[arg-type]
    )


def _drift(
    tasks: list[Task], inp: GateInput, rows: dict[tuple[str, str], list[RunOutcome]]
) -> tuple[DriftEstimate, list[list[float]]]:
    policy = inp.policy
    tol = math.log1p(policy.drift_tolerance)
    deltas: list[float] = []
    floor = 0.0
    fresh_total = old_total = 0
    groups: list[list[float]] = []
    any_old = False
    for t in tasks:
        comp = rows.get((t.task, inp.incumbent_arm), [])
        fresh = _logs(o for o in comp if not o.reused and not o.pooled)
        old = _logs(o for o in comp if o.reused or o.pooled)
        groups += [g for g in (fresh, old) if g]
        any_old = any_old or bool(old)
        if fresh and old:
            deltas.append(_mean(old) - _mean(fresh))
            fresh_total += len(fresh)
            old_total += len(old)
    s2, df_within = _within_variance(groups)
    for t in tasks:
        comp = rows.get((t.task, inp.incumbent_arm), [])
        f = len(_logs(o for o in comp if not o.reused and not o.pooled))
        o_ = len(_logs(o for o in comp if o.reused or o.pooled))
        if f and o_:
            floor += s2 * (1 / f + 1 / o_)

    def est(
        verdict: DriftVerdict,
        estimate: float | None = None,
        lo: float | None = None,
        hi: float | None = None,
        se: float | None = None,
    ) -> DriftEstimate:
        return DriftEstimate(
            tasks=len(deltas),
            se=se,
            fresh_runs=fresh_total,
            old_runs=old_total,
            estimate=estimate,
            upper=hi,
            lower=lo,
            level=policy.drift_confidence,
            tolerance=policy.drift_tolerance,
            verdict=verdict,
        )

    if not any_old:
        return est("none_reused"), groups
    if not deltas:
        return est("unmeasured"), groups
    mean, se, lo, hi = kit.drift_bound(deltas, floor, df_within, policy.drift_confidence)
    absorbed = mean - policy.drift_absorb_sd * se
    verdict: DriftVerdict = "exceeded" if lo > tol else "absorbed" if absorbed > tol else "within"
    return est(verdict, mean, lo, hi, se), groups


def _cost(
    counted: list[Task],
    inp: GateInput,
    rows: dict[tuple[str, str], list[RunOutcome]],
    margin: float,
    findings: list[Finding],
) -> CostTest | None:
    policy = inp.policy
    n = len(counted)
    xs = [t.log_ratio for t in counted if t.log_ratio is not None]
    groups: list[list[float]] = []
    for t in counted:
        for arm in (inp.incumbent_arm, inp.candidate_arm):
            g = _logs(rows.get((t.task, arm), []))
            if g:
                groups.append(g)
    s2, _ = _within_variance(groups)
    floor = math.fsum(s2 * (1 / t.cand.valid + 1 / t.inc.valid) for t in counted)
    mean = _mean(xs)
    sd = statistics.stdev(xs)
    se = max(sd / math.sqrt(n), math.sqrt(floor) / n)
    if se == 0.0:
        findings.append(kit.zero_variance(policy))
        return None
    alpha = (1 - policy.v2_confidence) / policy.max_looks
    bounds, improvement, t_stat = kit.cost_bounds(mean, se, alpha, n - 1)
    if bounds.upper < -margin and improvement.estimate >= policy.min_improvement:
        verdict, effect, ending = "improved", "pass", "significant improvement."
    elif bounds.lower > math.log1p(-policy.min_improvement):
        verdict, effect, ending = (
            "not_improved",
            "keep",
            "confidently below the required improvement.",
        )
    else:
        verdict, effect, ending = "inconclusive", "inconclusive", "improvement not shown."
    findings.append(
        Finding(
            rule="cost_improvement",
            effect=effect,  # type: ignore[arg-type]
            task=None,
            message=f"{policy.metric}: candidate/comparator geometric-mean ratio saves "
            f"{pct(improvement.estimate)} over {n} tasks, one-sided {bounds.level:.4g} bounds "
            f"[{pct(improvement.lower)}, {pct(improvement.upper)}] (t = {t_stat:.2f}), must "
            f"clear {pct(-math.expm1(-margin))} (drift margin) and estimate "
            f"{pct(policy.min_improvement)}: {ending}",
        )
    )
    return kit.cost_test(n, bounds, improvement, t_stat, sd, policy, verdict)


def _spend(
    counted: list[Task],
    inp: GateInput,
    rows: dict[tuple[str, str], list[RunOutcome]],
    findings: list[Finding],
) -> SpendRatio:
    limit = inp.policy.max_total_spend_ratio

    def arm_total(arm: str) -> float:
        total = 0.0
        for t in counted:
            vals = [
                o.metric
                for o in rows.get((t.task, arm), [])
                if not is_excluded(o.error_kind) and o.metric is not None
            ]
            total += math.fsum(vals) / len(vals)
        return total

    if not counted:
        return SpendRatio(ratio=None, limit=limit, verdict="unmeasured")
    comp = arm_total(inp.incumbent_arm)
    if comp <= 0:
        return SpendRatio(ratio=None, limit=limit, verdict="unmeasured")
    return kit.spend_verdict(arm_total(inp.candidate_arm) / comp, inp, "comparator", findings)


def hard_regressions(counted: list[Task], policy_confidence: float) -> None:
    """Bonferroni-corrected one-sided Fisher veto over the counted tasks."""
    if not counted:
        return
    alpha = (1 - policy_confidence) / len(counted)
    for t in counted:
        p = fisher_worse_p(t.inc.resolved, t.inc.valid, t.cand.resolved, t.cand.valid)
        t.fisher_p = p
        if p <= alpha:
            t.hard_regression = True
            t.add(
                "hard_regression",
                "keep",
                f"{t.task}: hard regression: candidate resolved {t.cand.resolved}/{t.cand.valid} "
                f"where the comparator resolved {t.inc.resolved}/{t.inc.valid} (one-sided Fisher "
                f"p = {float(p):.4f} ≤ {alpha:.4f}, Bonferroni over {len(counted)} tasks).",
            )


def _pooled(
    counted: list[Task], inp: GateInput, outcomes: list[RunOutcome], findings: list[Finding]
) -> PooledHistory:
    comp = [o for o in outcomes if o.arm == inp.incumbent_arm and not is_excluded(o.error_kind)]
    fresh = sum(1 for o in comp if not o.reused and not o.pooled)
    reused = sum(1 for o in comp if o.reused and not o.pooled)
    pooled = sum(1 for o in comp if o.pooled)
    n = max(1, len(counted))
    history = PooledHistory(
        fresh_runs=fresh,
        reused_runs=reused,
        pooled_runs=pooled,
        tasks_with_pool=len({o.task for o in comp if o.pooled}),
        comparator_runs_per_task=sum(t.inc.valid for t in counted) / n,
        candidate_runs_per_task=sum(t.cand.valid for t in counted) / n,
    )
    findings.append(
        Finding(
            rule="pooled_history",
            effect="info",
            task=None,
            message=f"comparator evidence: {fresh} fresh, {reused} reused and {pooled} pooled "
            f"earlier-generation run(s) ({history.comparator_runs_per_task:.1f} per counted task; "
            f"candidate {history.candidate_runs_per_task:.1f}).",
        )
    )
    return history


NextStep = Literal["decide", "top_up", "futility", "repay_comparator"]


def check_set(
    inp: GateInput, tasks: list[Task], outcomes: list[RunOutcome], findings: list[Finding]
) -> tuple[PairedV2Statistics, NextStep]:
    """The v2 set rules; returns the statistics and what the generation does next."""
    policy = inp.policy
    rows = kit.by_task_and_arm(outcomes)
    counted = [t for t in tasks if t.counted]
    unresolved = kit.mutually_unresolved(counted, policy, findings)
    hard_regressions(counted, policy.v2_confidence)
    for t in counted:
        findings.extend(f for f in t.findings if f.rule == "hard_regression")
    drift, _ = _drift(tasks, inp, rows)
    tol = math.log1p(policy.drift_tolerance)
    margin = tol
    if drift.verdict == "unmeasured":
        findings.append(kit.drift_unmeasured("bound its drift (pay canary cells)"))
    elif drift.verdict != "none_reused":
        assert drift.estimate is not None and drift.lower is not None
        text = (
            f"comparator drift (reused/pooled vs fresh {policy.metric}): "
            f"{pct(math.expm1(drift.estimate))} over {drift.tasks} task(s) ({drift.fresh_runs} "
            f"fresh, {drift.old_runs} old runs), one-sided {drift.level:g} lower bound "
            f"{pct(math.expm1(drift.lower))}, tolerance {pct(policy.drift_tolerance)}"
        )
        if drift.verdict == "exceeded":
            findings.append(
                Finding(
                    rule="drift",
                    effect="insufficient",
                    task=None,
                    message=f"{text}: drift beyond the tolerance; re-pay the comparator's cells.",
                )
            )
        else:
            if drift.verdict == "absorbed":
                assert drift.se is not None
                margin = drift.estimate - policy.drift_absorb_sd * drift.se
                text += (
                    f"; the cost test must clear the estimated drift less "
                    f"{policy.drift_absorb_sd:g} SE ({pct(math.expm1(margin))})."
                )
            else:
                text += "; within tolerance."
            findings.append(Finding(rule="drift", effect="info", task=None, message=text))
    history = _pooled(counted, inp, outcomes, findings)
    resolve: ResolveBound | None = None
    cost: CostTest | None = None
    if not kit.too_few_tasks(counted, policy, findings):
        resolve = _resolve(counted, inp, findings)
        cost = _cost(counted, inp, rows, margin, findings)
    spend = _spend(counted, inp, rows, findings)

    effects = {f.effect for f in findings}
    cand_runs = min((t.cand.valid for t in counted), default=0)
    action: NextStep = "decide"
    if "veto" in effects:
        pass  # a measured cheat is final: no look buys more cells for this candidate
    elif drift.verdict == "exceeded" and not inp.comparator_repaid and "keep" not in effects:
        action = "repay_comparator"
        findings.append(
            kit.repay_finding(
                inp.look, policy.max_looks, "this look could not promote, so it spends no level"
            )
        )
    elif (
        inp.look < policy.max_looks
        and "insufficient" not in effects
        and "keep" not in effects
        and "inconclusive" in effects
        and cost is not None
    ):
        t_stat = cost.t_statistic
        if t_stat is not None and t_stat > policy.futility_t:
            action = "futility"
            findings.append(
                Finding(
                    rule="futility",
                    effect="keep",
                    task=None,
                    message=f"look {inp.look}/{policy.max_looks}: cost t = {t_stat:.2f} is above "
                    f"the futility boundary {policy.futility_t:g}; stopped without top-up.",
                )
            )
        else:
            action = "top_up"
            findings.append(kit.top_up_finding(inp.look, policy.max_looks, policy.top_up_runs))
    look = Look(
        look=inp.look,
        max_looks=policy.max_looks,
        candidate_runs_per_task=cand_runs,
        alpha_cost=(1 - policy.v2_confidence) / policy.max_looks,
        alpha_resolve=(1 - policy.v2_noninferiority_confidence) / policy.max_looks,
        cost_t=None if cost is None else cost.t_statistic,
        cost_verdict=None if cost is None else cost.verdict,
        resolve_verdict=None if resolve is None else resolve.verdict,
        action=action,
    )
    stats = PairedV2Statistics(
        counted_tasks=len(counted),
        min_counted_tasks=policy.min_counted_tasks,
        resolve=resolve,
        cost=cost,
        cost_margin=margin,
        hard_regressions=[t.task for t in tasks if t.hard_regression],
        mutually_unresolved=unresolved,
        excluded_candidate_cells=sum(t.cand.excluded for t in tasks),
        drift=drift,
        pooled=history,
        total_spend=spend,
        looks=[*inp.prior_looks, look],
    )
    return stats, action
