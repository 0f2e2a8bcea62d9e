"""The slow rank of a multi-worker cell, from the phases each rank timed (pure: per-rank dicts in, one rank out).

A synchronous allreduce makes every rank's step as long as the slowest one's, so per-rank step times and
rates are alike; what differs is how long each rank computed before it had to wait. Each rank times its phases
(models/measure/phases.py); the rank whose compute per step is longest, with a compute rate under STRAGGLER_BELOW × the
median of the other ranks', is named (rank, host, ratio).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

STRAGGLER_BELOW = 0.80


@dataclass(frozen=True)
class Straggler:
    rank: int
    host: str
    ratio: float  # its compute rate over the median of the other ranks'

    def describe(self) -> str:
        return f"rank {self.rank} ({self.host}): compute {self.ratio:.2f}× the other ranks' median"


def straggler(ranks_by_window: Iterable[list[Mapping[str, Any]]], below: float = STRAGGLER_BELOW) -> Straggler | None:
    """The rank whose compute per step is longest, when its compute rate is under `below` × the other ranks'
    median; None when no rank timed its compute or none is that slow."""
    per_rank: dict[int, list[float]] = {}
    hosts: dict[int, str] = {}
    for window in ranks_by_window:
        for r in window:
            phases, steps = r.get("phases_s") or {}, r.get("steps") or 0
            if "compute" in phases and steps > 0 and phases["compute"] > 0:
                per_rank.setdefault(int(r["rank"]), []).append(phases["compute"] / steps)
                hosts[int(r["rank"])] = str(r.get("host", "?"))
    if len(per_rank) < 2:
        return None
    compute = {rank: statistics.median(ts) for rank, ts in per_rank.items()}
    slow = max(compute, key=compute.get)
    others = statistics.median(t for rank, t in compute.items() if rank != slow)
    ratio = others / compute[slow]
    return Straggler(slow, hosts[slow], ratio) if ratio < below else None
