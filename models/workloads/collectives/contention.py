"""Compute and an allreduce on the same cores, as in training on CPU workers: the collective sweep's contention
measurement (models/workloads/collectives/sweep_worker.py runs it for allreduce on CPU workers at the sweep's largest
size, and at the smaller sizes of CONTENDED_SIZES: Horovod sends a training step's gradients as tens of fused
operations, most of them well under a MiB, and on shared cores a small operation stretches more than a large one).

Each rank times a probe kernel (PROBE: a small convolution with the worker's threads) three ways: alone, before the
engine starts (its background loop would otherwise share the cores); while the engine idles (Horovod's loop still
negotiates every cycle; Open MPI's progress polls); and while an allreduce is in flight (started asynchronously, the
probe runs until it completes). Its rates as fractions of the rate alone, and the allreduce's time under that load,
are what the what-if model needs to say how collective and compute slow each other down on shared cores
(bench/analysis/whatif.py). GPU workers compute on the device: not measured there. Imports no framework: the worker
passes torch in.

Measured in pairs: each allreduce beside the probe follows one of the same size alone, and the stretch is the median
of the pairs' ratios; the idle rate is the median of short windows taken after each pair. A shared machine drifts
between the sweep's uncontended timing and this measurement (seconds to minutes apart), and one stretch taken across
that gap read 1.02x in one sweep and 1.98x in the next for the same condition; a pair is seconds apart.

Beside a training step's gradient stream (`replay`): training does not hand the engine one tensor at a time but
ResNet-50's 161 gradients in a step, each submitted when backward yields it, and Horovod negotiates and fuses them
cycle by cycle. On the emulated cluster (Gloo, two nodes, one CPU each) the probe ran at 0.68-0.77 of its rate alone
beside such a replay against 0.81-0.91 beside the idle engine, and the 2-node steps took 72-179 ms more than the
sizes' one-at-a-time figures price (docs/scaling-model.md, "Where Gloo's step goes"). So each rank also runs the probe
for a backward pass's worth of calls while submitting the gradients asynchronously at their ready points
(models/workloads/gradients.py), and reports the probe's rate over that window as a fraction of its rate alone: the pace
of a backward pass beside its own gradient stream, as measured, not composed from single-size figures. (Measured since:
the replay's pace moves the prediction by at most 1.5 points of efficiency from the single-size composition, and
ResNet-50's own backward pass ran within 0.01-0.05 of it: docs/scaling-model.md, "Paced beside a replay".)
"""
from __future__ import annotations

import statistics
import time

from models.measure.fail import fail
from models.workloads.collectives.payload import check, expected, pattern
from models.workloads.gradients import resnet50_gradients

# The contention probe: one 3x3 convolution of a 4x64x16x16 activation (75 MFLOP, a millisecond or two on one core of a
# 2020s server): short enough to poll an allreduce between calls, a ResNet-50 layer's kind of arithmetic.
PROBE_INPUT, PROBE_WEIGHT = (4, 64, 16, 16), (64, 64, 3, 3)
PROBE_WINDOW_S = 1.0  # seconds of probe calls for the rate alone
# The idle rate: this many short windows after each pair, median. One window read 0.72-1.02 of the rate alone in
# sweeps a few seconds apart (Gloo, 700 Mbit/s): many short windows spread over the sweep, not one long one.
IDLE_WINDOWS_PER_PAIR, IDLE_WINDOW_S = 3, 0.2
# Pairs (alone, beside the probe) of allreduces timed: --steps, within these bounds (at 200 Mbit/s one takes ~8 s).
CONTENDED_PAIRS = (5, 7)
# The smaller sizes whose stretch is measured too (those the sweep has): where ResNet-50's fused operations fall.
# Horovod's fusion of its 161 gradient tensors (bench/analysis/fusion.py) sends a few operations of 8-30 MB early in
# the backward pass and tens between 16 KB and 1 MB after; the what-if model interpolates between these sizes.
CONTENDED_SIZES = (256 * 1024, 4 * 1024 * 1024, 16 * 1024 * 1024)
# The replay's backward pass, in seconds of probe work alone: the fabric matrix's cells (ResNet-50, batch 32 of 64x64,
# one thread) take 0.95-1.01 s a step alone on the emulated cluster's nodes (docs/scaling-model.md, tries 1-4), 2/3 of
# it backward. The stream's density (161 gradients, 54-100 fused operations a step) is what the engine's cost on the
# cores depends on, so the window is that backward pass's length.
REPLAY_BACKWARD_S = 0.65


def contended_sizes(sizes: list[int]) -> list[int]:
    """The sweep's sizes whose contention is measured: CONTENDED_SIZES it has, and its largest (the one whose idle and
    during rates the model takes)."""
    return sorted({s for s in sizes[:-1] if s in CONTENDED_SIZES} | set(sizes[-1:]))


class Probe:
    """The compute that contends with the collective (PROBE_*), counted in calls per second."""

    def __init__(self, torch):
        import torch.nn.functional as functional

        x, w = torch.randn(*PROBE_INPUT), torch.randn(*PROBE_WEIGHT)
        self.call = lambda: functional.conv2d(x, w, padding=1)
        for _ in range(20):  # first calls pick kernels and allocate
            self.call()

    def rate(self, window_s: float = PROBE_WINDOW_S) -> float:
        calls, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < window_s:
            self.call()
            calls += 1
        return calls / (time.perf_counter() - t0)

    def during(self, done) -> tuple[float, float]:
        """Probe calls until done() says the operation completed: (its seconds, probe calls per second)."""
        calls, t0 = 0, time.perf_counter()
        while not done():
            self.call()
            calls += 1
        elapsed = time.perf_counter() - t0
        return elapsed, calls / elapsed


def contention(engine, torch, probe: Probe, alone: float, size: int, args, idle: bool = True) -> dict:
    """This rank's view of compute and an allreduce of `size` bytes on shared cores: the probe's rate while the
    engine idles and while the allreduce is in flight, as fractions of its rate alone; the allreduce's time beside
    the probe; and its stretch, the median over pairs of that time over the same size's time alone just before.
    `engine`: the sweep's Engine (models/workloads/collectives/sweep_worker.py); every allreduce's result is checked.
    `idle` False skips the idle windows (the smaller sizes: the idle rate is the largest size's) and reports `idle` as
    None."""
    comm = engine.comm
    base = pattern(torch, size // 4, comm.rank, engine.device)
    want = expected(torch, "allreduce", size // 4, comm.size, engine.device)
    work = torch.empty_like(base)
    name = f"bench.contended.{size}"
    pairs = min(max(args.steps, CONTENDED_PAIRS[0]), CONTENDED_PAIRS[1])  # the same on every rank: no rank waits
    idles, rates, times, stretches = [], [], [], []
    for _ in range(pairs):
        work.copy_(base)
        comm.barrier()
        t0 = time.perf_counter()
        engine.allreduce_(work, name=name)
        by_itself = time.perf_counter() - t0
        check(work, want, "allreduce", size, comm.rank)
        work.copy_(base)
        comm.barrier()
        elapsed, rate = probe.during(engine.allreduce_async_(work, name=name))
        check(work, want, "allreduce", size, comm.rank)
        comm.barrier()
        if idle:
            idles += [probe.rate(IDLE_WINDOW_S) for _ in range(IDLE_WINDOWS_PER_PAIR)]
        times.append(elapsed)
        rates.append(rate)
        stretches.append(elapsed / by_itself)
    return {"idle": statistics.median(idles) / alone if idles else None, "during": statistics.median(rates) / alone,
            "time": statistics.median(times), "stretch": statistics.median(stretches)}


def replay(engine, torch, probe: Probe, alone: float, args, backward_s: float = REPLAY_BACKWARD_S) -> dict:
    """This rank's probe beside a replay of one training step's gradient stream: the probe runs `backward_s` seconds'
    worth of its calls alone while ResNet-50's gradients (fp32, in backward order) are submitted asynchronously, each
    when that share of the calls is done, as a training hook submits them. Returns, per replay, the probe's rate over
    those calls as a fraction of its rate alone (`rates`) and how long the last allreduce ended after them (`tails`,
    seconds): replay i starts after the same barrier on every rank, so the sweep can take each replay's slowest rank,
    as a training step ends when its slowest rank's backward pass does. Every result is checked (all ones summed over
    the ranks). The same number of replays on every rank: no rank waits for a barrier another skips."""
    comm = engine.comm
    gradients = resnet50_gradients()
    tensors = [torch.empty(g.params, device=engine.device) for g in gradients]
    calls = max(1, round(alone * backward_s))
    submit_at = [g.ready_fraction * calls for g in gradients]
    replays = min(max(args.steps, CONTENDED_PAIRS[0]), CONTENDED_PAIRS[1])
    rates, tails = [], []
    for _ in range(replays):
        for t in tensors:
            t.fill_(1.0)
        comm.barrier()
        pending, nxt, t0 = [], 0, time.perf_counter()
        for call in range(calls):
            while nxt < len(tensors) and submit_at[nxt] <= call:
                pending.append(engine.allreduce_async_(tensors[nxt], name=f"bench.replay.{nxt}"))
                nxt += 1
            probe.call()
        computed = time.perf_counter()
        while nxt < len(tensors):  # ready at the very end (fraction 1)
            pending.append(engine.allreduce_async_(tensors[nxt], name=f"bench.replay.{nxt}"))
            nxt += 1
        for done in pending:
            while not done():
                time.sleep(0.0002)
        ended = time.perf_counter()
        for i, t in enumerate(tensors):
            if not bool((t == comm.size).all()):
                fail(f"allreduce of replayed gradient {gradients[i].name} ({t.numel() * 4} bytes) returned a wrong "
                     f"value on rank {comm.rank}: expected {comm.size} everywhere")
        rates.append(calls / (computed - t0) / alone)
        tails.append(ended - computed)
    return {"rates": rates, "tails": tails}
