"""Paired A/B verdicts, decided sequentially: the same cell measured under environment A and B, interleaved (A B,
B A, ...), one pair at a time until the pairs decide, as pure functions (no I/O).

Each pair is two runs made back to back on the same machine, so slow drift (load from other tenants, thermal state)
hits both and cancels in the pair's ratio B/A. The evidence is the log of those ratios, one per pair:

- the estimate is their mean, reported as a ratio: exp(mean log(B/A)) (the geometric mean of the pair ratios);
- its interval is an anytime-valid confidence sequence (bench.analysis.stats.confidence_sequence, Lai's mixture for
  normal values of unknown spread) at level 1 - alpha: it covers the true ratio at every look together, so a
  session may look after every pair and stop as soon as the interval decides, and the chance that any claim it
  makes about the cell is wrong stays at most alpha however many pairs it runs. A fixed-n t-interval re-run after
  each pair would not: re-looking inflates its false-alarm rate several-fold (tests/test_stats.py shows it);
- with m = min_effect, lo = log(1 - m), hi = log(1 + m) and the interval [L, U] of log(B/A), the verdict is:
  `regressed` when U < 0 (B slower) and L <= lo (a slowdown of m or more is not ruled out);
  `improved` the mirror image (L > 0 and U >= hi);
  `unchanged` ("no change larger than m") when lo < L and U < hi: the interval lies inside the band, which also
  covers a real but smaller change (named in the verdict's reason);
  `undecided` while none holds: the session adds pairs, and a session that ends so (its budget spent) says how
  many more pairs the noise seen would need (`pairs_to_decide`);
  `insufficient-data` below two pairs.
  Each wrong claim (regressed when B is not slower, unchanged when the change is m or more, ...) needs the interval
  to miss the true ratio, so each is bounded by alpha.

Why normal log ratios: a CPU quota or a slower library scales every step by the same factor, and log throughput
ratios of a fixed cell are close to normal; the mixture makes no assumption on their spread.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from bench.analysis import AnalysisError
from bench.analysis.stats.mean_tests import MIXTURE_PRECISION, confidence_sequence, confidence_sequence_half_width

MIN_PAIRS = 2          # the fewest pairs that give an interval (it is unbounded at 95% until the third)
DECIDED = ("regressed", "improved", "unchanged")
PROJECTION_LIMIT = 1000  # pairs looked ahead by pairs_to_decide


@dataclass(frozen=True)
class PairedSettings:
    min_effect: float = 0.10  # |ratio - 1| that matters: a change smaller than this is "no change"
    alpha: float = 0.05       # bound on the chance that a claim about a cell is wrong, over every look
    precision: float = MIXTURE_PRECISION  # the mixture's c (bench/analysis/stats/mean_tests.py)

    def __post_init__(self):
        if not 0 < self.min_effect < 1:
            raise AnalysisError(f"--min-effect must be between 0 and 1 (a fraction), got {self.min_effect:g}")
        if not 0 < self.alpha < 0.5:
            raise AnalysisError(f"alpha must be between 0 and 0.5, got {self.alpha:g}")
        if self.precision <= 0:
            raise AnalysisError(f"the mixture's precision must be positive, got {self.precision:g}")

    @property
    def band(self) -> tuple[float, float]:
        """The log ratios of "no change larger than min_effect": (log(1 - m), log(1 + m))."""
        return math.log1p(-self.min_effect), math.log1p(self.min_effect)


@dataclass(frozen=True)
class PairedResult:
    n_pairs: int
    ratio: float          # exp(mean log(B/A)); < 1: B slower
    ci_low: float         # the always-valid interval of the ratio (0 / inf while unbounded)
    ci_high: float
    level: float          # its confidence level, over every look together (1 - alpha)
    p_change: float       # anytime-valid p-value of "no change at all" (ratio 1)
    sd_log: float         # standard deviation of the log pair ratios (the paired noise)
    decides: float        # the smallest change (a fraction) these pairs would call at this noise; NaN below 2
    verdict: str
    why: str              # the verdict in words, with the numbers that made it
    pairs_to_decide: int | None  # undecided: more pairs the noise seen needs (None: not within reach)


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


def decision(low: float, high: float, settings: PairedSettings) -> str:
    """The verdict an interval [low, high] of log(B/A) reaches (module docstring)."""
    lo, hi = settings.band
    if high < 0 and low <= lo:
        return "regressed"
    if low > 0 and high >= hi:
        return "improved"
    if lo < low and high < hi:
        return "unchanged"
    return "undecided"


def pairs_to_decide(mean: float, sd: float, n: int, settings: PairedSettings) -> int | None:
    """How many more pairs would decide if the pairs to come looked like these (the same mean log ratio and spread):
    the first n' > n whose interval reaches a verdict. None when no n' within PROJECTION_LIMIT does."""
    for more in range(1, PROJECTION_LIMIT + 1):
        m = n + more
        half = confidence_sequence_half_width(m, (m - 1) * sd * sd, settings.alpha, settings.precision)
        if decision(mean - half, mean + half, settings) != "undecided":
            return more
    return None


def _pct(x: float) -> str:
    return f"{x:.1%}".replace(".0%", "%")


def _why(verdict: str, n: int, ratio: float, low: float, high: float, sd: float, more: int | None,
         settings: PairedSettings) -> str:
    m = _pct(settings.min_effect)
    interval = f"{low:.3f}–{high:.3f}" if math.isfinite(high) and low > 0 else "unbounded"
    said = f"{n} pairs, ratio {ratio:.3f}, {1 - settings.alpha:.0%} interval {interval}"
    if verdict == "regressed":
        return f"B slower by {_pct(1 - ratio)} ({said}: wholly below 1, and not within {m} of it)"
    if verdict == "improved":
        return f"B faster by {_pct(ratio - 1)} ({said}: wholly above 1, and not within {m} of it)"
    if verdict == "unchanged":
        side = "" if low <= 1 <= high else (f"; B is slower, by less than {m}" if high < 1 else
                                             f"; B is faster, by less than {m}")
        return f"no change larger than {m} ({said}: inside {1 - settings.min_effect:.2f}–" \
               f"{1 + settings.min_effect:.2f}{side})"
    noise = f"at the noise seen (sd of log B/A {sd:.3f})"
    ahead = f"about {more} more pair{'s' if more > 1 else ''} would decide {noise}" if more else \
        f"no number of pairs within {PROJECTION_LIMIT} decides {noise}"
    return f"undecided after {said}: it spans 1 and a change of {m}; {ahead}"


def paired_verdict(a: Sequence[float], b: Sequence[float], settings: PairedSettings = PairedSettings()
                   ) -> PairedResult:
    """The verdict after the pairs so far (in the order they ran)."""
    logs = log_ratios(a, b)
    n = len(logs)
    level = 1 - settings.alpha
    if n < MIN_PAIRS:
        ratio = math.exp(sum(logs) / n) if n else math.nan
        return PairedResult(n, ratio, math.nan, math.nan, level, math.nan, math.nan, math.nan, "insufficient-data",
                            f"{n} pair(s): at least {MIN_PAIRS} are needed for an interval", None)
    cs = confidence_sequence(logs, settings.alpha, settings.precision)
    verdict = decision(cs.low, cs.high, settings)
    more = pairs_to_decide(cs.mean, cs.sd, n, settings) if verdict == "undecided" else None
    ratio, low, high = math.exp(cs.mean), math.exp(cs.low), math.exp(cs.high)
    half = cs.high - cs.mean
    decides = 1 - math.exp(-half) if math.isfinite(half) else math.nan
    return PairedResult(n, ratio, low, high, level, cs.p_zero, cs.sd, decides, verdict,
                        _why(verdict, n, ratio, low, high, cs.sd, more, settings), more)


def pair_order(pair: int) -> tuple[str, str]:
    """Which side goes first in pair `pair` (0-based): A in even pairs, B in odd ones (A B, B A, A B, ...), so a
    drift over the session hits A and B alike."""
    return ("A", "B") if pair % 2 == 0 else ("B", "A")


# --- from windows to pairs ------------------------------------------------------------------------------------------

def pair_values(windows, run_side: dict[str, tuple[int, str]], keys: Sequence[str], statistic: str = "median"):
    """Window-level rows (run_id, status, samples_per_sec and the cell `keys`) of the session's runs, and which
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
    med = ok.groupby(["cell", "pair", "side"], sort=True)["samples_per_sec"]
    med = (med.median() if statistic == "median" else med.max()).unstack("side")
    med = med.reindex(columns=["A", "B"])
    med.columns.name = None
    out = med.reset_index().merge(ok.drop_duplicates("cell")[["cell", *keys]], on="cell", how="left")
    return out[columns]
