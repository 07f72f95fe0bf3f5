"""The ``paired`` policy, gate v3 (the default; issue 23). ``paired_v2`` keeps issue 13's rules.

Why a v3: gate v2's drift tolerance let the bias of old comparator cells through once the cost
test was precise (false promotions grew with the suite), its resolve margin was a second field
that hid 10-point drops, its Bonferroni split of the looks bought nothing, and its veto could not
fire. ``bench/gate_calibration.py`` measures every rule below at 10, 20, 50 and 200 tasks.

The per-task evidence rules, the pooled history, the total-spend rule and the integrity veto are
v2's (:mod:`bench_assets.gate.paired2`). Over the *n* counted tasks (n ≥ ``min_counted_tasks``):

1. **A group-sequential design.** Look ``k`` (``GateInput.look``) comes after ``k − 1``
   top-ups, at most ``max_looks`` looks. A top-up adds ``top_up_share`` of the first look's
   candidate cells: ``top_up_runs`` more runs on every task, or (a finer step, issue 23's
   50-task row) on the tasks with the fewest planned runs, ties broken by a digest of the look
   and task id (:func:`~bench_assets.gate.sequential.top_up_tasks`; the chosen tasks are in the
   look's ``top_up_tasks``, a chosen task's missing top-up run is insufficient). Each test's
   *observed information fraction* is ``t_k = V(M)/V(m_k)``, its variance of the mean at the
   last look's runs ``M`` over its variance at this look's ``m_k`` (the binomial and run-level
   variance components of this look's evidence, per task with the runs each task had at each
   look when top-ups are partial; 1 at the last look). Its error is spent by Lan–DeMets
   (``spending``: Pocock type by default, O'Brien–Fleming type on request) over the fractions
   of looks ``1..k``
   (:mod:`bench_assets.gate.sequential`); the boundary becomes a one-sided nominal level
   ``a_k``, read through the normal quantile with the run-level SE (``standard_error: model``,
   the default) or through Student's t with ``n − 1`` degrees of freedom with the larger of
   the cluster and run-level SE (``conservative``, or where the run-level variance cannot be
   estimated: 1 run per task). Why the model rule: the tasks are the suite, so the run-level
   variance is the variance of the suite's mean, and the conservative rule's real error fell
   with the suite size (a 10-point drop was promoted 11 % at 10 tasks but 23 % at 50 at the
   same nominal 0.25), so no single level met the target at every size. The mirror-image
   futility boundary spends ``futility_error`` the same way (level ``f_k``; none at the last
   look). A look that asks to re-pay the comparator spends nothing.
2. **Resolve non-inferiority** (``resolve_margin``, the one margin; ``resolve_error`` over all
   looks). ``d_t`` = candidate rate − comparator rate; SE the binomial run-level one
   (``Σ p̃(1 − p̃)/m`` over both arms, ``p̃ = (r + ½)/(m + 1)``), or its maximum with the
   cluster SE. Lower bound at ``1 − a_k`` ≥ −margin → non-inferior. Futility (before the last look):
   the upper bound at ``1 − f_k`` below 0 — the candidate resolves less at all → keep.
3. **Cost, drift-robust.** Per task the comparator level is ``(1 − w)·ō_t + w·f̄_t`` (mean log
   metric of its old — reused and pooled — and of its fresh runs; fresh only or old only when it
   has one kind, an old-only task corrected by ``w·δ̂``), ``x_t`` = mean log candidate − that.
   ``w = (A + B²)/(A + B² + F)``: A and F the variances of the old and fresh means over tasks,
   B = ``drift_prior_sd``. This is the difference in differences between fresh canaries and old
   cells (``w = 1``: only fresh canaries, unbiased for any drift) shrunk towards pooling by what
   a drift of B would cost; no tolerance band. As the suite grows A and F shrink, ``w`` → 1, so
   the bias ``(1 − w)·drift`` shrinks faster than the test's standard error. SE = the run-level
   ``√(s²·Σ(1/m + (1 − w)²/o + w²/f))/n`` (``s²`` pooled within task, at least ``n − 1``
   degrees of freedom), or its maximum with the cluster SD/√n; SE = 0 is insufficient. Improved
   when the upper bound at ``1 − a_k`` is below 0 and ``1 − exp(x̄) ≥ min_improvement``; keep
   when the lower bound at ``1 − f_k`` (at the last look ``1 − a_k``) is above
   ``log(1 − min_improvement)``.
4. **Drift** (reported; re-pays when large). ``δ_t`` = mean log old − mean log fresh comparator
   run, ``δ̂`` their mean (larger of cluster and run-level SE). Its one-sided
   ``drift_confidence`` lower bound above ``log(1 + drift_repay_above)``: the generation re-pays
   the comparator's reused cells fresh and sets the pooled history aside (once; for power — the
   cost test is already corrected). Old evidence with no fresh run on any task: insufficient.
5. **Total spend** against the same drift-corrected comparator (per task ``w``·fresh mean +
   ``(1 − w)``·old mean/``exp(δ̂)``): above ``max_total_spend_ratio`` → keep.
6. **Per-task regression veto** (keep), at every look: ``regression_test: min_p`` (default), the
   exact max-type statistic of :mod:`bench_assets.gate.regression` — the family-wise chance of
   the smallest one-sided Fisher p over the tasks given their margins — at most
   ``regression_error``; it fires at 3 vs 3 runs, where v2's Bonferroni rule (``bonferroni``)
   cannot. ``bench/gate_veto_power.py`` prints its power.
7. **The last look decides.** At a look before the last, only-inconclusive evidence tops up
   (``next_action = top_up``); at the last look a test that has not passed is *keep*: the design
   has answered, and a later generation re-testing the same candidate would spend the error
   again.
"""

import math
import statistics

from bench_assets.gate import paired2, regression
from bench_assets.gate import pairedkit as kit
from bench_assets.gate.folding import Task
from bench_assets.gate.models import (
    Bounds,
    CostTest,
    CostWeight,
    DriftEstimate,
    Finding,
    GateInput,
    Look,
    PairedV2Statistics,
    ResolveBound,
    RunOutcome,
    SequentialDesign,
    SpendRatio,
)
from bench_assets.gate.numerics import pct, quantile
from bench_assets.gate.sequential import (
    LookSchedule,
    nominal,
    partial_top_up_finding,
    spent,
    top_up_tasks,
)
from bench_assets.kernel.errorkinds import is_excluded

NextStep = paired2.NextStep
Rows = kit.Rows


def _split(rows: Rows, task: str, arm: str) -> tuple[list[float], list[float]]:
    comp = rows.get((task, arm), [])
    fresh = kit.logs(o for o in comp if not o.reused and not o.pooled)
    old = kit.logs(o for o in comp if o.reused or o.pooled)
    return fresh, old


_mean = kit.mean


def _drift(tasks: list[Task], inp: GateInput, rows: Rows) -> DriftEstimate:
    policy = inp.policy
    deltas: list[float] = []
    groups: list[list[float]] = []
    pairs: list[tuple[int, int]] = []
    any_old = False
    for t in tasks:
        fresh, old = _split(rows, t.task, inp.incumbent_arm)
        groups += [g for g in (fresh, old) if g]
        any_old = any_old or bool(old)
        if fresh and old:
            deltas.append(_mean(old) - _mean(fresh))
            pairs.append((len(fresh), len(old)))
    base = {
        "tasks": len(deltas),
        "fresh_runs": sum(f for f, _ in pairs),
        "old_runs": sum(o for _, o in pairs),
        "level": policy.drift_confidence,
        "tolerance": policy.drift_repay_above,
    }
    if not any_old:
        return DriftEstimate(**base, estimate=None, upper=None, lower=None, verdict="none_reused")  # type: ignore[arg-type]
    if not deltas:
        return DriftEstimate(**base, estimate=None, upper=None, lower=None, verdict="unmeasured")  # type: ignore[arg-type]
    s2, df_within = kit.within_variance(groups)
    floor = math.fsum(s2 * (1 / f + 1 / o) for f, o in pairs)
    mean, se, lo, hi = kit.drift_bound(deltas, floor, df_within, policy.drift_confidence)
    verdict = "exceeded" if lo > math.log1p(policy.drift_repay_above) else "within"
    return DriftEstimate(**base, estimate=mean, upper=hi, lower=lo, se=se, verdict=verdict)  # type: ignore[arg-type]


def _levels(policy_error: float, futility: float, ts: list[float], kind: str, last: bool):  # type: ignore[no-untyped-def]
    a = nominal(ts, policy_error, kind)
    f = 0.0 if last or futility <= 0 else nominal(ts, futility, kind)
    return a, f


def _resolve(
    counted: list[Task], inp: GateInput, sched: LookSchedule, findings: list[Finding]
) -> tuple[ResolveBound, float, float, float]:
    policy = inp.policy
    n = len(counted)
    d = [t.cand.resolved / t.cand.valid - t.inc.resolved / t.inc.valid for t in counted]
    mean = _mean(d)
    se_cluster = statistics.stdev(d) / math.sqrt(n)
    floor = 0.0
    parts: list[tuple[str, float, float]] = []
    for t in counted:
        pc = (t.cand.resolved + 0.5) / (t.cand.valid + 1)
        pi = (t.inc.resolved + 0.5) / (t.inc.valid + 1)
        floor += pc * (1 - pc) / t.cand.valid + pi * (1 - pi) / t.inc.valid
        parts.append((t.task, pi * (1 - pi) / t.inc.valid, pc * (1 - pc)))
    se_floor = math.sqrt(floor) / n
    model = policy.standard_error == "model" and all(
        t.cand.valid >= 2 and t.inc.valid >= 2 for t in counted
    )
    se = se_floor if model else max(se_cluster, se_floor)
    ts = sched.fractions(parts)
    a, f = _levels(policy.resolve_error, policy.futility_error, ts, policy.spending, sched.last)
    df = None if model else n - 1
    q = quantile(1 - a, df) if a > 0 else math.inf
    lower, upper = mean - q * se, mean + q * se
    margin = policy.resolve_margin
    futile = f > 0 and mean + quantile(1 - f, df) * se < 0
    if lower >= -margin:
        verdict, effect, ending = "non_inferior", "pass", "non-inferior."
    elif futile:
        verdict, effect = "inferior", "keep"
        ending = (
            f"futility: the one-sided {1 - f:.4g} upper bound is below 0 (the candidate "
            "resolves less at all)."
        )
    elif sched.last:
        verdict, effect = "inconclusive", "keep"
        ending = "non-inferiority not shown at the design's last look."
    else:
        verdict, effect, ending = "inconclusive", "inconclusive", "non-inferiority not shown yet."
    findings.append(
        Finding(
            rule="noninferiority",
            effect=effect,  # type: ignore[arg-type]
            task=None,
            message=f"resolve rate: candidate − comparator = {mean:+.3f} over {n} tasks, look "
            f"{sched.look}/{sched.max_looks} (information {ts[-1]:.2f}), one-sided "
            f"{1 - a:.4g} bounds [{lower:+.3f}, {upper:+.3f}] ({_se_text(model, se)} "
            f"cluster {se_cluster:.3f}, binomial {se_floor:.3f}), margin "
            f"−{margin:g}: {ending}",
        )
    )
    bound = ResolveBound(
        tasks=n,
        difference=Bounds(estimate=mean, lower=lower, upper=upper, level=1 - a),
        se_cluster=se_cluster,
        se_binomial_floor=se_floor,
        margin=margin,
        verdict=verdict,  # type: ignore[arg-type]
    )
    return bound, ts[-1], a, f


def _se_text(model: bool, se: float) -> str:
    if model:
        return f"normal, run-level SE {se:.3f};"
    return f"Student t, SE {se:.3f} = the larger of"


def _weight(counted: list[Task], inp: GateInput, rows: Rows, s2: float) -> tuple[float, CostWeight]:
    n = max(1, len(counted))
    inv_old = inv_fresh = 0.0
    with_old = with_fresh = 0
    for t in counted:
        fresh, old = _split(rows, t.task, inp.incumbent_arm)
        if old:
            inv_old += 1 / len(old)
            with_old += 1
        if fresh:
            inv_fresh += 1 / len(fresh)
            with_fresh += 1
    b2 = inp.policy.drift_prior_sd**2
    a = s2 * inv_old / n**2 if with_old else None
    f = s2 * inv_fresh / n**2 if with_fresh else None
    if a is None or f is None:
        w = 1.0 if f is not None else 0.0
    else:
        w = (a + b2) / (a + b2 + f) if a + b2 + f > 0 else 1.0
    worst = None if a is None else (1 - w) * inp.policy.drift_prior_sd
    return w, CostWeight(
        weight_fresh=w,
        var_old=a,
        var_fresh=f,
        drift_prior_sd=inp.policy.drift_prior_sd,
        worst_bias=worst,
    )


def _cost(
    counted: list[Task],
    inp: GateInput,
    rows: Rows,
    drift: DriftEstimate,
    sched: LookSchedule,
    findings: list[Finding],
) -> tuple[CostTest | None, CostWeight, float, float, float]:
    policy = inp.policy
    n = len(counted)
    groups: list[list[float]] = []
    parts: list[tuple[list[float], list[float], list[float]]] = []
    for t in counted:
        cand = kit.logs(rows.get((t.task, inp.candidate_arm), []))
        fresh, old = _split(rows, t.task, inp.incumbent_arm)
        groups += [g for g in (cand, fresh, old) if g]
        parts.append((cand, fresh, old))
    s2, df_within = kit.within_variance(groups)
    w, weight = _weight(counted, inp, rows, s2)
    delta = drift.estimate or 0.0
    delta_var = (drift.se or 0.0) ** 2
    xs: list[float] = []
    floor = 0.0
    info: list[tuple[str, float, float]] = []
    old_only = 0
    for t, (cand, fresh, old) in zip(counted, parts, strict=True):
        c = _mean(cand)
        if fresh and old:
            xs.append(c - (1 - w) * _mean(old) - w * _mean(fresh))
            comp = (1 - w) ** 2 / len(old) + w**2 / len(fresh)
        elif fresh:
            xs.append(c - _mean(fresh))
            comp = 1 / len(fresh)
        else:
            xs.append(c - _mean(old) + w * delta)
            comp = 1 / len(old)
            old_only += 1
        floor += s2 * (1 / len(cand) + comp)
        info.append((t.task, s2 * comp, s2))
    floor += (old_only * w) ** 2 * delta_var
    mean = _mean(xs)
    sd = statistics.stdev(xs)
    model = policy.standard_error == "model" and df_within >= n - 1
    se = math.sqrt(floor) / n if model else max(sd / math.sqrt(n), math.sqrt(floor) / n)
    ts = sched.fractions(info)
    a, f = _levels(policy.cost_error, policy.futility_error, ts, policy.spending, sched.last)
    if se == 0.0:
        findings.append(kit.zero_variance(policy))
        return None, weight, ts[-1], a, f
    df = None if model else n - 1
    bounds, improvement, t_stat = kit.cost_bounds(mean, se, a, df)
    need = math.log1p(-policy.min_improvement)
    keep_level = a if sched.last else f
    keep_lower = mean - quantile(1 - keep_level, df) * se if keep_level > 0 else -math.inf
    if bounds.upper < 0 and improvement.estimate >= policy.min_improvement:
        verdict, effect, ending = "improved", "pass", "significant improvement."
    elif keep_lower > need:
        verdict, effect = "not_improved", "keep"
        ending = (
            f"the one-sided {1 - keep_level:.4g} lower bound shows less than the required saving."
        )
    elif sched.last:
        verdict, effect, ending = "inconclusive", "keep", "improvement not shown at the last look."
    else:
        verdict, effect, ending = "inconclusive", "inconclusive", "improvement not shown yet."
    findings.append(
        Finding(
            rule="cost_improvement",
            effect=effect,  # type: ignore[arg-type]
            task=None,
            message=f"{policy.metric}: candidate/comparator geometric-mean ratio saves "
            f"{pct(improvement.estimate)} over {n} tasks (comparator level {w:.2f}·fresh + "
            f"{1 - w:.2f}·old, drift-robust), look {sched.look}/{sched.max_looks} (information "
            f"{ts[-1]:.2f}), one-sided {bounds.level:.4g} bounds [{pct(improvement.lower)}, "
            f"{pct(improvement.upper)}] ({'z' if model else 't'} = {t_stat:.2f}, "
            f"{'run-level SE' if model else 'the larger of cluster and run-level SE'}), must "
            "clear 0 and estimate "
            f"{pct(policy.min_improvement)}: {ending}",
        )
    )
    test = kit.cost_test(n, bounds, improvement, t_stat, sd, policy, verdict, normal=model)
    return test, weight, ts[-1], a, f


def _spend(
    counted: list[Task],
    inp: GateInput,
    rows: Rows,
    w: float,
    drift: DriftEstimate,
    findings: list[Finding],
) -> SpendRatio:
    """Total spend against the same drift-corrected comparator as the cost test: per task the
    comparator's mean metric is ``w``·fresh mean + ``(1 − w)``·old mean / ``exp(δ̂)`` (v2 summed
    old and fresh alike, so a drift made a candidate's total look smaller)."""
    limit = inp.policy.max_total_spend_ratio
    if not counted:
        return SpendRatio(ratio=None, limit=limit, verdict="unmeasured")
    shrink = math.exp(-(drift.estimate or 0.0))

    def values(rs: list[RunOutcome]) -> list[float]:
        return [o.metric for o in rs if not is_excluded(o.error_kind) and o.metric is not None]

    cand = comp = 0.0
    for t in counted:
        c = values(rows.get((t.task, inp.candidate_arm), []))
        rs = rows.get((t.task, inp.incumbent_arm), [])
        fresh = values([o for o in rs if not o.reused and not o.pooled])
        old = values([o for o in rs if o.reused or o.pooled])
        cand += math.fsum(c) / len(c)
        if fresh and old:
            comp += w * math.fsum(fresh) / len(fresh) + (1 - w) * shrink * math.fsum(old) / len(old)
        elif fresh:
            comp += math.fsum(fresh) / len(fresh)
        else:
            comp += shrink * math.fsum(old) / len(old)
    if comp <= 0:
        return SpendRatio(ratio=None, limit=limit, verdict="unmeasured")
    return kit.spend_verdict(cand / comp, inp, "drift-corrected comparator", findings)


def check_set(
    inp: GateInput, tasks: list[Task], outcomes: list[RunOutcome], findings: list[Finding]
) -> tuple[PairedV2Statistics, NextStep]:
    """The v3 set rules; returns the statistics and what the generation does next."""
    policy = inp.policy
    rows = kit.by_task_and_arm(outcomes)
    counted = [t for t in tasks if t.counted]
    unresolved = kit.mutually_unresolved(counted, policy, findings)
    veto = regression.screen(counted, policy.regression_error, policy.regression_test)
    for t in counted:
        findings.extend(f for f in t.findings if f.rule == "hard_regression")
    drift = _drift(tasks, inp, rows)
    if drift.verdict == "unmeasured":
        findings.append(kit.drift_unmeasured("measure its drift against (pay gate canaries)"))
    elif drift.verdict != "none_reused":
        assert drift.estimate is not None and drift.lower is not None
        text = (
            f"comparator drift (old vs fresh {policy.metric}): {pct(math.expm1(drift.estimate))} "
            f"over {drift.tasks} task(s) ({drift.fresh_runs} fresh, {drift.old_runs} old runs), "
            f"one-sided {drift.level:g} lower bound {pct(math.expm1(drift.lower))}; the cost "
            "test corrects for it (difference in differences)"
        )
        if drift.verdict == "exceeded":
            text += f"; above {pct(policy.drift_repay_above)}: re-pay the comparator's cells"
        findings.append(Finding(rule="drift", effect="info", task=None, message=text + "."))
    history = paired2._pooled(counted, inp, outcomes, findings)
    sched = LookSchedule(inp, counted)
    resolve: ResolveBound | None = None
    cost: CostTest | None = None
    weight: CostWeight | None = None
    info_r = info_c = a_r = a_c = f_r = f_c = None
    if not kit.too_few_tasks(counted, policy, findings):
        resolve, info_r, a_r, f_r = _resolve(counted, inp, sched, findings)
        cost, weight, info_c, a_c, f_c = _cost(counted, inp, rows, drift, sched, findings)
    spend = _spend(
        counted, inp, rows, 1.0 if weight is None else weight.weight_fresh, drift, findings
    )

    effects = {f.effect for f in findings}
    action: NextStep = "decide"
    chosen: list[str] | None = None
    futile = any(
        f.rule in ("noninferiority", "cost_improvement") and f.effect == "keep" for f in findings
    )
    if "veto" in effects:
        pass  # a measured cheat is final: no look buys more cells for this candidate
    elif drift.verdict == "exceeded" and not inp.comparator_repaid and "keep" not in effects:
        action = "repay_comparator"
        findings.append(kit.repay_finding(sched.look, sched.max_looks, "this look spends no error"))
    elif not sched.last and futile and "insufficient" not in effects:
        action = "futility"
        findings.append(
            Finding(
                rule="futility",
                effect="keep",
                task=None,
                message=f"look {sched.look}/{sched.max_looks}: a futility boundary was crossed; "
                "stopped without top-up.",
            )
        )
    elif (
        not sched.last
        and "insufficient" not in effects
        and "keep" not in effects
        and "inconclusive" in effects
    ):
        action = "top_up"
        if sched.count < len(inp.tasks):
            chosen = top_up_tasks(inp.tasks, sched.planned, sched.count, sched.look)
            findings.append(partial_top_up_finding(sched.look, policy, chosen, len(inp.tasks)))
        else:
            findings.append(kit.top_up_finding(sched.look, sched.max_looks, policy.top_up_runs))
    look = Look(
        look=sched.look,
        max_looks=policy.max_looks,
        candidate_runs_per_task=min((t.cand.valid for t in counted), default=0),
        alpha_cost=a_c or 0.0,
        alpha_resolve=a_r or 0.0,
        cost_t=None if cost is None else cost.t_statistic,
        cost_verdict=None if cost is None else cost.verdict,
        resolve_verdict=None if resolve is None else resolve.verdict,
        action=action,
        information_resolve=info_r,
        information_cost=info_c,
        futility_resolve=f_r,
        futility_cost=f_c,
        candidate_runs_mean=sched.now if counted else None,
        top_up_tasks=chosen,
    )
    design = SequentialDesign(
        max_looks=policy.max_looks,
        first_runs=round(sched.first),
        top_up_runs=policy.top_up_runs,
        max_candidate_runs=round(sched.final),
        spending=policy.spending,
        resolve_error=policy.resolve_error,
        cost_error=policy.cost_error,
        futility_error=policy.futility_error,
        resolve_spent=spent(policy.resolve_error, info_r or 0.0, policy.spending),
        cost_spent=spent(policy.cost_error, info_c or 0.0, policy.spending),
        last_look=sched.last,
    )
    stats = PairedV2Statistics(
        counted_tasks=len(counted),
        min_counted_tasks=policy.min_counted_tasks,
        resolve=resolve,
        cost=cost,
        cost_margin=0.0,
        hard_regressions=[t.task for t in tasks if t.hard_regression],
        mutually_unresolved=unresolved,
        excluded_candidate_cells=sum(t.cand.excluded for t in tasks),
        drift=drift,
        pooled=history,
        total_spend=spend,
        looks=[*inp.prior_looks, look],
        gate_version=3,
        sequential=design,
        cost_weight=weight,
        regression_veto=veto,
    )
    return stats, action
