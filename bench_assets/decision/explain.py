"""Plain-text lines for a decision (``wfbench explain``, the report, the UI metadata): the cheat
counts per arm and the integrity veto (every policy), and the v2 statistics — the sequential
looks, the comparator drift estimate and the pooled history the decision rests on."""

import math

from bench_assets.gate.models import Decision, RegressionVeto
from bench_assets.gate.numerics import pct


def _pct_log(x: float | None) -> str:
    return "n/a" if x is None else pct(math.expm1(x))


def integrity_lines(d: Decision) -> list[str]:
    """Cheat counts per arm (candidate first), the integrity verdict and any veto's reason."""
    ic = d.integrity
    if ic is None:
        return ["integrity: not recorded (a decision stored before schema 3): cheat counts unknown"]
    out = []
    for role, a in (("candidate", ic.candidate), ("comparator", ic.comparator)):
        vo = f"{a.verify_passed_oracle_failed} verify passed but oracle failed"
        if a.verify_oracle_unrecorded:
            vo += f" (not recorded for {a.verify_oracle_unrecorded})"
        parts = [f"{a.tampered} grader-tampered", vo]
        if a.impossible_planned:
            n = "unknown" if a.impossible_resolved is None else a.impossible_resolved
            parts.append(f"{n} impossible-resolved")
        line = f"cheats, {role} {a.arm}: {', '.join(parts)} of {a.cells} cell(s)"
        if a.tampered_cells:
            line += "; tampered: " + ", ".join(
                f"{c.task} {c.cell} (record {c.record_id})" for c in a.tampered_cells
            )
        out.append(line)
    out.append(f"integrity: {ic.verdict}")
    out += [f.message for f in d.findings if f.effect == "veto"]
    return out


def v2_lines(d: Decision) -> list[str]:
    """Lines describing ``d.paired_v2``; empty for the other policies."""
    s = d.paired_v2
    if s is None:
        return []
    p = s.pooled
    out = [
        f"pooled history: comparator {p.fresh_runs} fresh + {p.reused_runs} reused + "
        f"{p.pooled_runs} pooled earlier-generation runs over {p.tasks_with_pool} task(s) with a "
        f"pool ({p.comparator_runs_per_task:.1f} comparator vs {p.candidate_runs_per_task:.1f} "
        "candidate runs per counted task)",
    ]
    dr = s.drift
    if dr.verdict == "none_reused":
        out.append("drift: no reused or pooled comparator evidence (nothing to drift)")
    elif dr.verdict == "unmeasured":
        out.append("drift: reused evidence but no fresh comparator run to measure it against")
    else:
        out.append(
            f"drift: old vs fresh comparator {d.metric} {_pct_log(dr.estimate)} over {dr.tasks} "
            f"task(s) ({dr.old_runs} old / {dr.fresh_runs} fresh runs), one-sided {dr.level:g} "
            f"bounds [{_pct_log(dr.lower)}, {_pct_log(dr.upper)}], tolerance "
            f"{pct(dr.tolerance)}: {dr.verdict}; cost margin {_pct_log(s.cost_margin)}"
        )
    if s.cost_weight is not None:
        cw = s.cost_weight
        bias = "n/a" if cw.worst_bias is None else _pct_log(cw.worst_bias)
        out.append(
            f"cost comparator level: {cw.weight_fresh:.2f} fresh + {1 - cw.weight_fresh:.2f} old "
            f"(difference in differences; a drift of {_pct_log(cw.drift_prior_sd)} would leave "
            f"{bias})"
        )
    if s.sequential is not None:
        sq = s.sequential
        out.append(
            f"design: {sq.max_looks} look(s), {sq.first_runs} to {sq.max_candidate_runs} "
            f"candidate runs per task, {sq.spending} spending of resolve error "
            f"{sq.resolve_error:g} / cost error {sq.cost_error:g} (futility {sq.futility_error:g});"
            f" spent so far {sq.resolve_spent:.4g} / {sq.cost_spent:.4g}"
            + ("; this is the last look" if sq.last_look else "")
        )
    if s.regression_veto is not None:
        out.append(veto_line(s.regression_veto))
    ts = s.total_spend
    ratio = "n/a" if ts.ratio is None else f"{ts.ratio:.3f}x"
    limit = "report only" if ts.limit is None else f"limit {ts.limit:g}x"
    out.append(f"total spend: candidate/comparator {ratio} ({limit}): {ts.verdict}")
    if s.mutually_unresolved:
        out.append(f"mutually unresolved (counted): {', '.join(s.mutually_unresolved)}")
    for lk in s.looks:
        t = "n/a" if lk.cost_t is None else f"{lk.cost_t:.2f}"
        info = (
            ""
            if lk.information_resolve is None
            else f"information resolve {lk.information_resolve:.2f} / cost "
            f"{lk.information_cost or 0:.2f}, "
        )
        runs = f"{lk.candidate_runs_per_task}"
        if (
            lk.candidate_runs_mean is not None
            and lk.candidate_runs_mean != lk.candidate_runs_per_task
        ):
            runs = f"{lk.candidate_runs_mean:.2f} (at least {lk.candidate_runs_per_task})"
        chosen = ""
        if lk.top_up_tasks is not None:
            shown = ", ".join(lk.top_up_tasks[:10])
            more = f", … {len(lk.top_up_tasks) - 10} more" if len(lk.top_up_tasks) > 10 else ""
            chosen = (
                f" on {len(lk.top_up_tasks)} task(s) with the fewest planned candidate runs "
                f"(ties by digest of look and task): {shown}{more}"
            )
        out.append(
            f"look {lk.look}/{lk.max_looks}: {runs} candidate runs per "
            f"task, {info}alpha cost {lk.alpha_cost:.4g} / resolve {lk.alpha_resolve:.4g}, "
            f"cost t {t} "
            f"({lk.cost_verdict or 'not run'}), resolve {lk.resolve_verdict or 'not run'} -> "
            f"{lk.action}{chosen}"
        )
    return out


def veto_line(v: RegressionVeto) -> str:
    """One line for gate v3's per-task regression veto."""
    how = "exact min-p" if v.method == "min_p" else "Bonferroni"
    head = f"regression veto: {how} over {v.tasks} task(s) at family error {v.error:g}"
    if v.smallest_p is None or v.adjusted_p is None:
        return f"{head}: no task counted"
    fired = ", ".join(v.fired) if v.fired else "none"
    return (
        f"{head}: smallest Fisher p {v.smallest_p:.4f} ({v.smallest_task}), family-wise "
        f"{v.adjusted_p:.4f}; {v.testable} task(s) could fire at all; fired: {fired}"
    )
