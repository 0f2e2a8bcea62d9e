"""bench/analysis/stats/: the median's confidence interval, and every helper against SciPy or its own definition
(SciPy is a test-time oracle only: bench does not import it)."""
import itertools
import math
import random

import numpy as np
import pytest
from scipy import stats as sps

from bench.analysis.stats.intervals import (_binom_cdf, bootstrap, bootstrap_ci, bootstrap_many, median_ci,
                                            median_of_draws, percentile_interval, ratio_ci, ratio_ci_many,
                                            resample_indices)
from bench.analysis.stats.mean_tests import (confidence_sequence, confidence_sequence_half_width, mixture_evalue, t_cdf,
                                             t_interval, t_quantile)
from bench.analysis.stats.noise import noise_sigma
from bench.analysis.stats.ranks import mann_whitney, ratio_interval


def test_small_samples_get_min_max_with_their_true_coverage():
    ci = median_ci([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (ci.median, ci.low, ci.high) == (3.0, 1.0, 5.0)
    assert ci.coverage == pytest.approx(1 - 2 / 32)  # 93.75%: five values cannot give 95%


def test_larger_samples_use_inner_order_statistics_with_at_least_95_percent():
    values = list(range(1, 21))  # n = 20: the sign-test interval is [x6, x15]
    ci = median_ci(values)
    assert (ci.low, ci.high) == (6, 15)
    assert 0.95 <= ci.coverage < 0.99


def test_coverage_holds_in_simulation():
    rng = random.Random(7)
    hits = 0
    for _ in range(2000):
        ci = median_ci([rng.gauss(100, 10) for _ in range(12)])
        hits += ci.low <= 100 <= ci.high
    assert hits / 2000 >= 0.94


def test_single_value_and_no_value():
    assert median_ci([7.0]).low == median_ci([7.0]).high == 7.0
    with pytest.raises(ValueError):
        median_ci([])


# --- the rank test and its interval against SciPy -------------------------------------------------------------------

SAMPLE_SIZES = [(2, 2), (2, 5), (3, 3), (3, 4), (4, 4), (5, 3), (5, 5), (6, 4), (7, 7), (9, 3)]


def _two_samples(m: int, n: int, seed: int, ties: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(baseline of n, candidate of m), the candidate shifted by a random amount either way."""
    rng = np.random.default_rng(seed)
    if ties:
        return rng.integers(1, 5, n).astype(float), rng.integers(1, 5, m).astype(float)
    return rng.lognormal(0, 0.1, n) * 100, rng.lognormal(0, 0.1, m) * 100 * rng.uniform(0.85, 1.15)


@pytest.mark.parametrize("m,n", SAMPLE_SIZES)
@pytest.mark.parametrize("seed", range(4))
def test_mann_whitney_is_scipys_exact_one_sided_test(m, n, seed):
    """p_slower is scipy's exact p of "candidate less than baseline", p_faster of "greater" (no ties)."""
    b, c = _two_samples(m, n, seed)
    p_slower, p_faster = mann_whitney(b, c)
    assert p_slower == pytest.approx(sps.mannwhitneyu(c, b, alternative="less", method="exact").pvalue, rel=1e-12)
    assert p_faster == pytest.approx(sps.mannwhitneyu(c, b, alternative="greater", method="exact").pvalue, rel=1e-12)


def _rank_sum(x, y, axis=-1):
    return sps.rankdata(np.concatenate([x, y], axis=axis), axis=axis)[..., :x.shape[axis]].sum(axis=axis)


@pytest.mark.parametrize("m,n", [(2, 3), (3, 3), (4, 3), (4, 5), (5, 5)])
@pytest.mark.parametrize("seed", range(3))
def test_mann_whitney_with_ties_is_scipys_exact_permutation_test_of_the_midrank_sum(m, n, seed):
    b, c = _two_samples(m, n, seed, ties=True)
    assert len(set(b) | set(c)) < m + n  # ties, really
    p_slower, p_faster = mann_whitney(b, c)
    for p, alternative in ((p_slower, "less"), (p_faster, "greater")):
        ref = sps.permutation_test((c, b), _rank_sum, permutation_type="independent", alternative=alternative,
                                   n_resamples=np.inf, vectorized=True).pvalue
        assert p == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("ties", [False, True])
def test_mann_whitney_past_the_exact_limit_is_scipys_normal_approximation(ties):
    b, c = _two_samples(16, 15, 5, ties=ties)  # C(31, 16) = 300 million arrangements: the normal approximation
    p_slower, p_faster = mann_whitney(b, c)
    for p, alternative in ((p_slower, "less"), (p_faster, "greater")):
        ref = sps.mannwhitneyu(c, b, alternative=alternative, method="asymptotic", use_continuity=True).pvalue
        assert p == pytest.approx(ref, rel=1e-9)


def _u_cdf_by_enumeration(m: int, n: int) -> list[float]:
    """P(U <= u), u = 0..mn, U the count of pairs (candidate > baseline) over every split of m + n distinct values."""
    counts = [0] * (m * n + 1)
    for picked in itertools.combinations(range(m + n), m):
        counts[sum(picked) - m * (m - 1) // 2] += 1
    total = sum(counts)
    return list(itertools.accumulate(c / total for c in counts))


@pytest.mark.parametrize("m,n", SAMPLE_SIZES)
@pytest.mark.parametrize("level", [0.95, 0.90])
def test_moses_interval_is_the_order_statistics_of_the_pairwise_log_ratios(m, n, level):
    """Brute force: k the largest with P(U <= k-1) <= (1 - level) / 2 (k >= 1), the interval the k-th smallest and
    the k-th largest of the m·n pairwise log-ratios, exponentiated, coverage 1 - 2 P(U <= k-1)."""
    b, c = _two_samples(m, n, seed=m * 100 + n)
    cdf = _u_cdf_by_enumeration(m, n)
    tail = (1 - level) / 2
    k = max([j for j in range(1, (m * n + 1) // 2 + 1) if cdf[j - 1] <= tail], default=1)
    diffs = sorted(math.log(y) - math.log(x) for y in c for x in b)
    low, high, coverage = ratio_interval(b, c, level)
    assert low == pytest.approx(math.exp(diffs[k - 1]), rel=1e-12)
    assert high == pytest.approx(math.exp(diffs[m * n - k]), rel=1e-12)
    assert coverage == pytest.approx(1 - 2 * cdf[k - 1], rel=1e-12)


@pytest.mark.parametrize("m,n", SAMPLE_SIZES)
def test_moses_interval_is_the_set_of_shifts_scipys_exact_test_does_not_reject(m, n):
    """Inverting the test: a log-shift just outside either end is rejected by scipy's exact one-sided test at
    (1 - coverage) / 2 (when the sizes allow a 95% interval at all), one just inside is not."""
    b, c = _two_samples(m, n, seed=m * 10 + n)
    lb, lc = np.log(b), np.log(c)
    low, high, coverage = ratio_interval(b, c)
    diffs = np.unique(lc[:, None] - lb[None, :])
    assert len(diffs) == m * n

    def p(shift, alternative):
        return sps.mannwhitneyu(lc - shift, lb, alternative=alternative, method="exact").pvalue

    def between(x, side):  # halfway to the next pairwise log-ratio on that side (or a step past the last)
        i = int(np.argmin(np.abs(diffs - x)))  # x is one of them, up to log(exp(.))'s rounding
        neighbour = diffs[i + side] if 0 <= i + side < len(diffs) else x + side
        return (x + neighbour) / 2

    lo, hi = math.log(low), math.log(high)
    outside_low, outside_high = p(between(lo, -1), "greater"), p(between(hi, +1), "less")
    assert coverage == pytest.approx(1 - 2 * outside_low, rel=1e-12) == pytest.approx(1 - 2 * outside_high)
    if coverage >= 0.95:
        assert outside_low <= 0.025 and outside_high <= 0.025
    assert p(between(lo, +1), "greater") > 0.025 or coverage < 0.95
    assert p(between(hi, -1), "less") > 0.025 or coverage < 0.95


def test_moses_interval_past_the_exact_limit_uses_the_normal_quantile_of_u():
    b, c = _two_samples(16, 15, 7)
    m, n = len(c), len(b)
    z = sps.norm.ppf(0.975)
    k = int(math.floor(m * n / 2 - z * math.sqrt(m * n * (m + n + 1) / 12)))
    diffs = np.sort((np.log(c)[:, None] - np.log(b)[None, :]).ravel())
    low, high, coverage = ratio_interval(b, c)
    assert (low, high, coverage) == pytest.approx((math.exp(diffs[k - 1]), math.exp(diffs[m * n - k]), 0.95),
                                                  rel=1e-12)


# --- Student's t against SciPy ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("df", [1, 2, 3, 5, 9, 30, 120])
def test_t_distribution_is_scipys(df):
    for p in (0.001, 0.025, 0.05, 0.1, 0.3, 0.7, 0.9, 0.95, 0.975, 0.999):
        assert t_quantile(p, df) == pytest.approx(sps.t.ppf(p, df), rel=1e-9, abs=1e-10)
    # At the median t_cdf is flat within sqrt(df · machine epsilon) of 0 (df / (df + t²) rounds to 1 there), so
    # the bisection stops up to ~1e-7 short of 0; the verdicts never ask for p = 0.5 (alpha < 0.5, power > 0.5).
    assert t_quantile(0.5, df) == pytest.approx(0.0, abs=2e-7)
    for t in (-40.0, -6.3, -2.0, -0.5, 0.0, 0.3, 1.7, 4.0, 25.0):
        assert t_cdf(t, df) == pytest.approx(sps.t.cdf(t, df), rel=1e-10, abs=1e-13)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_t_interval_is_scipys_one_sample_t_test(n, alpha):
    rng = np.random.default_rng(n)
    values = list(rng.normal(-0.03, 0.05, n))
    t = t_interval(values, alpha)
    two_sided = sps.ttest_1samp(values, 0.0)
    assert (t.low, t.high) == pytest.approx(tuple(two_sided.confidence_interval(1 - 2 * alpha)), rel=1e-8)
    assert t.p_below == pytest.approx(sps.ttest_1samp(values, 0.0, alternative="less").pvalue, rel=1e-9)
    assert t.mean == pytest.approx(np.mean(values), rel=1e-12) and t.n == n
    assert t.sd == pytest.approx(np.std(values, ddof=1), rel=1e-12)


def test_t_interval_without_spread_is_the_value_and_the_sign_decides():
    below, above = t_interval([-0.1] * 4, 0.05), t_interval([0.1] * 4, 0.05)
    assert (below.low, below.high, below.p_below) == pytest.approx((-0.1, -0.1, 0.0))
    assert above.p_below == 1.0
    with pytest.raises(ValueError):
        t_interval([0.1], 0.05)


# --- the anytime-valid interval (Lai's mixture) --------------------------------------------------------------------

def _mixture_by_quadrature(values, mu0, c):
    """E_n(mu0) from its definition, numerically: the scale-invariant likelihood (sigma integrated against
    d sigma / sigma) mixed over theta ~ N(0, 1/c), divided by the same at theta = 0."""
    x = np.asarray(values) - mu0
    n = len(x)
    log_sigma = np.linspace(-12, 8, 4001)
    sigma = np.exp(log_sigma)[:, None]
    theta = np.linspace(-12, 12, 2401)[None, :] / math.sqrt(c)
    prior = np.sqrt(c / (2 * math.pi)) * np.exp(-c * theta ** 2 / 2)
    s, q = x.sum(), (x ** 2).sum()

    def integrand(th):  # sigma^-n exp(-sum (x/sigma - theta)^2 / 2), per d log sigma
        return np.exp(-n * np.log(sigma) - (q / sigma ** 2 - 2 * th * s / sigma + n * th ** 2) / 2)

    num = np.trapezoid(np.trapezoid(integrand(theta) * prior, theta[0], axis=1), log_sigma)
    den = np.trapezoid(integrand(np.zeros((1, 1)))[:, 0], log_sigma)
    return num / den


@pytest.mark.parametrize("values,mu0,c", [([0.3, -0.1, 0.5, 0.2], 0.0, 0.1), ([1.2, 0.9, 1.1], 1.0, 1.0),
                                          ([0.05, 0.07, 0.02, 0.06, 0.04], 0.0, 0.5)])
def test_the_mixture_evidence_is_its_definition_integrated(values, mu0, c):
    assert mixture_evalue(values, mu0, c) == pytest.approx(_mixture_by_quadrature(values, mu0, c), rel=1e-4)


def test_the_mixture_is_one_after_one_value_and_does_not_see_the_scale():
    assert mixture_evalue([0.37], 0.0) == pytest.approx(1.0)
    values = [0.1, -0.05, 0.02, 0.07, 0.0, 0.03]
    assert mixture_evalue(values, 0.0) == pytest.approx(mixture_evalue([1000 * v for v in values], 0.0))
    wide, narrow = confidence_sequence(values, 0.05), confidence_sequence([1000 * v for v in values], 0.05)
    assert (narrow.low, narrow.high) == pytest.approx((1000 * wide.low, 1000 * wide.high))


def test_the_interval_ends_where_the_evidence_reaches_one_over_alpha():
    values = [0.1, -0.05, 0.02, 0.07, 0.0, 0.03]
    cs = confidence_sequence(values, 0.05)
    assert mixture_evalue(values, cs.low) == pytest.approx(20.0)
    assert mixture_evalue(values, cs.high) == pytest.approx(20.0)
    assert mixture_evalue(values, cs.mean) < 20 and cs.level == 0.95
    assert cs.p_zero == 1.0  # the mean (0.028) is well inside: no evidence against 0
    assert confidence_sequence([-0.1, -0.11, -0.09, -0.1], 0.05).p_zero < 0.05
    assert confidence_sequence([0.1, -0.2], 0.05).high == math.inf  # two values cannot bound it at 95%
    with pytest.raises(ValueError):
        confidence_sequence([0.1], 0.05)


def test_the_interval_covers_the_mean_at_every_look_together_where_a_t_interval_does_not():
    # 2000 series of 30 values, looked at after each from the second on: the confidence sequence misses the mean
    # at some look in at most alpha of them; Student's 95% t-interval, re-computed at each look, in far more.
    rng = np.random.default_rng(11)
    series, looks, alpha = 2000, 30, 0.05
    sd = rng.choice([0.01, 0.07, 1.0], size=(series, 1))
    x = rng.normal(0.0, 1.0, (series, looks)) * sd
    n = np.arange(1, looks + 1)
    mean = np.cumsum(x, axis=1) / n
    v = np.cumsum(x ** 2, axis=1) - n * mean ** 2
    spread = np.sqrt(np.maximum(v, 0))
    cs_half = np.array([confidence_sequence_half_width(k, 1.0, alpha) for k in n[1:]])  # scales as sqrt(v)
    cs_miss = (np.abs(mean[:, 1:]) >= cs_half * spread[:, 1:]).any(axis=1).mean()
    t_q = np.array([t_quantile(1 - alpha / 2, k - 1) for k in n[2:]])
    t_miss = (np.abs(mean[:, 2:]) > t_q * spread[:, 2:] / np.sqrt((n[2:] - 1) * n[2:])).any(axis=1).mean()
    assert cs_miss <= alpha + 0.01, cs_miss
    assert t_miss > 4 * alpha, t_miss


# --- the noise of a series and the median's interval against SciPy ---------------------------------------------------

def test_noise_sigma_is_the_normal_scaled_mad_of_the_first_differences():
    rng = np.random.default_rng(4)
    x = rng.normal(0, 0.05, 40)
    d = np.diff(x)
    assert noise_sigma(x) == pytest.approx(sps.median_abs_deviation(d, scale=0.6745) / math.sqrt(2), rel=1e-12)
    assert noise_sigma(x) == pytest.approx(sps.median_abs_deviation(d, scale="normal") / math.sqrt(2), rel=1e-4)
    stepped = x + np.r_[np.zeros(20), np.full(20, 1.0)]  # a step far above the noise moves one difference only
    assert noise_sigma(stepped) == pytest.approx(noise_sigma(x), rel=0.15)
    assert noise_sigma(x[:2]) == 0.0


@pytest.mark.parametrize("n", [1, 2, 5, 6, 12, 20, 41])
def test_median_ci_is_the_binomial_sign_test_interval(n):
    values = list(np.random.default_rng(n).normal(100, 10, n))
    ci = median_ci(values)
    xs = sorted(values)
    assert ci.median == pytest.approx(np.median(xs))
    if n == 1:
        return
    cdf = [sps.binom.cdf(j, n, 0.5) for j in range(n)]
    assert _binom_cdf(n // 3, n) == pytest.approx(cdf[n // 3], rel=1e-12)
    k = max([j for j in range(1, n // 2 + 1) if cdf[j - 1] <= 0.025], default=0)
    if k == 0:
        assert (ci.low, ci.high, ci.coverage) == pytest.approx((xs[0], xs[-1], 1 - 2 * cdf[0]))
    else:
        assert (ci.low, ci.high, ci.coverage) == pytest.approx((xs[k - 1], xs[n - k], 1 - 2 * cdf[k - 1]))


# --- the bootstraps against their own definition -------------------------------------------------------------------

QUANTILES = [(1 - 0.95) / 2, 1 - (1 - 0.95) / 2]  # 95%: what leaves 2.5% out on each side (as floats compute it)

def test_resample_indices_are_one_seeded_generator_in_order():
    a, b = resample_indices(50, 3, 7, seed=9)
    rng = np.random.default_rng(9)
    assert np.array_equal(a, rng.integers(0, 3, size=(50, 3))) and np.array_equal(b, rng.integers(0, 7, size=(50, 7)))


@pytest.mark.parametrize("n", [2, 3, 5, 8])
@pytest.mark.parametrize("seed", [0, 3])
def test_bootstrap_ci_is_the_percentile_interval_of_the_resampled_medians(n, seed):
    x = np.random.default_rng(100 + n).lognormal(0, 0.2, n) * 50
    draws = np.random.default_rng(seed).integers(0, n, size=(2000, n))
    medians = np.median(x[draws], axis=1)
    ci = bootstrap_ci(list(x), seed=seed)
    assert (ci.low, ci.high) == tuple(float(q) for q in np.quantile(medians, QUANTILES))
    assert ci.estimate == pytest.approx(np.median(x)) and ci.n == n
    assert ci.low <= ci.high and x.min() <= ci.low and ci.high <= x.max()
    # percentile_interval is numpy's quantiles, also along an axis
    assert np.array_equal(percentile_interval(medians), np.quantile(medians, QUANTILES))
    mat = np.vstack([medians, medians[::-1] * 2])
    assert np.array_equal(percentile_interval(mat, axis=1), np.quantile(mat, QUANTILES, axis=1))


@pytest.mark.parametrize("k", [2, 3, 4, 7, 12, 13])
def test_median_of_draws_is_numpys_median_of_each_resample(k):
    rng = np.random.default_rng(k)
    mat = rng.normal(size=(5, k))
    draws = rng.integers(0, k, size=(300, k))
    assert np.array_equal(median_of_draws(mat, draws), np.median(mat[:, draws], axis=2))


def test_bootstrap_many_and_ratio_ci_many_equal_their_one_at_a_time_forms():
    rng = np.random.default_rng(8)
    samples = [tuple(rng.lognormal(0, 0.2, k) * 10) for k in (1, 2, 3, 3, 5, 9, 14)] + [(), (float("nan"),)]
    many = bootstrap_many(samples)
    for row, s in zip(many, samples):
        clean = [v for v in s if math.isfinite(v)]
        if not clean:
            assert np.isnan(row).all()
            continue
        one = bootstrap_ci(clean)
        assert tuple(row) == (one.low, one.high)
    others = [tuple(rng.lognormal(0, 0.2, k) * 12) for k in (1, 3, 2, 3, 5, 4, 2)] + [(1.0,), (2.0,)]
    ratios = ratio_ci_many(samples, others)
    for row, a, b in zip(ratios, samples, others):
        clean = [v for v in a if math.isfinite(v)]
        if not clean:
            assert np.isnan(row).all()
            continue
        assert tuple(row) == ratio_ci(clean, b)


def test_ratio_ci_is_the_percentile_interval_of_resampled_median_ratios():
    a, b = np.array([10.0, 11.0, 9.5, 10.4]), np.array([8.0, 8.5, 7.9])
    rng = np.random.default_rng(2)
    da, db = rng.integers(0, 4, size=(2000, 4)), rng.integers(0, 3, size=(2000, 3))
    r = np.median(a[da], axis=1) / np.median(b[db], axis=1)
    assert ratio_ci(a, b, seed=2) == tuple(float(q) for q in np.quantile(r, QUANTILES))


def test_bootstrap_of_any_statistic_keeps_the_resamples_it_can_use():
    x = np.arange(10.0)
    y = 3 + 2 * x + np.random.default_rng(1).normal(0, 0.5, 10)

    def fit(pick):
        if len(np.unique(x[pick])) < 2:
            return None
        slope, intercept = np.polyfit(x[pick], y[pick], 1)
        return intercept, slope

    (lo_a, hi_a), (lo_b, hi_b) = bootstrap(10, fit, n_boot=500, seed=4)
    kept = [v for v in map(fit, np.random.default_rng(4).integers(0, 10, size=(500, 10))) if v is not None]
    assert (lo_b, hi_b) == tuple(float(v) for v in np.quantile([s for _, s in kept], QUANTILES))
    assert (lo_a, hi_a) == tuple(float(v) for v in np.quantile([i for i, _ in kept], QUANTILES))
    assert lo_b < 2 < hi_b and lo_a < 3 < hi_a
