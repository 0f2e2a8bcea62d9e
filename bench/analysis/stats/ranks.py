"""Two independent samples, by rank: `mann_whitney`, the exact one-sided Mann–Whitney p-values in each direction (the
permutation distribution of a rank sum, midranks for ties, counted exactly up to `_EXACT_MAX` arrangements, normal
with the tie correction beyond), and `ratio_interval`, the Moses (Hodges–Lehmann) interval that goes with it, of a
ratio: order statistics of the pairwise log-ratios chosen from the exact null distribution of U.
"""
from __future__ import annotations

import math
import statistics
from functools import lru_cache

import numpy as np

from bench.analysis.stats.intervals import LEVEL

# Exact distributions are computed while the arrangement count stays below this; the normal approximation (with
# the tie correction) is already good there.
_EXACT_MAX = 2_000_000


@lru_cache(maxsize=4096)
def _subset_sum_counts(scores: tuple[int, ...], m: int) -> np.ndarray:
    """counts[s] = number of size-m subsets of `scores` (non-negative integers) summing to s."""
    total = sum(sorted(scores)[-m:]) if m else 0
    dp = np.zeros((m + 1, total + 1), dtype=np.float64)  # float: counts exceed int64 only far past _EXACT_MAX
    dp[0, 0] = 1.0
    for score in scores:
        if score:
            dp[1:, score:] += dp[:-1, :-score].copy()
        else:
            dp[1:] += dp[:-1].copy()
    return dp[m]


@lru_cache(maxsize=4096)
def _cdf_u_no_ties(m: int, n: int) -> np.ndarray:
    """P(U <= u) for u = 0..m*n, U the Mann–Whitney count of one sample of m against n, no ties."""
    counts = _subset_sum_counts(tuple(range(m + n)), m)  # ranks 0..N-1: sum of the m chosen = U + m(m-1)/2
    base = m * (m - 1) // 2
    u_counts = counts[base:base + m * n + 1]
    return np.cumsum(u_counts) / u_counts.sum()


@lru_cache(maxsize=4096)
def _no_tie_tails(m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """P(W <= w) and P(W >= w) for W the sum of m doubled 0-based ranks out of m + n, no ties."""
    counts = _subset_sum_counts(tuple(range(0, 2 * (m + n), 2)), m)
    total = counts.sum()
    return np.cumsum(counts) / total, np.cumsum(counts[::-1])[::-1] / total


def _midranks_doubled(values: np.ndarray) -> np.ndarray:
    """2 × (midrank - 1) of each value: integers, ties share the average."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    new = np.empty(len(values), dtype=bool)
    new[0] = True
    np.not_equal(sorted_vals[1:], sorted_vals[:-1], out=new[1:])
    first = np.flatnonzero(new)                        # 0-based rank where each run of equal values starts
    if len(first) == len(values):                      # no ties: the common case, and a quick one
        ranks = np.empty(len(values), dtype=np.int64)
        ranks[order] = np.arange(0, 2 * len(values), 2)
        return ranks
    last = np.append(first[1:], len(values)) - 1       # ... and ends
    run = np.cumsum(new) - 1
    ranks = np.empty(len(values), dtype=np.int64)
    ranks[order] = first[run] + last[run]              # 2 × the average of ranks first..last
    return ranks


def mann_whitney(baseline: np.ndarray, candidate: np.ndarray) -> tuple[float, float]:
    """Exact one-sided p-values (p_slower, p_faster): the chance under 'no difference' of a candidate rank sum as
    low (as high) as the one seen. Midranks for ties; the permutation distribution is exact while the number of
    arrangements stays below _EXACT_MAX, else normal with the tie correction."""
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(candidate, dtype=float)
    m, n = len(c), len(b)
    pooled = np.concatenate([c, b])
    ranks = _midranks_doubled(pooled)
    w = int(ranks[:m].sum())
    big_n = m + n
    ties = len(set(ranks.tolist())) < big_n
    if math.comb(big_n, m) <= _EXACT_MAX:
        if ties:
            counts = _subset_sum_counts(tuple(int(r) for r in np.sort(ranks)), m)
            cdf, sf = np.cumsum(counts) / counts.sum(), np.cumsum(counts[::-1])[::-1] / counts.sum()
        else:
            cdf, sf = _no_tie_tails(m, n)
        return float(min(cdf[w], 1.0)), float(min(sf[w], 1.0))
    # Normal approximation on the doubled rank sum, with continuity (the step between sums is at least 1) and ties.
    mean = m * (big_n - 1)
    _, tie_counts = np.unique(pooled, return_counts=True)
    var = 4 * m * n / 12 * ((big_n + 1) - (tie_counts ** 3 - tie_counts).sum() / (big_n * (big_n - 1)))
    sd = math.sqrt(var) if var > 0 else 1.0
    p_slower = 0.5 * math.erfc(-((w + 1 - mean) / sd) / math.sqrt(2))
    p_faster = 0.5 * math.erfc(((w - 1 - mean) / sd) / math.sqrt(2))
    return float(min(p_slower, 1.0)), float(min(p_faster, 1.0))


def ratio_interval(baseline: np.ndarray, candidate: np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """(low, high, coverage) for candidate/baseline: the Moses interval of the shift in log throughput, i.e. order
    statistics k and mn+1-k of the m·n pairwise log-ratios, k from the exact null distribution of U. Too few values
    for `level`: the widest interval (min and max pairwise ratio) with the coverage it has."""
    b = np.log(np.asarray(baseline, dtype=float))
    c = np.log(np.asarray(candidate, dtype=float))
    m, n = len(c), len(b)
    diffs = np.sort((c[:, None] - b[None, :]).ravel())
    tail = (1 - level) / 2
    if math.comb(m + n, m) <= _EXACT_MAX:
        cdf = _cdf_u_no_ties(m, n)
        # Largest k >= 1 with P(U <= k-1) <= tail.
        k = int(np.searchsorted(cdf, tail, side="right"))
        if k == 0:
            k, coverage = 1, 1 - 2 * float(cdf[0])
        else:
            coverage = 1 - 2 * float(cdf[k - 1])
    else:
        z = statistics.NormalDist().inv_cdf(1 - tail)
        k = max(1, int(math.floor(m * n / 2 - z * math.sqrt(m * n * (m + n + 1) / 12))))
        coverage = level
    k = min(k, (m * n + 1) // 2)
    return float(math.exp(diffs[k - 1])), float(math.exp(diffs[m * n - k])), coverage
