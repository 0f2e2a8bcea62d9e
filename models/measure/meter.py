"""The one throughput definition every workload uses (DESIGN.md's measurement rules).

Global throughput = Σ samples processed by all ranks inside the measured window / the window's wall time, where the
window is bounded by a barrier at both ends after device synchronisation. Never rank 0's rate × N, never a mean of
per-step rates. Per-rank rates are kept so the slowest rank can be named.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Callable


class EmptyWindowError(RuntimeError):
    """A measured window with no steps or no time: an error, never a zero."""


class WindowMeter:
    """Times one measured window on one rank. Call begin() right after the opening barrier, step() after each
    (synchronised) step, busy_end() after the last step, end() right after the closing barrier."""

    def __init__(self, clock: Callable[[], float] | None = None, wall: Callable[[], float] | None = None):
        self.clock, self.wall = clock or time.perf_counter, wall or time.time
        self.t0 = self.t_last = self.t_busy = self.t1 = None
        self.samples = 0
        self.step_times: list[float] = []

    def begin(self) -> None:
        self.t0 = self.t_last = self.clock()
        self.start_unix = self.wall()
        self.samples, self.step_times = 0, []

    def step(self, samples: int) -> None:
        now = self.clock()
        self.step_times.append(now - self.t_last)
        self.t_last = now
        self.samples += samples

    def busy_end(self) -> None:
        self.t_busy = self.clock()

    def end(self) -> None:
        self.t1 = self.clock()
        self.end_unix = self.wall()
        if self.t_busy is None:
            self.t_busy = self.t1

    def rank_summary(self, rank: int, host: str) -> dict:
        if self.t0 is None or self.t1 is None:
            raise EmptyWindowError("window was never opened and closed")
        busy = self.t_busy - self.t0
        return {
            "rank": rank, "host": host, "samples": self.samples, "steps": len(self.step_times),
            "window_s": self.t1 - self.t0, "busy_s": busy,
            "samples_per_sec": self.samples / busy if busy > 0 else None,
            "step_times_s": self.step_times,
            "start_unix": self.start_unix, "end_unix": self.end_unix,
        }


RANK_FIELDS = ("rank", "host", "samples", "steps", "window_s", "busy_s", "samples_per_sec")  # what a record keeps


def combine(ranks: list[dict]) -> dict:
    """Global figures from every rank's summary of the same window."""
    if not ranks:
        raise EmptyWindowError("no rank reported")
    samples = sum(r["samples"] for r in ranks)
    # Barrier-bounded: the ranks agree to within the barrier's skew. Each rank's window_s is a difference of its own
    # clock; ranks on other hosts have unrelated clocks, so no timestamp of one rank is ever combined with another's.
    window_s = max(r["window_s"] for r in ranks)
    if samples <= 0 or any(r["steps"] == 0 for r in ranks):
        raise EmptyWindowError(f"empty measured window ({samples} samples)")
    if not window_s > 0 or not math.isfinite(window_s):
        raise EmptyWindowError(f"measured window has no duration ({window_s!r} s)")
    steps = [t for r in ranks for t in r["step_times_s"]]
    slowest = min(ranks, key=lambda r: r["samples_per_sec"] or 0.0)
    samples_per_sec = samples / window_s
    return {
        "samples": samples,
        "window_s": window_s,
        "samples_per_sec": samples_per_sec,
        "samples_per_sec_per_gpu": samples_per_sec / len(ranks),
        # Wall-clock bounds, for ordering runs only: across hosts they come from different clocks; never subtracted.
        "start_unix": min(r["start_unix"] for r in ranks),
        "end_unix": max(r["end_unix"] for r in ranks),
        "step_time_s": {
            "mean": statistics.fmean(steps), "median": statistics.median(steps),
            "min": min(steps), "max": max(steps),
            "p90": sorted(steps)[min(len(steps) - 1, math.ceil(0.9 * len(steps)) - 1)],
        },
        "slowest_rank": slowest["rank"],
        "per_rank": [{**{k: r[k] for k in RANK_FIELDS},
                      **({"phases_s": r["phases_s"]} if r.get("phases_s") else {}),
                      **({"outside": r["outside"]} if r.get("outside") else {})}
                     for r in sorted(ranks, key=lambda r: r["rank"])],
    }
