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
