"""TEST HOOKS, all of them: faults a test injects into real worker processes through environment variables, so the
harness's handling of broken workers and wrong results can be proven without mocks. Inert unless their variable is
set, and no real run sets one. The workers call them at two points only: every training step (`StepFaults.tick`,
models/measure/common.py) and the data a collective sweep sends at each size (`corrupt_sent`,
models/workloads/collectives/sweep_worker.py).

- `BENCH_FAULT`: comma-separated entries `KIND:rank=R:step=S[:cell=PREFIX]`: rank R, at its S-th training step
  (1-based, warm-up steps included), when the cell id starts with PREFIX (any cell if absent), does KIND: kill
  (SIGKILL itself), hang (ignore SIGTERM, never return), raise (RuntimeError), oom (cap its address space with
  RLIMIT_AS just above what it uses, then allocate: MemoryError, never touching the machine's real memory), say (print
  `BENCH_FAULT_SAY` and carry on; `raise` adds that text to its message too), pin (move every thread of the rank onto
  CPU `cpu=C` and carry on: with a busy process on that core, which the test starts and ends, the rank is really slow
  — a straggler made by the machine, not by a sleep in the worker), slow (from that step on, every step of the rank
  takes 1 / (1 - F) times as long, `frac=F`: it spins on the CPU for F / (1 - F) times the median of its last five
  step-to-step intervals, that added time left out, so its throughput falls by F; the planted slowdown `bench ab`'s
  benchmark must catch, benchmarks/ab_power.py).
- `BENCH_COLLECTIVE_CORRUPT`: `rank=R:bytes=B:element=E` makes rank R add 1 to element E of the data it sends at size
  B (allreduce: its input; allgather: its slice; broadcast: only the root sends, so only rank 0's corruption travels),
  so the sweep's check can be proven to catch a wrong result.

Nothing else in models/ reads these variables.
"""
from __future__ import annotations

import os
import signal
import sys
import time

from models.measure.fail import fail

FAULT_VAR, FAULT_SAY_VAR = "BENCH_FAULT", "BENCH_FAULT_SAY"
CORRUPT_VAR = "BENCH_COLLECTIVE_CORRUPT"


class StepFaults:
    """The `BENCH_FAULT` entries for this rank and cell, fired at their training step."""

    KINDS = ("kill", "hang", "raise", "oom", "say", "pin", "slow")

    def __init__(self, entries: list[tuple[str, int]] | list[tuple[str, int, dict]]):
        # (kind, step, options) for this rank and cell; empty in every real run
        self.entries = [(e[0], e[1], e[2] if len(e) > 2 else {}) for e in entries]
        self.step = 0
        self.slow_frac = 0.0  # set by a `slow` entry once its step is reached
        self._last_tick: float | None = None
        self._intervals: list[float] = []

    @classmethod
    def from_env(cls, rank: int, cell_id: str | None) -> "StepFaults":
        entries = []
        for entry in filter(None, (e.strip() for e in os.environ.get(FAULT_VAR, "").split(","))):
            kind, *fields = entry.split(":")
            opts = dict(f.split("=", 1) for f in fields if "=" in f)
            if kind not in cls.KINDS:

                fail(f"{FAULT_VAR}: unknown fault kind {kind!r} (known: {', '.join(cls.KINDS)})")
            if int(opts.get("rank", 0)) == rank and (cell_id or "").startswith(opts.get("cell", "")):
                entries.append((kind, int(opts.get("step", 1)), opts))
        return cls(entries)

    def tick(self) -> None:
        """One training step begins."""
        self.step += 1
        for kind, step, opts in self.entries:
            if step == self.step:
                self._inject(kind, opts)
        if self.slow_frac:
            self._stretch()

    def _stretch(self) -> None:
        now = time.perf_counter()
        if self._last_tick is not None:
            self._intervals = (self._intervals + [now - self._last_tick])[-5:]
            typical = sorted(self._intervals)[len(self._intervals) // 2]
            # Held on the CPU, not slept: extra work, as a slower step is. A sleep gave the core away, and the step
            # after each one ran slower (caches, the vCPU descheduled), which the next interval fed back: 10%
            # planned came out at 13% in the A/B benchmark (docs/regression-checks.md).
            until = time.perf_counter() + typical * self.slow_frac / (1 - self.slow_frac)
            while time.perf_counter() < until:
                pass
        self._last_tick = time.perf_counter()  # the next interval leaves this added time out

    def _inject(self, kind: str, opts: dict | None = None) -> None:
        say = os.environ.get(FAULT_SAY_VAR, "")
        print(f"bench fault: {kind} at step {self.step}", file=sys.stderr, flush=True)
        if kind == "say":
            print(say, flush=True)
        elif kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "hang":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends it: the harness must escalate
            while True:
                time.sleep(3600)
        elif kind == "pin":
            cpu = int((opts or {}).get("cpu", 0))
            for task in os.listdir("/proc/self/task"):  # every thread: intra-op pools and the engine's too
                try:
                    os.sched_setaffinity(int(task), {cpu})
                except OSError:
                    pass  # a thread that ended meanwhile
        elif kind == "slow":
            frac = float((opts or {}).get("frac", 0.1))
            if not 0 < frac < 1:
                fail(f"{FAULT_VAR}: slow needs 0 < frac < 1, got {frac:g}")
            self.slow_frac = frac
        elif kind == "raise":
            raise RuntimeError(f"bench fault injection: raised at step {self.step}" + (f": {say}" if say else ""))
        elif kind == "oom":
            import resource

            with open("/proc/self/statm") as f:
                used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            resource.setrlimit(resource.RLIMIT_AS, (used + (64 << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
            hog = [bytearray(256 << 20) for _ in range(64)]  # MemoryError at the first: 256 MiB > 64 MiB left
            print(len(hog))


def corrupt_sent(data, size: int, rank: int) -> None:
    """Adds 1 to one element of `data` (what this rank sends at `size` bytes) when `BENCH_COLLECTIVE_CORRUPT` names
    this rank and size; does nothing otherwise."""
    text = os.environ.get(CORRUPT_VAR)
    if not text:
        return
    opts = dict(f.split("=", 1) for f in text.split(":") if "=" in f)
    if int(opts.get("rank", -1)) == rank and int(opts["bytes"]) == size:
        data[int(opts.get("element", 0))] += 1
