"""The gate's numerics: exact thresholds, the exact sign and Fisher tests, Student's t (CDF,
quantile, the one-sample test) and the seeded task-cluster bootstrap.

Pure functions of their arguments. Counts and thresholds stay exact (:class:`~fractions.Fraction`)
wherever a value can meet a threshold on a lattice point; the bootstrap draws come from numpy's
PCG64 stream, so its bounds recompute bit-for-bit on the same numpy release.
"""

import functools
import math
import statistics
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from bench_assets.gate.models import Bounds


def exact(value: float) -> Fraction:
    """A configured threshold as the exact decimal it was written as."""
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


def t_test(xs: Sequence[float], level: float) -> tuple[Bounds, float, float | None, float, float]:
    """One-sample Student t test of mean zero (df = n − 1; needs n ≥ 2).

    Args:
        xs: The sample.
        level: One-sided confidence of each bound.

    Returns:
        The mean with one-sided bounds at ``level``, the sample standard deviation, the t
        statistic (``None`` at zero spread), the two-sided p-value, and the one-sided p-value
        ``P(T ≤ t)`` of the alternative that the mean is below zero.
    """
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


def pct(value: float) -> str:
    """A fraction as a percentage with one decimal, for messages."""
    return f"{100.0 * value:.1f}%"


def quantile(p: float, df: int | None) -> float:
    """Student's t quantile with ``df`` degrees of freedom, the normal one when ``df`` is
    ``None`` (a standard error estimated from the run-level model, not from the tasks)."""
    if df is None:
        if not 0.0 < p < 1.0:
            raise ValueError("p must be in (0, 1)")
        return statistics.NormalDist().inv_cdf(p)
    return t_quantile(p, df)
