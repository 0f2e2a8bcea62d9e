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

The t distribution, the t-interval and the power formula are bench/analysis/stats.py's (`t_interval`,
`t_detectable_shift`, `t_power`); this module turns pairs into log ratios and the interval into a verdict.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from bench.analysis import AnalysisError
from bench.analysis.stats import t_detectable_shift, t_interval, t_power

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
    return 1 - math.exp(-t_detectable_shift(sd_log, n_pairs, alpha, power))


def power_at(slowdown: float, sd_log: float, n_pairs: int, alpha: float = 0.05) -> float:
    """Power of the one-sided paired test to detect a true slowdown (fraction) at this noise and n (the shifted
    central t approximation of the noncentral t)."""
    if n_pairs < 2 or sd_log <= 0:
        return math.nan if n_pairs < 2 else 1.0
    return t_power(-math.log(1 - slowdown), sd_log, n_pairs, alpha)


def paired_verdict(a: Sequence[float], b: Sequence[float], settings: PairedSettings = PairedSettings()
                   ) -> PairedResult:
    logs = log_ratios(a, b)
    n = len(logs)
    level = 1 - 2 * settings.alpha
    if n < MIN_PAIRS:
        ratio = math.exp(sum(logs) / n) if n else math.nan
        return PairedResult(n, ratio, math.nan, math.nan, level, math.nan, math.nan, math.nan, "insufficient-data")
    t = t_interval(logs, settings.alpha)  # identical ratios: the sign of the shift decides p_slower
    low, high, p_slower, sd = math.exp(t.low), math.exp(t.high), t.p_below, t.sd
    ratio = math.exp(t.mean)
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
