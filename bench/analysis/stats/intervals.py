"""Intervals of a median and of a ratio of medians.

- `median_ci`: the 95% interval of a median as a pair of order statistics chosen from the binomial distribution
  (the sign-test interval): no normality assumption, no resampling noise, the same answer every time. With few
  samples the exact 95% interval does not exist; then the widest one, [min, max], is returned with the coverage it
  really has.
- Percentile bootstraps, all seeded (the same data gives the same interval every time), all drawing their resamples
  through `resample_indices`: of a median (`bootstrap_ci`, and `bootstrap_many` for many samples at once), of a
  ratio of two medians from independent samples (`ratio_ci`, `ratio_ci_many`), and of any statistic of n items
  (`bootstrap`, e.g. a fit over points).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

N_BOOT = 2000
LEVEL = 0.95
_CHUNK = 5_000_000  # resampled values held at once by the vectorised forms


@dataclass(frozen=True)
class MedianCI:
    median: float
    low: float
    high: float
    coverage: float  # the interval's actual confidence level (≥ the 95% asked for, when n allows)
    n: int


def _binom_cdf(k: int, n: int) -> float:
    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n


def median_ci(values: list[float], level: float = LEVEL) -> MedianCI:
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


# --- the bootstrap's pieces ------------------------------------------------------------------------------------
def finite(values) -> np.ndarray:
    """The values that are numbers (None, NaN and infinities left out), as floats."""
    return np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def resample_indices(n_boot: int, *sizes: int, seed: int = 0) -> list[np.ndarray]:
    """For each sample size k in turn, (n_boot, k) indices drawn with replacement from one generator seeded with
    `seed`: the resamples of every bootstrap here."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, k, size=(n_boot, k)) for k in sizes]


def percentile_interval(stats, level: float = LEVEL, axis: int | None = None) -> np.ndarray:
    """The (low, high) quantiles of bootstrap statistics that leave (1 - level) / 2 out on each side."""
    return np.quantile(stats, [(1 - level) / 2, 1 - (1 - level) / 2], axis=axis)


def median_of_draws(mat: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """np.median(mat[:, draws], axis=2) — the median of each bootstrap resample of each row — computed with a
    sorting network of element-wise min/max (exact: the same numbers as sorting), without building the 3-D array.
    Much faster for the handful of job-level repeats a cell has."""
    k = draws.shape[1]
    if k > 12:
        return np.median(mat[:, draws], axis=2)
    cols = [mat[:, draws[:, i]] for i in range(k)]  # k arrays of (rows, n_boot)
    for r in range(k):  # odd-even transposition sort: k rounds sort k values
        for i in range(r % 2, k - 1, 2):
            lo = np.minimum(cols[i], cols[i + 1])
            cols[i + 1] = np.maximum(cols[i], cols[i + 1])
            cols[i] = lo
    return (cols[(k - 1) // 2] + cols[k // 2]) / 2


# --- one sample ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BootstrapCI:
    estimate: float
    low: float
    high: float
    n: int


def bootstrap_ci(values, *, stat=statistics.median, level: float = LEVEL, n_boot: int = N_BOOT,
                 seed: int = 0) -> BootstrapCI:
    """Percentile bootstrap interval of `stat` over `values` (job-level repeats). One value gives a zero-width
    interval at that value; callers decide if that's enough."""
    xs = finite(values)
    if xs.size == 0:
        raise ValueError("no values")
    est = float(stat(xs))
    if xs.size == 1:
        return BootstrapCI(est, est, est, 1)
    draws, = resample_indices(n_boot, xs.size, seed=seed)
    samples = xs[draws]
    stats = np.median(samples, axis=1) if stat is statistics.median else np.apply_along_axis(stat, 1, samples)
    lo, hi = percentile_interval(stats, level)
    return BootstrapCI(est, float(lo), float(hi), int(xs.size))


def bootstrap_many(values: list[tuple], *, level: float = LEVEL, n_boot: int = N_BOOT, seed: int = 0) -> np.ndarray:
    """(low, high) of bootstrap_ci(v) (median) for every tuple in `values`, as an (n, 2) array (NaN where a tuple
    has no value): the same resampling indices bootstrap_ci draws for a sample of size k, applied to all samples of
    size k at once. Tested equal to bootstrap_ci value for value."""
    out = np.full((len(values), 2), np.nan)
    clean = [finite(v) for v in values]
    by_size: dict[int, list[int]] = {}
    for i, v in enumerate(clean):
        by_size.setdefault(v.size, []).append(i)
    for k, idx in by_size.items():
        if k == 0:
            continue
        mat = np.vstack([clean[i] for i in idx])
        if k == 1:
            out[idx] = np.repeat(mat, 2, axis=1)
            continue
        draws, = resample_indices(n_boot, k, seed=seed)
        chunk = max(1, _CHUNK // (n_boot * k))
        for s in range(0, len(idx), chunk):
            stats = median_of_draws(mat[s:s + chunk], draws)  # (cells, n_boot)
            out[idx[s:s + chunk]] = percentile_interval(stats, level, axis=1).T
    return out


# --- two independent samples: a ratio of medians --------------------------------------------------------------------
def ratio_ci(a_values, b_values, *, level: float = LEVEL, n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of median(a) / median(b), each side resampled on its own (independent jobs)."""
    a, b = finite(a_values), finite(b_values)
    if a.size == 0 or b.size == 0:
        raise ValueError("no values")
    if a.size == 1 and b.size == 1:
        r = float(a[0] / b[0])
        return r, r
    da, db = resample_indices(n_boot, a.size, b.size, seed=seed)
    lo, hi = percentile_interval(np.median(a[da], axis=1) / np.median(b[db], axis=1), level)
    return float(lo), float(hi)


def ratio_ci_many(a_values: list[tuple], b_values: list[tuple], *, level: float = LEVEL, n_boot: int = N_BOOT,
                  seed: int = 0) -> np.ndarray:
    """ratio_ci for many pairs at once, (n, 2) (NaN where a side has no value): pairs with the same sample sizes
    share the resampling indices ratio_ci would draw for them, so the numbers are the same, pair by pair."""
    out = np.full((len(a_values), 2), np.nan)
    clean_a, clean_b = [finite(a) for a in a_values], [finite(b) for b in b_values]
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (a, b) in enumerate(zip(clean_a, clean_b)):
        groups.setdefault((a.size, b.size), []).append(i)
    for (ka, kb), idx in groups.items():
        if ka == 0 or kb == 0:
            continue
        A = np.vstack([clean_a[i] for i in idx])
        B = np.vstack([clean_b[i] for i in idx])
        if ka == 1 and kb == 1:
            r = (A / B)[:, 0]
            out[idx] = np.column_stack([r, r])
            continue
        da, db = resample_indices(n_boot, ka, kb, seed=seed)
        chunk = max(1, _CHUNK // (n_boot * max(ka, kb)))
        for s in range(0, len(idx), chunk):
            ratios = median_of_draws(A[s:s + chunk], da) / median_of_draws(B[s:s + chunk], db)
            out[idx[s:s + chunk]] = percentile_interval(ratios, level, axis=1).T
    return out


# --- any statistic --------------------------------------------------------------------------------------------------
def bootstrap(n: int, stat: Callable[[np.ndarray], Sequence[float] | None], *, n_boot: int = N_BOOT,
              level: float = LEVEL, seed: int = 0) -> list[tuple[float, float]]:
    """Percentile bootstrap intervals of a statistic of n items (points of a fit, say): `stat` gets each
    resample's indices and returns its values (one interval each), or None to leave out a resample it cannot use."""
    draws, = resample_indices(n_boot, n, seed=seed)
    kept = [values for values in map(stat, draws) if values is not None]
    return [tuple(float(v) for v in percentile_interval(column, level)) for column in zip(*kept)]
