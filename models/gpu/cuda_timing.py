"""The CUDA-event cross-check of the wall-clock meter: does the GPU's own timing of each step agree with the host's?

The meter times each step on the host after synchronising the device (models/measure/meter.py). CUDA events recorded on
the stream before and after the same step time it on the GPU. The two agree when the GPU is busy through the step;
wall-clock steps clearly longer than the events say mean the GPU waited on the host (input, Python, launch
overhead: the rate is host-bound); event steps longer than the wall clock cannot happen for a synchronised step and
mean the timing itself is wrong. The arithmetic is pure and tested without a GPU; `EventTimer` makes the CUDA calls
and runs only where CUDA is present.
"""
from __future__ import annotations

import statistics
from typing import Any, Sequence

DEFAULT_TOLERANCE = 0.05  # 5 %: a synchronised step's host bookkeeping is well inside it at ResNet-50 step sizes
VERDICTS = ("agree", "host_bound", "inconsistent")


def cross_check(wall_s: Sequence[float], event_s: Sequence[float],
                tolerance: float = DEFAULT_TOLERANCE) -> dict[str, Any]:
    """Median wall-clock step vs median CUDA-event step of the same steps; the verdict and the figures."""
    if len(wall_s) != len(event_s) or not wall_s:
        raise ValueError(f"need the same steps timed both ways, got {len(wall_s)} wall and {len(event_s)} event times")
    if min(event_s) <= 0 or min(wall_s) <= 0:
        raise ValueError("step times must be positive")
    wall, event = statistics.median(wall_s), statistics.median(event_s)
    ratio = wall / event
    verdict = "agree" if abs(ratio - 1) <= tolerance else "host_bound" if ratio > 1 else "inconsistent"
    return {"verdict": verdict, "wall_median_s": wall, "event_median_s": event, "ratio": ratio,
            "tolerance": tolerance, "steps": len(wall_s)}


def worst(checks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The job's verdict: the rank furthest from agreement (each check carries its `rank`)."""
    if not checks:
        raise ValueError("no rank's check")
    return max(checks, key=lambda c: abs(c["ratio"] - 1))


class EventTimer:
    """Per-step CUDA events on the current stream; `event_cls` is torch.cuda.Event (any class with record(),
    synchronize() and elapsed_time(end) in milliseconds will do)."""

    def __init__(self, event_cls):
        self.event_cls = event_cls
        self.pairs: list[tuple[Any, Any]] = []

    def reset(self) -> None:
        self.pairs = []

    def before(self) -> None:
        start = self.event_cls(enable_timing=True)
        start.record()
        self.pairs.append((start, None))

    def after(self) -> None:
        end = self.event_cls(enable_timing=True)
        end.record()
        self.pairs[-1] = (self.pairs[-1][0], end)

    def step_times_s(self) -> list[float]:
        """Each timed step's seconds by the events (after waiting for the last one)."""
        done = [(a, b) for a, b in self.pairs if b is not None]
        if done:
            done[-1][1].synchronize()
        return [a.elapsed_time(b) / 1000.0 for a, b in done]
