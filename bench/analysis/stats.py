"""Uncertainty of a median, distribution-free.

The 95% interval is a pair of order statistics chosen from the binomial distribution (the sign-test interval): no
normality assumption, no resampling noise, the same answer every time. With few samples the exact 95% interval
does not exist; then the widest one, [min, max], is returned with the coverage it really has.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class MedianCI:
    median: float
    low: float
    high: float
    coverage: float  # the interval's actual confidence level (≥ the 95% asked for, when n allows)
    n: int


def _binom_cdf(k: int, n: int) -> float:
    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n


def median_ci(values: list[float], level: float = 0.95) -> MedianCI:
    xs = sorted(v for v in values if v is not None and math.isfinite(v))
    n = len(xs)
    if n == 0:
        raise ValueError("no values")
    med = statistics.median(xs)
    if n == 1:
        return MedianCI(med, xs[0], xs[0], 0.0, 1)
    # Largest k with P(Binom(n, 1/2) <= k - 1) <= (1 - level) / 2: the interval [x_(k), x_(n-k+1)] (1-based).
    alpha = (1 - level) / 2
    k = 0
    while k + 1 <= n // 2 and _binom_cdf(k, n) <= alpha:
        k += 1
    if k == 0:  # too few values for the requested level: widest interval, honest coverage
        return MedianCI(med, xs[0], xs[-1], 1 - 2 * _binom_cdf(0, n), n)
    return MedianCI(med, xs[k - 1], xs[n - k], 1 - 2 * _binom_cdf(k - 1, n), n)


@dataclass(frozen=True)
class BootstrapCI:
    estimate: float
    low: float
    high: float
    n: int


def bootstrap_ci(values, *, stat=statistics.median, level: float = 0.95, n_boot: int = 2000,
                 seed: int = 0) -> BootstrapCI:
    """Percentile bootstrap interval of `stat` over `values` (job-level repeats). Seeded: the same data gives the
    same interval every time. One value gives a zero-width interval at that value; callers decide if that's enough."""
    import numpy as np

    xs = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if xs.size == 0:
        raise ValueError("no values")
    est = float(stat(xs))
    if xs.size == 1:
        return BootstrapCI(est, est, est, 1)
    rng = np.random.default_rng(seed)
    samples = xs[rng.integers(0, xs.size, size=(n_boot, xs.size))]
    stats = np.median(samples, axis=1) if stat is statistics.median else np.apply_along_axis(stat, 1, samples)
    lo, hi = np.quantile(stats, [(1 - level) / 2, 1 - (1 - level) / 2])
    return BootstrapCI(est, float(lo), float(hi), int(xs.size))
