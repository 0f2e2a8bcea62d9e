"""Each cell's throughput over runs, and the change points in it (pure: no I/O).

Series: one point per (cell, run): the median of the run's ok windows of that cell, at the run's first window's
start time; a cell's points in time order.

Change points: PELT (Killick et al. 2012, via the `ruptures` library) on log throughput with the l2 cost (a shift
of the mean), penalty `PENALTY_FACTOR * log(n) * sigma^2`, where sigma is the series' noise estimated robustly from
its first differences (MAD / 0.6745 / sqrt 2: a step moves one difference only, so it barely moves the estimate;
bench/analysis/stats/noise.py's `noise_sigma`).
A change point is then kept only when the medians of the segments either side differ by at least `min_shift` (5%):
smaller steps are within what a shared machine does between runs. On simulated 12-run series with 5% noise
(tests/test_history.py's generator, 300 series each), factor 5 gave a change point in 7% of flat series and found a
20% step at the right run in 90%; factor 3: 17% and 86%; factor 8: 3% and 86%.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from bench.analysis.stats.noise import noise_sigma

PENALTY_FACTOR = 5.0
MIN_SHIFT = 0.05
MIN_SEGMENT = 2  # runs on each side of a change point
MIN_RUNS = 2 * MIN_SEGMENT


@dataclass(frozen=True)
class ChangePoint:
    index: int          # the first point of the new level
    before: float       # median throughput of the segment before
    after: float        # ... and after
    run_before: str     # the last run at the old level
    run_after: str      # the first run at the new level

    @property
    def ratio(self) -> float:
        return self.after / self.before


def run_series(windows: pd.DataFrame) -> pd.DataFrame:
    """Window rows (cell_id, run_id, status, samples_per_sec, start_unix) → one row per cell and run: cell_id,
    run_id, samples_per_sec (the run's median), windows, start_unix; ordered by cell, then time."""
    cols = ["cell_id", "run_id", "samples_per_sec", "windows", "start_unix"]
    if windows.empty:
        return pd.DataFrame(columns=cols)
    ok = windows[(windows["status"] == "ok") & windows["samples_per_sec"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    out = ok.groupby(["cell_id", "run_id"], as_index=False).agg(
        samples_per_sec=("samples_per_sec", "median"), windows=("samples_per_sec", "size"),
        start_unix=("start_unix", "min"))
    return out.sort_values(["cell_id", "start_unix", "run_id"], kind="stable").reset_index(drop=True)[cols]


def change_points(values: Sequence[float], run_ids: Sequence[str] | None = None, *, min_shift: float = MIN_SHIFT,
                  penalty_factor: float = PENALTY_FACTOR) -> list[ChangePoint]:
    """The change points of one series (throughputs in time order); none below MIN_RUNS points."""
    import ruptures

    x = np.log(np.asarray(values, dtype=float))
    n = len(x)
    run_ids = list(run_ids) if run_ids is not None else [str(i) for i in range(n)]
    if n < MIN_RUNS or not np.all(np.isfinite(x)):
        return []
    sigma = max(noise_sigma(x), 1e-3)  # a perfectly flat series still needs a positive penalty
    breaks = ruptures.Pelt(model="l2", min_size=MIN_SEGMENT, jump=1).fit(x.reshape(-1, 1)).predict(
        pen=penalty_factor * math.log(n) * sigma ** 2)
    edges = [0, *breaks]
    found = []
    for i in range(1, len(edges) - 1):
        before = float(np.exp(np.median(x[edges[i - 1]:edges[i]])))
        after = float(np.exp(np.median(x[edges[i]:edges[i + 1]])))
        if abs(math.log(after / before)) >= math.log1p(min_shift):
            k = edges[i]
            found.append(ChangePoint(k, before, after, run_ids[k - 1], run_ids[k]))
    return found


def cell_histories(series: pd.DataFrame, **kw) -> dict[str, list[ChangePoint]]:
    """cell_id → its change points, for every cell of run_series' output."""
    return {cell: change_points(g["samples_per_sec"].tolist(), g["run_id"].tolist(), **kw)
            for cell, g in series.groupby("cell_id", sort=False)}
