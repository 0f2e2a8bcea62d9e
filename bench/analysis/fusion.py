"""Horovod's tensor fusion over one training step (pure): how many allreduce operations a step sends, and how much
of them ends after the backward pass, from ResNet-50's gradient tensors in the order backward yields them, the cycle
time and the fusion threshold.

Why: the what-if model (whatif.py) charges one allreduce of all the gradients per step. On CPU workers the engine's
cost on shared cores is paid per operation (Gloo's wake-ups wait for the scheduler on a core the compute holds:
docs/scaling-model.md measured ×3.0 at 1 MiB against ×1.6 at 102 MB), and a Horovod timeline of the 2-node Gloo cell
showed 64–77 operations a step for the 161 tensors. Knowing the operations from the architecture and the record's
settings makes that cost a measured term (per-operation time at each size) instead of a fitted constant.

Horovod's background loop (horovod/common/operations.cc, RunLoopOnce) wakes at most every cycle time, takes the
tensors whose gradients are ready, fuses them in order into buffers of at most the fusion threshold (a larger tensor
goes alone; threshold 0 disables fusion) and runs those operations one after another before the next cycle. The
defaults changed in Horovod 0.21.0 (release notes, PR #2468): cycle 5 ms → 1 ms, threshold 64 MB → 128 MB; the 2018
study ran 0.13.2 (5 ms, 64 MB), this project's images 0.28.1 (1 ms, 128 MB).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from models.workloads.gradients import Gradient, resnet50_gradients, resnet50_layers  # noqa: F401 (fusion's inputs)

# Horovod's defaults since 0.21.0 (release notes: "Changed default cycle time from 5ms to 1ms and fusion threshold
# from 64MB to 128MB", #2468); before, 5 ms and 64 MB.
DEFAULT_CYCLE_S = 1e-3
DEFAULT_THRESHOLD_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class Operation:
    start_s: float  # from the start of the backward pass
    end_s: float
    nbytes: int
    tensors: int


@dataclass(frozen=True)
class Schedule:
    operations: tuple[Operation, ...]
    backward_s: float

    @property
    def count(self) -> int:
        return len(self.operations)

    @property
    def after_backward(self) -> int:
        """Operations still running or not started when the backward pass ends."""
        return sum(op.end_s > self.backward_s for op in self.operations)

    @property
    def tail_s(self) -> float:
        """How long the last operation ends after the backward pass: the allreduce the step waits for."""
        return max(0.0, max((op.end_s for op in self.operations), default=0.0) - self.backward_s)

    @property
    def busy_s(self) -> float:
        return sum(op.end_s - op.start_s for op in self.operations)


def fuse(sizes: list[int], threshold: int) -> list[list[int]]:
    """Tensors taken in order into buffers of at most `threshold` bytes; a larger one goes alone; 0 disables it."""
    groups: list[list[int]] = []
    for size in sizes:
        if groups and threshold and sum(groups[-1]) + size <= threshold:
            groups[-1].append(size)
        else:
            groups.append([size])
    return groups


def simulate(gradients: list[Gradient], backward_s: float, op_s: Callable[[int], float], *,
             cycle_s: float = DEFAULT_CYCLE_S, threshold_bytes: int = DEFAULT_THRESHOLD_BYTES,
             bytes_per_param: int = 4) -> Schedule:
    """Horovod's loop over one step's gradients: `op_s(nbytes)` is one fused allreduce's time on the link. The
    compute is not slowed by the operations (simulate_shared with every rate 1: GPU workers, or free cores)."""
    if backward_s <= 0 or cycle_s <= 0:
        raise ValueError("backward_s and cycle_s must be positive")
    return simulate_shared(gradients, backward_s, lambda n: (op_s(n), 1.0), op_s, idle_rate=1.0, cycle_s=cycle_s,
                           threshold_bytes=threshold_bytes, bytes_per_param=bytes_per_param)


def simulate_shared(gradients: list[Gradient], backward_s: float,
                    op_shared: Callable[[int], tuple[float, float]], op_alone: Callable[[int], float], *,
                    idle_rate: float, cycle_s: float = DEFAULT_CYCLE_S,
                    threshold_bytes: int = DEFAULT_THRESHOLD_BYTES, bytes_per_param: int = 4) -> Schedule:
    """Horovod's loop over one step's gradients when the operations and the backward pass share the cores (CPU
    workers): the backward pass's compute (`backward_s` of it, alone) advances at `idle_rate` of its pace while the
    engine idles and, while an operation of n bytes is in flight, at the rate op_shared(n) gives with the operation's
    time (both measured in the sweep at a few sizes: models/workloads/collectives/contention.py). An operation that
    outlives the backward pass finishes at its time alone (op_alone), the share left of it. The Schedule's backward_s is
    the backward pass's wall time; the step waits for max(that, the last operation's end)."""
    if backward_s <= 0 or cycle_s <= 0 or idle_rate <= 0:
        raise ValueError("backward_s, cycle_s and idle_rate must be positive")
    total = backward_s
    pending = sorted(gradients, key=lambda g: g.ready_fraction)
    ops: list[Operation] = []
    state = {"t": 0.0, "work": 0.0, "ended": None}

    def compute(dt: float, rate: float) -> None:
        """dt wall seconds pass with the backward pass advancing at `rate`; notes when it ends."""
        if state["work"] < total and rate > 0:
            need = (total - state["work"]) / rate
            if need <= dt:
                state["work"], state["ended"] = total, state["t"] + need
            else:
                state["work"] += rate * dt
        state["t"] += dt

    last_cycle = -cycle_s
    while pending:
        compute(max(0.0, last_cycle + cycle_s - state["t"]), idle_rate)  # the next cycle
        behind = pending[0].ready_fraction * total - state["work"]
        if behind > 1e-12:  # idle cycles until the one in which the next gradient is ready
            compute(cycle_s * math.ceil(behind / idle_rate / cycle_s - 1e-9), idle_rate)
        last_cycle = state["t"]
        ready = [g for g in pending if g.ready_fraction * total <= state["work"] + 1e-12]
        for group in fuse([g.params * bytes_per_param for g in ready], threshold_bytes):
            nbytes, start = sum(group), state["t"]
            if state["work"] < total:
                seconds, rate = op_shared(nbytes)
                left = (total - state["work"]) / rate if rate > 0 else math.inf
                if left < seconds:  # the backward pass ends mid-operation: the rest of it runs alone
                    compute(left, rate)
                    state["t"] += (1 - left / seconds) * op_alone(nbytes)
                else:
                    compute(seconds, rate)
            else:
                state["t"] += op_alone(nbytes)
            ops.append(Operation(start, state["t"], nbytes, len(group)))
        pending = pending[len(ready):]
    if state["ended"] is None:
        compute((total - state["work"]) / idle_rate, idle_rate)
    return Schedule(tuple(ops), state["ended"])
