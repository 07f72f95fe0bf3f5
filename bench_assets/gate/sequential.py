"""Group-sequential boundaries for gate v3: Lan–DeMets error spending on observed information.

A one-sided test looked at ``K`` times on a statistic ``Z_k`` whose information grows (the
canonical joint distribution: ``Z_k = W(I_k)/√I_k`` for a Brownian motion ``W`` with drift
``θ``). With information fractions ``0 < t_1 < … < t_K = 1`` and a spending function ``α(t)``,
the boundary ``b_k`` is the value for which, under ``θ = 0``, the chance of first crossing at
look ``k`` is ``α(t_k) − α(t_{k−1})``. Earlier looks are recomputed from their fractions, so a
decision at look ``k`` needs only the fractions of looks ``1..k``.

* ``obrien_fleming`` (Lan–DeMets): ``α(t) = 2 − 2Φ(z_{1−α/2}/√t)`` — almost nothing spent
  early, nearly the fixed-sample level at the end;
* ``pocock`` (Lan–DeMets): ``α(t) = α·ln(1 + (e − 1)t)``.

The crossing probabilities are integrated numerically (Armitage–McPherson–Rowe recursion on a
fixed grid; Jennison & Turnbull ch. 19), in numpy: deterministic for the same inputs on the same
numpy release. Fractions are rounded to 2 decimals first (a design's error moves by far less
than the Monte-Carlo error of its calibration), so nearby looks share a cache entry.
:func:`crossing` runs the same recursion with a drift and a lower (futility) boundary, for the
power report.

The looks' schedule lives here too: which tasks a partial top-up pays (:func:`top_up_tasks`,
never from an outcome), the runs each task will have (:func:`planned_after`,
:func:`planned_candidate_runs`), the information fractions of the looks so far from the runs each
task had (:class:`LookSchedule`), and a planned top-up run with no outcome
(:func:`missing_top_ups`).
"""

import functools
import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from bench_assets.config.models import PolicyConfig
from bench_assets.gate.folding import Task
from bench_assets.gate.models import Finding, GateInput, RunOutcome
from bench_assets.kernel.hashing import sha256_text

_N = NormalDist()
_GRID = 0.04
_LOW = -9.0
_ERFC = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)


def norm_sf(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``1 − Φ(x)``, elementwise, by the Chebyshev erfc of Numerical Recipes (fractional error
    below 1.2e-7 everywhere, so also in the far tail)."""
    y = np.abs(np.asarray(x, dtype=np.float64)) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.5 * y)
    poly = np.zeros_like(t)
    for c in reversed(_ERFC[1:]):
        poly = t * (c + poly)
    tail = t * np.exp(-y * y + _ERFC[0] + poly)
    return np.where(np.asarray(x) >= 0, tail, 2.0 - tail) / 2.0


def spent(alpha: float, t: float, kind: str) -> float:
    """Error spent up to information fraction ``t`` (``α`` at ``t ≥ 1``)."""
    if alpha <= 0.0 or t <= 0.0:
        return 0.0
    if t >= 1.0:
        return alpha
    if kind == "pocock":
        return alpha * math.log1p((math.e - 1.0) * t)
    z = _N.inv_cdf(1.0 - alpha / 2.0)
    return 2.0 * (1.0 - _N.cdf(z / math.sqrt(t)))


def _grid(upper: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    n = max(2, math.ceil((upper - _LOW) / _GRID) + 1)
    z = np.linspace(_LOW, upper, n)
    w = np.full(n, (upper - _LOW) / (n - 1))
    w[0] /= 2
    w[-1] /= 2
    return z, w


def _phi(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _cross(
    z: npt.NDArray[np.float64],
    dens: npt.NDArray[np.float64],
    t0: float,
    t1: float,
    b: float,
    drift: float,
) -> float:
    """Chance of ``Z(t1) ≥ b`` from the sub-density ``dens`` of ``Z(t0)`` on ``z``."""
    dt = t1 - t0
    mean = z * math.sqrt(t0) + drift * dt
    x = (b * math.sqrt(t1) - mean) / math.sqrt(dt)
    return float(np.sum(dens * norm_sf(x)))


def _propagate(
    z: npt.NDArray[np.float64],
    dens: npt.NDArray[np.float64],
    t0: float,
    t1: float,
    lo: float,
    hi: float,
    drift: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Sub-density (times grid weights) of ``Z(t1)`` on the continuation region ``[lo, hi)``."""
    z1, w1 = _grid(hi)
    keep = z1 >= lo
    z1, w1 = z1[keep], w1[keep]
    dt = t1 - t0
    mean = z[:, None] * math.sqrt(t0) + drift * dt
    kern = _phi((z1[None, :] * math.sqrt(t1) - mean) / math.sqrt(dt)) * math.sqrt(t1 / dt)
    return z1, (dens @ kern) * w1


@functools.lru_cache(maxsize=512)
def _boundaries(ts: tuple[float, ...], alpha: float, kind: str) -> tuple[float, ...]:
    out: list[float] = []
    z = np.zeros(0)
    dens = np.zeros(0)
    prev_t = 0.0
    prev_spent = 0.0
    for k, t in enumerate(ts):
        target = spent(alpha, t, kind) - prev_spent
        if k == 0:
            b = _N.inv_cdf(1.0 - target) if target > 0 else math.inf
        else:
            if target <= 1e-15:
                b = math.inf
            else:
                lo_b, hi_b = -3.0, 12.0
                for _ in range(60):
                    mid = (lo_b + hi_b) / 2
                    if _cross(z, dens, prev_t, t, mid, 0.0) > target:
                        lo_b = mid
                    else:
                        hi_b = mid
                b = (lo_b + hi_b) / 2
        out.append(b)
        hi = min(b, 12.0)
        if k == 0:
            z, w = _grid(hi)
            dens = _phi(z) * w
        else:
            z, dens = _propagate(z, dens, prev_t, t, _LOW, hi, 0.0)
        prev_spent = spent(alpha, t, kind)
        prev_t = t
    return tuple(out)


def fractions(ts: Sequence[float]) -> tuple[float, ...]:
    """Information fractions as the design reads them: clipped to (0, 1], increasing, at 2
    decimals, the last look's 1 when it is the last."""
    out: list[float] = []
    for t in ts:
        v = round(min(1.0, max(0.01, t)), 2)
        if out and v <= out[-1]:
            v = min(1.0, out[-1] + 0.01)
        out.append(v)
    return tuple(out)


def boundaries(ts: Sequence[float], alpha: float, kind: str) -> list[float]:
    """One-sided z boundaries ``b_1..b_k`` for information fractions ``ts`` (see the module).

    Args:
        ts: Information fractions of the looks so far, increasing, the last look's 1.
        alpha: The one-sided error spent over all looks.
        kind: ``obrien_fleming`` or ``pocock``.

    Returns:
        The boundary of each look (``inf`` where nothing is spent).
    """
    return list(_boundaries(fractions(ts), float(alpha), kind))


def nominal(ts: Sequence[float], alpha: float, kind: str) -> float:
    """The one-sided nominal level ``1 − Φ(b_k)`` of the last look of ``ts``."""
    if alpha <= 0.0:
        return 0.0
    b = boundaries(ts, alpha, kind)[-1]
    return 0.0 if math.isinf(b) else 1.0 - _N.cdf(b)


def crossing(
    ts: Sequence[float],
    upper: Sequence[float],
    lower: Sequence[float],
    drift: float,
) -> tuple[list[float], list[float]]:
    """Chances of first crossing the upper and the lower boundary at each look.

    Args:
        ts: Information fractions (the canonical process on information scale 1 at ``t = 1``).
        upper: Upper z boundaries (``inf``: none).
        lower: Lower z boundaries (``-inf``: none).
        drift: ``θ·√I_max``: the mean of ``Z`` at ``t`` is ``drift·√t``.

    Returns:
        Per look, the chance of stopping up and of stopping down there.
    """
    ups: list[float] = []
    downs: list[float] = []
    z = np.zeros(0)
    dens = np.zeros(0)
    prev = 0.0
    for k, t in enumerate(ts):
        hi = min(upper[k], 12.0)
        lo = max(lower[k], _LOW)
        if k == 0:
            mean = drift * math.sqrt(t)
            ups.append(1.0 - _N.cdf(hi - mean) if hi < 12.0 else 0.0)
            downs.append(_N.cdf(lo - mean) if lo > _LOW else 0.0)
            z, w = _grid(hi)
            keep = z >= lo
            z, w = z[keep], w[keep]
            dens = _phi(z - mean) * w
        else:
            ups.append(_cross(z, dens, prev, t, hi, drift) if hi < 12.0 else 0.0)
            below = 1.0 - _cross(z, dens, prev, t, lo, drift) if lo > _LOW else 0.0
            downs.append(max(0.0, below))
            z, dens = _propagate(z, dens, prev, t, lo, hi, drift)
        prev = t
    return ups, downs


def top_up_count(tasks: int, first_runs: int, share: float, step: int) -> int:
    """How many tasks a top-up pays (``PolicyConfig.top_up_share``): enough for ``share`` of
    the first look's candidate cells (``first_runs`` per task) at ``step`` runs each, at least
    one task and at most every task."""
    want = math.ceil(share * first_runs * tasks / max(1, step) - 1e-9)
    return min(tasks, max(1, want))


def top_up_tasks(
    tasks: Sequence[str], planned: Mapping[str, int], count: int, look: int
) -> list[str]:
    """The ``count`` tasks a partial top-up after look ``look`` pays.

    The tasks with the fewest planned candidate runs, ties broken by the SHA-256 of
    ``"<look>/<task>"``: fixed by the task ids and the look number alone, so no outcome (nothing
    the agent produced) steers which tasks get more runs, and every task's rate stays an
    unbiased mean of its runs. Successive top-ups go round the tasks before any gets a second.

    Args:
        tasks: The planned task ids.
        planned: Candidate runs planned per task so far (a task not listed: 0).
        count: How many tasks to pay (:func:`top_up_count`).
        look: The look that asks for the top-up.

    Returns:
        The chosen task ids, sorted.
    """
    order = sorted(tasks, key=lambda t: (planned.get(t, 0), sha256_text(f"{look}/{t}")))
    return sorted(order[: max(0, count)])


def planned_after(
    tasks: Sequence[str],
    planned: Mapping[str, int],
    count: int,
    look: int,
    looks_left: int,
    step: int,
) -> dict[str, int]:
    """Candidate runs per task after ``looks_left`` more top-ups of ``count`` tasks (the first
    after look ``look``) by :func:`top_up_tasks`: the design's runs at its last look."""
    out = {t: planned.get(t, 0) for t in tasks}
    for k in range(looks_left):
        for t in top_up_tasks(tasks, out, count, look + k):
            out[t] += step
    return out


class LookSchedule:
    """The design's runs per look and the information fractions of looks ``1..look``.

    With every top-up paying every task (``top_up_share`` 1) a look's runs are the mean valid
    runs now less the top-ups since. With partial top-ups each task's runs at look ``j`` are its
    valid runs now less the top-ups after look ``j`` that paid it (``Look.top_up_tasks`` of the
    prior looks), and its runs at the last look follow :func:`~bench_assets.gate.sequential.
    planned_after`: the fractions are built per task from what each task had.
    """

    def __init__(self, inp: GateInput, counted: list[Task]) -> None:
        policy = inp.policy
        self.look = min(inp.look, policy.max_looks)
        self.max_looks = policy.max_looks
        self.last = self.look >= policy.max_looks
        n = max(1, len(counted))
        self.now = sum(t.cand.valid for t in counted) / n
        step = policy.top_up_runs
        self.planned = planned_candidate_runs(inp)
        tops = [(lk.look, lk.top_up_tasks) for lk in inp.prior_looks if lk.action == "top_up"]
        fulls = sum(ts is None for _, ts in tops)
        first_runs = inp.planned_runs.get(inp.candidate_arm, 0) - fulls * step
        if first_runs < 1:  # no plan given (an ad-hoc input): the runs the tasks have
            first_runs = max(1, round(self.now) - len(tops) * step)
        tasks = max(1, len(inp.tasks))
        self.count = top_up_count(tasks, first_runs, policy.top_up_share, step)
        # Per task only when every top-up before this look is on record; an ad-hoc decision
        # (the last look, no looks recorded) reads the design's schedule on the mean, as before.
        self.partial = (self.count < tasks or any(ts is not None for _, ts in tops)) and len(
            tops
        ) == self.look - 1
        mean_step = step * self.count / tasks
        self.task_runs: dict[str, list[float]] = {}
        self.task_final: dict[str, float] = {}
        if self.partial:
            final = planned_after(
                inp.tasks,
                self.planned,
                self.count,
                self.look,
                policy.max_looks - self.look,
                step,
            )
            for t in counted:
                paid = [i for i, ts in tops if ts is None or t.task in ts]
                self.task_runs[t.task] = [
                    max(1.0, t.cand.valid - step * sum(i >= j for i in paid))
                    for j in range(1, self.look + 1)
                ]
                more = final.get(t.task, 0) - self.planned.get(t.task, 0)
                self.task_final[t.task] = t.cand.valid + more
            self.first = sum(r[0] for r in self.task_runs.values()) / n
            self.final = sum(self.task_final.values()) / n
            self.runs = [sum(r[j] for r in self.task_runs.values()) / n for j in range(self.look)]
        else:  # every task topped up each time (mean_step = step, the rule before partial ones)
            self.first = max(1.0, self.now - (self.look - 1) * mean_step)
            self.runs = [
                max(1.0, self.now - (self.look - j) * mean_step) for j in range(1, self.look + 1)
            ]
            self.final = self.now + (policy.max_looks - self.look) * mean_step

    def fractions(self, parts: list[tuple[str, float, float]]) -> list[float]:
        """``V(M)/V(m_j)`` for a variance ``Σ fixed_t + per_run_t/m_t`` over the tasks
        ``(task, fixed_t, per_run_t)`` of ``parts`` (1 at the last look)."""
        fixed = per_run = 0.0
        for _, f, r in parts:
            fixed += f
            per_run += r
        out = []
        for j in range(1, self.look + 1):
            if self.last and j == self.look:
                out.append(1.0)
                continue
            if self.partial:
                v_m = math.fsum(f + r / self.task_runs[t][j - 1] for t, f, r in parts)
                v_final = math.fsum(f + r / self.task_final[t] for t, f, r in parts)
            else:
                m = self.runs[j - 1]
                v_m = fixed + per_run / m
                v_final = fixed + per_run / self.final
            out.append(v_final / v_m if v_m > 0 else 1.0)
        # An earlier look with (to the design's 2 decimals) all of the last look's information
        # bought nothing: it is no look of its own (an ad-hoc input at one run per task reads
        # every imagined look at the same runs; the boundary recursion needs information to grow).
        return [v for v in out[:-1] if v < 0.995] + out[-1:]


def planned_candidate_runs(inp: GateInput) -> dict[str, int]:
    """Candidate runs planned per task: ``planned_runs`` (the first look's runs and every top-up
    that paid every task) plus ``top_up_runs`` for each prior partial top-up that listed it."""
    base = inp.planned_runs.get(inp.candidate_arm, 0)
    step = inp.policy.top_up_runs
    out = dict.fromkeys(inp.tasks, base)
    for lk in inp.prior_looks:
        if lk.action == "top_up" and lk.top_up_tasks is not None:
            for t in lk.top_up_tasks:
                if t in out:
                    out[t] += step
    return out


def missing_top_ups(t: Task, inp: GateInput, rows: dict[str, list[RunOutcome]]) -> None:
    """A run a partial top-up planned for this task and that has no outcome: insufficient, like
    any missing cell (the runs below ``planned_runs`` are checked by the v2 task rules)."""
    planned = planned_candidate_runs(inp).get(t.task, 0)
    have = {o.run for o in rows.get(inp.candidate_arm, []) if not o.pooled}
    first = inp.planned_runs.get(inp.candidate_arm, 0)
    missing = [r for r in range(first, planned) if r not in have]
    if missing:
        t.add(
            "missing_cells",
            "insufficient",
            f"{t.task}: candidate top-up run(s) {', '.join(f'r{r}' for r in missing)} have "
            "no outcome (a missing cell never passes).",
        )


def partial_top_up_finding(look: int, policy: PolicyConfig, chosen: list[str], n: int) -> Finding:
    """The finding of a look that tops up part of the tasks: which, and by what rule."""
    shown = ", ".join(chosen[:8]) + (f", … ({len(chosen) - 8} more)" if len(chosen) > 8 else "")
    return Finding(
        rule="sequential",
        effect="insufficient",
        task=None,
        message=f"look {look}/{policy.max_looks} inconclusive: the planner pays "
        f"{policy.top_up_runs} more candidate run(s) on {len(chosen)} of {n} tasks "
        f"(top_up_share {policy.top_up_share:g} of the first look's cells: the tasks with the "
        "fewest planned candidate "
        f"runs, ties broken by SHA-256 of look and task id): {shown}; the gate looks again.",
    )
