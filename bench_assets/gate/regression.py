"""Gate v3's per-task regression veto: an exact max-type (min-p) statistic over the counted tasks.

Per counted task ``t``, ``p_t`` is the one-sided Fisher p that the candidate resolves less
(hypergeometric count of candidate successes given the task's margins). Conditional on every
task's margins, under the null that no task regresses the counts are independent
hypergeometrics, so the chance that the smallest p over the tasks is at most ``c`` is exactly

    FWE(c) = 1 − Π_s (1 − P_s(c)),   P_s(c) = the largest attainable p of task s that is ≤ c
                                              (0 when task s cannot reach c at all).

``FWE(p_t)`` is task t's *min-p adjusted p*; the veto fires (keep) on every task whose adjusted
p is at most ``regression_error``. A task whose candidate resolves at least as often as its
comparator only makes small p rarer, so the family error holds for the one-sided null.

Why not Bonferroni (``regression_test: bonferroni``, v2's rule): Fisher's p is discrete. At 3 vs
3 runs its smallest value is 1/20 (3/3 against 0/3), so ``p ≤ regression_error / n`` never holds
at 10 tasks and 0.10: the veto could not fire (issue 23, F6). Bonferroni charges every task
``error / n`` although a task whose margins cannot produce a small p (say 6 successes of 6) cannot
produce a false veto either (Tarone 1990). The exact min-p charges each task only what it can
produce: at 3 vs 3 a 3/3 against 0/3 task fires while at most one other task could also reach
1/20 (1 − 0.95² = 0.0975 ≤ 0.10). ``bench/gate_veto_power.py`` prints its power at the first and
the last look's runs, with and without pooled history, and its false-veto rate on A/A suites.
"""

import math
from fractions import Fraction
from typing import Literal

from bench_assets.gate.folding import Task
from bench_assets.gate.models import RegressionVeto
from bench_assets.gate.numerics import fisher_worse_p

Method = Literal["min_p", "bonferroni"]


def attainable(inc_runs: int, cand_runs: int, successes: int) -> list[Fraction]:
    """Every one-sided Fisher p a table with these margins can produce, ascending:
    ``P(K ≤ k)`` for each feasible count ``k`` of candidate successes."""
    total = inc_runs + cand_runs
    low = max(0, successes - inc_runs)
    high = min(cand_runs, successes)
    out: list[Fraction] = []
    acc = 0
    denom = math.comb(total, cand_runs)
    for k in range(low, high + 1):
        acc += math.comb(successes, k) * math.comb(total - successes, cand_runs - k)
        out.append(Fraction(acc, denom))
    return out


def _reach(ps: list[Fraction], c: Fraction) -> Fraction:
    """The largest attainable p that is ≤ c (0 when none is): P(p ≤ c) under the null."""
    best = Fraction(0)
    for p in ps:
        if p > c:
            break
        best = p
    return best


def adjusted(tables: list[tuple[int, int, int, int]], only_below: float = 1.0) -> list[float]:
    """Min-p adjusted p of each table ``(inc_resolved, inc_runs, cand_resolved, cand_runs)``.

    Tables whose raw p is above ``only_below`` get their raw p (the adjusted p is never smaller,
    so they cannot fire at that level); this keeps a 200-task suite's look cheap."""
    raws = [fisher_worse_p(ir, iv, cr, cv) for ir, iv, cr, cv in tables]
    supports = [attainable(iv, cv, ir + cr) for ir, iv, cr, cv in tables]
    out: list[float] = []
    for raw in raws:
        if raw > only_below:
            out.append(float(raw))
            continue
        keep = 1.0
        for ps in supports:
            keep *= 1.0 - float(_reach(ps, raw))
        out.append(1.0 - keep)
    return out


def screen(counted: list[Task], error: float, method: Method) -> RegressionVeto:
    """Test every counted task; mark ``hard_regression`` (keep) where the veto fires."""
    if not counted:
        return RegressionVeto(
            method=method, error=error, tasks=0, testable=0, smallest_p=None, adjusted_p=None
        )
    tables = [(t.inc.resolved, t.inc.valid, t.cand.resolved, t.cand.valid) for t in counted]
    level = Fraction(error).limit_denominator(10**9)
    if method == "bonferroni":
        cut = level / len(counted)
        raws = [fisher_worse_p(*tab) for tab in tables]
        adj = [min(1.0, float(r) * len(counted)) for r in raws]
        testable = sum(1 for ir, iv, cr, cv in tables if attainable(iv, cv, ir + cr)[0] <= cut)
    else:
        raws = [fisher_worse_p(*tab) for tab in tables]
        adj = adjusted(tables, only_below=error)
        testable = sum(1 for ir, iv, cr, cv in tables if attainable(iv, cv, ir + cr)[0] <= level)
    fired: list[str] = []
    for t, raw, a in zip(counted, raws, adj, strict=True):
        t.fisher_p = raw
        if a <= error:
            t.hard_regression = True
            fired.append(t.task)
            how = (
                f"Bonferroni over {len(counted)} tasks"
                if method == "bonferroni"
                else f"exact min-p over {len(counted)} tasks"
            )
            t.add(
                "hard_regression",
                "keep",
                f"{t.task}: hard regression: candidate resolved {t.cand.resolved}/{t.cand.valid} "
                f"where the comparator resolved {t.inc.resolved}/{t.inc.valid} (one-sided Fisher "
                f"p = {float(raw):.4f}, family-wise {a:.4f} ≤ {error:g}, {how}).",
            )
    i = min(range(len(counted)), key=lambda j: (adj[j], raws[j]))
    return RegressionVeto(
        method=method,
        error=error,
        tasks=len(counted),
        testable=testable,
        smallest_p=float(raws[i]),
        adjusted_p=adj[i],
        smallest_task=counted[i].task,
        fired=fired,
    )
