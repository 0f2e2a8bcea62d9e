"""Statistics, in one place: every interval, rank test and t quantile in bench is computed here, as pure functions
(numbers in, numbers out) without scipy (tests/test_stats.py checks each one against it). What counts as an
observation, the verdicts and their thresholds stay with the callers (regress.py, paired.py, scaling.py, ...).

- `median_ci`: the 95% interval of a median as a pair of order statistics chosen from the binomial distribution
  (the sign-test interval): no normality assumption, no resampling noise, the same answer every time. With few
  samples the exact 95% interval does not exist; then the widest one, [min, max], is returned with the coverage it
  really has.
- Percentile bootstraps, all seeded (the same data gives the same interval every time), all drawing their resamples
  through `resample_indices`: of a median (`bootstrap_ci`, and `bootstrap_many` for many samples at once), of a
  ratio of two medians from independent samples (`ratio_ci`, `ratio_ci_many`), and of any statistic of n items
  (`bootstrap`, e.g. a fit over points).
- Two independent samples, by rank: `mann_whitney`, the exact one-sided Mann–Whitney p-values in each direction
  (the permutation distribution of a rank sum, midranks for ties, counted exactly up to `_EXACT_MAX` arrangements,
  normal with the tie correction beyond), and `ratio_interval`, the Moses (Hodges–Lehmann) interval that goes with
  it, of a ratio: order statistics of the pairwise log-ratios chosen from the exact null distribution of U.
- Student's t: `t_cdf` and `t_quantile` (the regularised incomplete beta function by its continued fraction),
  `t_interval` (the t-interval of a mean and the one-sided p-value of a mean below 0).
- Anytime-valid, for a mean of normal values with unknown spread looked at after every new value:
  `mixture_evalue` (Lai's scale-invariant mixture likelihood ratio, a test martingale) and `confidence_sequence`
  (the interval it gives, which covers the mean at every look at once with the stated probability).
- `noise_sigma`: a series' noise, robustly from its first differences (a step moves one difference only).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np

from bench.analysis import AnalysisError

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


# --- two independent samples: the Mann–Whitney rank test and the Moses interval ----------------------------------

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


# --- Student's t, without scipy -------------------------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (Numerical Recipes, 3rd ed., 6.4, modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1 + aa * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    if df < 1:
        raise AnalysisError(f"t distribution needs df >= 1, got {df}")
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))
    return 1 - tail if t > 0 else tail


@lru_cache(maxsize=1024)
def t_quantile(p: float, df: int) -> float:
    """The t with P(T <= t) = p (bisection: monotone, exact to 1e-10; within ~1e-7 of 0 at p = 0.5, where t_cdf is
    flat for t² below df · machine epsilon)."""
    if not 0 < p < 1:
        raise AnalysisError(f"a quantile needs 0 < p < 1, got {p:g}")
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return (lo + hi) / 2


@dataclass(frozen=True)
class TInterval:
    n: int
    mean: float
    sd: float        # the sample standard deviation (n - 1 in the denominator)
    low: float       # mean ∓ t[1 - alpha, n - 1] · sd / √n
    high: float
    p_below: float   # one-sided p-value of "the true mean is below 0": P(T <= mean / (sd / √n))


def t_interval(values: Sequence[float], alpha: float) -> TInterval:
    """Student's t-interval of the mean of `values` at level 1 - 2·alpha (alpha left out at each end, so its upper
    end lies below 0 exactly when the one-sided t-test at level alpha says the mean is below 0), and that test's
    p-value. Values that are all equal have no spread: the interval is that value, p 0 below 0, else 1."""
    n = len(values)
    if n < 2:
        raise AnalysisError(f"a t-interval needs at least 2 values, got {n}")
    mean = sum(values) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1))
    se = sd / math.sqrt(n)
    df = n - 1
    half = t_quantile(1 - alpha, df) * se
    p_below = t_cdf(mean / se, df) if se > 0 else (0.0 if mean < 0 else 1.0)
    return TInterval(n, mean, sd, mean - half, mean + half, p_below)


# --- anytime-valid inference on a mean ------------------------------------------------------------------------------
#
# A fixed-n interval re-computed after each new value and acted on as soon as it excludes a point is wrong far more
# often than its level says (the chance of a false call grows with every look). A confidence sequence holds at every
# look at once. The one here is Lai's (1976, "On confidence sequences", Ann. Statist. 4(2)) for normal values of
# unknown spread; derived in docs/regression-checks.md. The values are reduced to what does not depend on their scale
# (the statistic is unchanged when every value is multiplied by k > 0); under "the mean is mu0" the likelihood ratio
# of that reduction against the alternative "mean = mu0 + theta * sigma", mixed over theta ~ N(0, 1/c), is
#
#     E_n(mu0) = sqrt(c / (c + n)) * (Q / (Q - S^2 / (n + c)))^(n / 2),  S = sum(x - mu0),  Q = sum((x - mu0)^2),
#
# a nonnegative martingale with E_1 = 1 whatever sigma is. By Ville's inequality P(E_n >= 1/alpha for some n) <=
# alpha, so {mu0 : E_n(mu0) < 1/alpha} covers the mean at every n together with probability >= 1 - alpha. Solved
# for mu0 it is mean ± sqrt((K - 1) V / (n (1 - K c / (n + c)))), V = sum((x - mean)^2),
# K = ((1/alpha) sqrt((n + c) / c))^(2 / n); unbounded while K c >= n + c (too few values for the level asked).
# c is the prior's precision on the effect in units of sigma: it decides at which n the interval is tightest. 0.1
# gives a bounded 95% interval from 3 values on and stays within ~10% of the tightest choice from 6 to 30 values
# (the table in docs/regression-checks.md).

MIXTURE_PRECISION = 0.1


def mixture_evalue(values: Sequence[float], mu0: float, c: float = MIXTURE_PRECISION) -> float:
    """E_n(mu0) above: the evidence against "the mean is mu0" after these values (1 before the second value;
    a large value is strong evidence; its reciprocal, taken at its largest over the looks, is an anytime-valid
    p-value)."""
    if c <= 0:
        raise AnalysisError(f"the mixture's precision must be positive, got {c:g}")
    n = len(values)
    if n == 0:
        return 1.0
    s = sum(x - mu0 for x in values)
    q = sum((x - mu0) ** 2 for x in values)
    if q == 0:  # every value is mu0: no evidence against it
        return math.sqrt(c / (c + n))
    rest = q - s * s / (n + c)  # > 0: q >= s^2 / n > s^2 / (n + c)
    return math.exp(0.5 * math.log(c / (c + n)) + 0.5 * n * (math.log(q) - math.log(rest)))


@dataclass(frozen=True)
class ConfidenceSequence:
    n: int
    mean: float
    sd: float       # the sample standard deviation (n - 1 in the denominator)
    low: float      # -inf / inf while the interval is unbounded
    high: float
    level: float    # 1 - alpha, holding over every look together
    p_zero: float   # anytime-valid p-value of "the mean is 0": 1 / the largest E_k(0) over the looks k <= n, <= 1


def confidence_sequence_half_width(n: int, v: float, alpha: float, c: float = MIXTURE_PRECISION) -> float:
    """Half the width of the confidence sequence after n values whose squared deviations from their mean sum to v
    (inf while unbounded)."""
    if n < 2:
        return math.inf
    k = math.exp((2 / n) * (math.log(1 / alpha) + 0.5 * math.log((n + c) / c)))
    room = 1 - k * c / (n + c)
    if room <= 0:
        return math.inf
    return math.sqrt((k - 1) * v / (n * room))


def confidence_sequence(values: Sequence[float], alpha: float, c: float = MIXTURE_PRECISION) -> ConfidenceSequence:
    """The anytime-valid interval of the mean after these values (in the order they came: the p-value looks at
    every prefix)."""
    if not 0 < alpha < 1:
        raise AnalysisError(f"alpha must be between 0 and 1, got {alpha:g}")
    n = len(values)
    if n < 2:
        raise AnalysisError(f"a confidence sequence needs at least 2 values, got {n}")
    mean = sum(values) / n
    v = sum((x - mean) ** 2 for x in values)
    half = confidence_sequence_half_width(n, v, alpha, c)
    largest = max(mixture_evalue(values[:k], 0.0, c) for k in range(1, n + 1))
    return ConfidenceSequence(n, mean, math.sqrt(v / (n - 1)), mean - half, mean + half, 1 - alpha,
                              min(1.0, 1 / largest))


# --- the noise of a series ------------------------------------------------------------------------------------------

def noise_sigma(values: np.ndarray) -> float:
    """The standard deviation of a series' noise from its first differences, robustly: MAD / 0.6745 / √2 (a
    difference of two independent values has √2 times their spread; a step moves one difference only, so it
    barely moves the estimate). 0 below three values."""
    if len(values) < 3:
        return 0.0
    d = np.diff(values)
    return float(np.median(np.abs(d - np.median(d))) / 0.6745 / math.sqrt(2))
