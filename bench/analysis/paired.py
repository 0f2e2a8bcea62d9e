"""Paired A/B verdicts: the same cell measured under environment A and B, interleaved (A B B A ...), as pure
functions (no I/O).

Each pair is two runs made back to back on the same machine, so slow drift (load from other tenants, thermal state)
hits both and cancels in the pair's ratio B/A. The evidence is the log of those ratios, one per pair:

- the estimate is their mean, reported as a ratio: exp(mean log(B/A)) (the geometric mean of the pair ratios);
- its interval is Student's t-interval on the log ratios at level 1 - 2·alpha (90% for alpha = 0.05), so the
  interval's upper end lies below 1 exactly when the one-sided paired t-test calls B slower at level alpha;
- verdict, with m = min_effect: `regressed` when the interval lies below 1 and the ratio <= 1 - m; `improved` the
  mirror image; `unchanged` when the interval lies within [1 - m, 1 + m]; `inconclusive` otherwise;
  `insufficient-data` below three pairs (two degrees of freedom).
- the smallest slowdown detectable at `power` (90%) from the observed spread of the log ratios s over n pairs:
  delta = (t[1-alpha, n-1] + t[power, n-1]) · s / sqrt(n), i.e. a ratio of exp(-delta); the usual normal-theory
  sample-size formula with t quantiles (Cohen 1988, ch. 2; a shifted central t in place of the noncentral one).

Why a t-interval rather than a rank test: with 4-6 pairs an exact sign-flip test cannot reach p = 0.05 below 5 pairs
(2^4 = 16 arrangements), and log throughput ratios of a fixed cell are close to normal (a CPU quota or a slower
library scales every step by the same factor).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from bench.analysis import AnalysisError

PAIRED_VERDICTS = ("regressed", "improved", "unchanged", "inconclusive", "insufficient-data")
MIN_PAIRS = 3


@dataclass(frozen=True)
class PairedSettings:
    min_effect: float = 0.05  # |ratio - 1| a change must reach to be called one
    alpha: float = 0.05       # one-sided level of the paired test, per direction
    power: float = 0.90       # the power at which the detectable slowdown is stated

    def __post_init__(self):
        if not 0 < self.min_effect < 1:
            raise AnalysisError(f"--min-effect must be between 0 and 1 (a fraction), got {self.min_effect:g}")
        if not 0 < self.alpha < 0.5:
            raise AnalysisError(f"alpha must be between 0 and 0.5, got {self.alpha:g}")
        if not 0.5 < self.power < 1:
            raise AnalysisError(f"power must be between 0.5 and 1, got {self.power:g}")


@dataclass(frozen=True)
class PairedResult:
    n_pairs: int
    ratio: float          # exp(mean log(B/A)); < 1: B slower
    ci_low: float
    ci_high: float
    level: float          # the interval's confidence level (1 - 2·alpha)
    p_slower: float       # one-sided paired t-test p-value for "B slower"
    sd_log: float         # standard deviation of the log pair ratios (the paired noise)
    detectable: float     # smallest slowdown (a fraction) detected with `power` at this noise and n
    verdict: str


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
    """The t with P(T <= t) = p (bisection: monotone, exact to 1e-10)."""
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


# --- the verdict ----------------------------------------------------------------------------------------------------

def log_ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """log(B/A) per pair; a and b are the pairs' throughputs in pair order (higher is better)."""
    if len(a) != len(b):
        raise AnalysisError(f"paired samples differ in length: {len(a)} A, {len(b)} B")
    out = []
    for x, y in zip(a, b):
        if not (x is not None and y is not None and math.isfinite(x) and math.isfinite(y) and x > 0 and y > 0):
            raise AnalysisError(f"a pair's throughput must be a positive number, got A={x!r} B={y!r}")
        out.append(math.log(y / x))
    return out


def detectable_slowdown(sd_log: float, n_pairs: int, alpha: float = 0.05, power: float = 0.90) -> float:
    """The smallest slowdown (a fraction: 0.1 = B 10% slower) that n_pairs pairs with this paired noise detect
    with the given power at one-sided level alpha."""
    if n_pairs < 2:
        return math.nan
    df = n_pairs - 1
    delta = (t_quantile(1 - alpha, df) + t_quantile(power, df)) * sd_log / math.sqrt(n_pairs)
    return 1 - math.exp(-delta)


def power_at(slowdown: float, sd_log: float, n_pairs: int, alpha: float = 0.05) -> float:
    """Power of the one-sided paired test to detect a true slowdown (fraction) at this noise and n (the shifted
    central t approximation of the noncentral t)."""
    if n_pairs < 2 or sd_log <= 0:
        return math.nan if n_pairs < 2 else 1.0
    df = n_pairs - 1
    shift = -math.log(1 - slowdown) * math.sqrt(n_pairs) / sd_log
    return 1 - t_cdf(t_quantile(1 - alpha, df) - shift, df)


def paired_verdict(a: Sequence[float], b: Sequence[float], settings: PairedSettings = PairedSettings()
                   ) -> PairedResult:
    logs = log_ratios(a, b)
    n = len(logs)
    level = 1 - 2 * settings.alpha
    if n < MIN_PAIRS:
        ratio = math.exp(sum(logs) / n) if n else math.nan
        return PairedResult(n, ratio, math.nan, math.nan, level, math.nan, math.nan, math.nan, "insufficient-data")
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    se = sd / math.sqrt(n)
    df = n - 1
    half = t_quantile(1 - settings.alpha, df) * se
    low, high = math.exp(mean - half), math.exp(mean + half)
    if se > 0:
        p_slower = t_cdf(mean / se, df)
    else:  # identical ratios: the sign of the shift decides
        p_slower = 0.0 if mean < 0 else 1.0
    ratio = math.exp(mean)
    m = settings.min_effect
    if high < 1 and ratio <= 1 - m:
        verdict = "regressed"
    elif low > 1 and ratio >= 1 + m:
        verdict = "improved"
    elif low >= 1 - m and high <= 1 + m:
        verdict = "unchanged"
    else:
        verdict = "inconclusive"
    detectable = detectable_slowdown(sd, n, settings.alpha, settings.power)
    return PairedResult(n, ratio, low, high, level, p_slower, sd, detectable, verdict)


# --- from windows to pairs ------------------------------------------------------------------------------------------

def interleave(n_pairs: int) -> list[tuple[int, str]]:
    """The order of the runs: A B, B A, A B, ... (pair, side); a drift over the session hits A and B alike."""
    return [(k, side) for k in range(n_pairs) for side in (("A", "B") if k % 2 == 0 else ("B", "A"))]


def pair_values(windows, run_side: dict[str, tuple[int, str]], keys: Sequence[str], statistic: str = "median"):
    """Window-level rows (run_id, status, images_per_sec and the cell `keys`) of the session's runs, and which
    (pair, side) each run was → one row per cell and pair: `cell` (the keys' values joined, a matching key), the
    keys, `pair`, and `A`, `B`: each side's median over its ok windows in that run (NaN where a side measured
    nothing), or with statistic="peak" its fastest window (interference only ever slows a window down, so on a
    loaded machine the fastest window is the steadiest reading). Cells are matched on their keys, not their id (a
    git ref's workload version may differ)."""
    if statistic not in ("median", "peak"):
        raise AnalysisError(f"statistic must be median or peak, got {statistic!r}")
    import pandas as pd

    columns = ["cell", *keys, "pair", "A", "B"]
    ok = windows[(windows["status"] == "ok") & windows["run_id"].isin(list(run_side))] if not windows.empty \
        else windows
    if ok.empty:
        return pd.DataFrame(columns=columns)
    ok = ok.assign(cell=ok[list(keys)].map(str).agg("|".join, axis=1),
                   pair=ok["run_id"].map(lambda r: run_side[r][0]), side=ok["run_id"].map(lambda r: run_side[r][1]))
    med = ok.groupby(["cell", "pair", "side"], sort=True)["images_per_sec"]
    med = (med.median() if statistic == "median" else med.max()).unstack("side")
    med = med.reindex(columns=["A", "B"])
    med.columns.name = None
    out = med.reset_index().merge(ok.drop_duplicates("cell")[["cell", *keys]], on="cell", how="left")
    return out[columns]
