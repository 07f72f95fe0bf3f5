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
"""

import functools
import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

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
