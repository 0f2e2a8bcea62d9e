"""Inference on a mean, without scipy.

- Student's t: `t_cdf` and `t_quantile` (the regularised incomplete beta function by its continued fraction),
  `t_interval` (the t-interval of a mean and the one-sided p-value of a mean below 0).
- Anytime-valid, for a mean of normal values with unknown spread looked at after every new value:
  `mixture_evalue` (Lai's scale-invariant mixture likelihood ratio, a test martingale) and `confidence_sequence`
  (the interval it gives, which covers the mean at every look at once with the stated probability).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from bench.analysis import AnalysisError


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
