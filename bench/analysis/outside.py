"""Something outside the cell beside its ranks: from what each rank sampled of its node during each window
(models/probes/host_load.py: other processes' CPU time, the top ones by name and pid, steal time, throttling), whether
the cell's cores were shared with work that is not the cell's, and the one line that names it (pure: windows in).

A rank's cores were contended when what ran on them wanted more than they had:
    beside   = the outside processes allowed on the rank's CPUs (each named one whose CPU set meets the rank's), plus,
               when the rank may use every CPU of the machine, the outside time no named process accounts for
    contended when beside ≥ BESIDE_MIN and min(the cell's CPU-s/s, cores) + beside > SATURATED · cores
A process on other CPUs than a pinned rank's, or one that fits in idle cores (a 16-core GPU host with one worker),
does not slow it and is not named. The hypervisor's steal time is named at STEAL_MIN per core, thermal throttling at
any event. The cell's figure is the median over windows of the most any rank saw (a neighbour present for one
window of five is not the cell's condition), and the process named is the one most often the busiest.
"""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

BESIDE_MIN = 0.25  # CPU-s/s: below this an outside process is background (sshd, the bench controller's polling)
SATURATED = 0.9  # of the rank's cores: demand above this leaves a compute-bound rank waiting for a core
STEAL_MIN = 0.05  # CPU-s/s per core taken by the hypervisor


@dataclass(frozen=True)
class Beside:
    """The outside load a cell's slowest-hit rank saw, median over windows."""

    cpu_s_per_s: float  # outside CPU-s/s on the rank's cores
    rank: int
    contended: bool  # the rank's cores were saturated with it
    name: str | None = None  # the busiest outside process
    pid: int | None = None
    process_cpu_s_per_s: float | None = None
    steal_s_per_s: float | None = None  # per core
    throttles: int = 0
    mhz: float | None = None  # the lowest clock any rank read at a window's end
    windows: int = 0
    contended_windows: int = 0  # windows whose cores were saturated with outside work

    @property
    def in_some_windows(self) -> bool:
        """Outside work contended in some windows but not most: not the cell's condition, though it slowed those."""
        return not self.contended and self.contended_windows > 0

    @property
    def slowing(self) -> bool:
        """Outside work that can explain a slower cell: contended cores, steal, or throttling."""
        return self.contended or (self.steal_s_per_s or 0) >= STEAL_MIN or self.throttles > 0

    def describe(self) -> str:
        """One line naming what was beside the cell."""
        parts = []
        if self.contended:
            if self.name is not None:
                parts.append(f"a process outside the cell, `{self.name}` pid {self.pid}, used "
                             f"{self.process_cpu_s_per_s:.2f} CPU-s/s beside rank {self.rank} during the window"
                             + (f" ({self.cpu_s_per_s:.2f} CPU-s/s outside the cell in all)"
                                if self.cpu_s_per_s > (self.process_cpu_s_per_s or 0) + 0.1 else ""))
            else:
                parts.append(f"processes outside the cell used {self.cpu_s_per_s:.2f} CPU-s/s beside rank "
                             f"{self.rank} during the window (none of them named: they ended, or another container)")
        if (self.steal_s_per_s or 0) >= STEAL_MIN:
            parts.append(f"the hypervisor took {self.steal_s_per_s:.2f} CPU-s/s per core (steal time)")
        if self.throttles:
            parts.append(f"the CPU throttled {self.throttles} times (thermal)")
        if self.in_some_windows:
            who = (f"a process outside the cell, `{self.name}` pid {self.pid}, used {self.process_cpu_s_per_s:.2f} "
                   f"CPU-s/s beside rank {self.rank}" if self.name is not None
                   else f"processes outside the cell contended for rank {self.rank}'s cores")
            parts.append(f"in {self.contended_windows} of {self.windows} windows {who}")
        if not parts:
            return (f"nothing outside the cell contended for its cores (at most {self.cpu_s_per_s:.2f} CPU-s/s beside "
                    f"rank {self.rank})")
        return "; ".join(parts)


def rank_beside(outside: Mapping[str, Any]) -> tuple[float, dict | None, bool]:
    """(outside CPU-s/s on the rank's cores, the busiest such process, contended) from one rank's `outside` field."""
    mine = set(outside.get("rank_cpus") or [])
    cores = int(outside.get("cores") or max(len(mine), 1))
    machine = int(outside.get("machine_cores") or cores)
    top = [p for p in outside.get("top") or [] if not mine or p.get("cpus") is None or mine & set(p["cpus"])]
    named = sum(float(p["cpu_s_per_s"]) for p in top)
    beside = named
    if cores >= machine:  # the rank may run anywhere: unattributed outside time is beside it too
        beside = max(named, float(outside.get("cpu_s_per_s") or 0.0))
    cell = float(outside.get("cell_cpu_s_per_s") or 0.0)
    contended = beside >= BESIDE_MIN and min(cell, cores) + beside > SATURATED * cores
    busiest = max(top, key=lambda p: p["cpu_s_per_s"]) if top else None
    return beside, busiest, contended


def _slowness(rank: Mapping[str, Any]) -> float:
    """How slow a rank was in a window: its compute per step where it timed phases (ranks of one synchronous step
    share its rate; the one held back computed longer), else its inverse rate."""
    phases, steps = rank.get("phases_s") or {}, rank.get("steps") or 0
    if "compute" in phases and steps:
        return float(phases["compute"]) / steps
    rate = float(rank.get("samples_per_sec") or 0.0)
    return 1 / rate if rate > 0 else 0.0


def beside_cell(windows: Iterable[Iterable[Mapping[str, Any]]]) -> Beside | None:
    """The cell's Beside from its windows (each a list of per-rank dicts); None when no rank sampled its node."""
    per_window = []  # (beside, rank, busiest, contended, steal per core, throttles, mhz)
    for window in windows:
        seen = []
        for r in window:
            o = r.get("outside")
            if not o:
                continue
            b, busiest, contended = rank_beside(o)
            steal = o.get("steal_s_per_s")
            seen.append((b, int(r.get("rank", 0)), busiest, contended,
                         None if steal is None else float(steal) / max(int(o.get("machine_cores") or 1), 1),
                         int(o.get("throttles") or 0), o.get("mhz"), _slowness(r)))
        if seen:
            # the rank that saw the most; where several saw about as much (unpinned ranks share every core), the
            # slowest of them: the one it held back
            most = max(s[0] for s in seen)
            near = [s for s in seen if s[0] >= 0.9 * most]
            per_window.append(max(near, key=lambda s: s[7])[:7] + (seen,))
    if not per_window:
        return None
    mid = statistics.median(w[0] for w in per_window)
    contended_windows = sum(1 for w in per_window if w[3])
    contended = contended_windows * 2 > len(per_window)  # in most windows
    # the window whose figure is the median's (the lower middle): its rank and contention stand for the cell; where
    # a minority of windows were contended, those windows name the rank and the process
    pool = per_window if contended or not contended_windows else [w for w in per_window if w[3]]
    rep = sorted(pool, key=lambda w: w[0])[(len(pool) - 1) // 2]
    names = Counter((w[2]["name"], w[2]["pid"]) for w in pool if w[2] is not None)
    name, pid, cpu = None, None, None
    if names:
        (name, pid), _ = names.most_common(1)[0]
        cpu = statistics.median(w[2]["cpu_s_per_s"] for w in pool
                                if w[2] is not None and (w[2]["name"], w[2]["pid"]) == (name, pid))
    steals = [s[4] for w in per_window for s in w[7] if s[4] is not None]
    mhz = [float(s[6]) for w in per_window for s in w[7] if s[6]]
    return Beside(cpu_s_per_s=mid, rank=rep[1], contended=contended, name=name, pid=pid, process_cpu_s_per_s=cpu,
                  steal_s_per_s=statistics.median(steals) if steals else None,
                  throttles=sum(s[5] for w in per_window for s in w[7]), mhz=min(mhz) if mhz else None,
                  windows=len(per_window), contended_windows=contended_windows)
