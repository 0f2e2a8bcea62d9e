"""Where a rank's step time goes, timed by the rank itself: input (waiting for the batch), compute (forward and
backward until the framework hands back control), comm_wait (waiting for the gradient allreduce after backward: the
communication backward did not hide), update (the optimizer), and other (the rest of the step: synchronisation,
bookkeeping). Each phase is the time between two marks on one rank's monotonic clock, summed over a measured window.

A worker marks what it can see: Horovod's PyTorch optimizer lets it wait for the allreduce explicitly, so compute and
comm_wait are apart; under DDP (the wait happens inside backward) and TensorFlow/Keras (one graph call) the step is
one phase, and analysis models the split instead (bench/analysis/expected.py says which). On a GPU the marks only mean
something after a device synchronisation, and three synchronisations a step drain the launch queue each time and lower
the very throughput being measured: GPU workers pass `enabled=False`, record no phases, and the split is modelled.
"""
from __future__ import annotations

import time
from typing import Callable

PHASES = ("input", "compute", "comm_wait", "update", "other")


class PhaseClock:
    """Sums the time between marks into named phases; `open_step()` starts a step, `mark(name)` ends a phase."""

    def __init__(self, sync: Callable[[], None] | None = None, clock: Callable[[], float] | None = None,
                 enabled: bool = True):
        self.sync, self.clock, self.enabled = sync or (lambda: None), clock or time.perf_counter, enabled
        self.totals: dict[str, float] = {}
        self.last: float | None = None

    def reset(self) -> None:
        self.totals, self.last = {}, None

    def open_step(self) -> None:
        self.last = self.clock() if self.enabled else None

    def mark(self, phase: str, sync: bool = False) -> None:
        """The time since the previous mark was spent in `phase` (after a device sync when `sync`)."""
        if self.last is None:
            return  # outside a measured step (warm-up): nothing to count
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r} (known: {', '.join(PHASES)})")
        if sync:
            self.sync()
        now = self.clock()
        self.totals[phase] = self.totals.get(phase, 0.0) + (now - self.last)
        self.last = now

    def close_step(self) -> None:
        """What the step spent after its last mark is `other`."""
        self.mark("other")
        self.last = None

    def summary(self) -> dict[str, float]:
        return {p: self.totals[p] for p in PHASES if p in self.totals}
