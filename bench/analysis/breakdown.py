"""Where each cell's step time went: input, compute, exposed communication and the rest (pure: rows and windows in,
Breakdowns out).

Per step, averaged over ranks, median over windows: input (measured by every worker), compute and exposed
communication (measured where the worker waits for the allreduce apart from backward: PyTorch under Horovod; modelled
elsewhere: compute = batch / X(1) — the probe's per-process rate for a co-located cell with one —, exposed
communication from the model above), and the rest (the step's measured time
less those). `sources` names which parts were measured.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Mapping

from bench.analysis import AnalysisError
from bench.analysis.expected import expected_rate
from bench.analysis.flavours import FlavourFacts
from bench.analysis.stand_in import OneWorker
from bench.analysis.traffic import samples_per_step

PARTS = ("input", "compute", "communication", "rest")


@dataclass(frozen=True)
class Breakdown:
    cell_id: str
    step_s: float
    parts: dict[str, float]  # PARTS → seconds per step
    sources: dict[str, str]  # PARTS → "measured" | "modelled"


def breakdown(row: Mapping[str, Any], windows: list[list[Mapping[str, Any]]], x1: float | None = None,
              exposed_s: float | None = None) -> Breakdown | None:
    """One cell's step split into PARTS from its windows' per-rank phases; compute and communication are modelled
    (compute = batch / x1, communication = exposed_s) where the worker did not time them apart. None when no window
    carries phases."""
    per_window = []
    for window in windows:
        timed = [r for r in window if r.get("phases_s") and r.get("steps")]
        if not timed:
            continue
        mean = {p: statistics.fmean((r["phases_s"].get(p, 0.0)) / r["steps"] for r in timed)
                for p in ("input", "compute", "comm_wait", "update", "other")}
        mean["step"] = statistics.fmean(sum(r["phases_s"].values()) / r["steps"] for r in timed)
        mean["split"] = all("compute" in r["phases_s"] for r in timed)
        per_window.append(mean)
    if not per_window:
        return None
    med = {k: statistics.median(w[k] for w in per_window) for k in per_window[0] if k != "split"}
    step = med["step"]
    if all(w["split"] for w in per_window):
        parts = {"input": med["input"], "compute": med["compute"], "communication": med["comm_wait"]}
        sources = dict.fromkeys(PARTS, "measured")
    else:
        compute = samples_per_step(row) / x1 if x1 else 0.0
        comm = exposed_s if exposed_s is not None and int(row["gpus"]) > 1 else 0.0
        parts = {"input": med["input"], "compute": min(compute, step - med["input"]),
                 "communication": comm}
        sources = {"input": "measured", "compute": "modelled", "communication": "modelled", "rest": "measured"}
    parts["rest"] = max(0.0, step - sum(parts.values()))
    return Breakdown(row["cell_id"], step, {p: parts[p] for p in PARTS}, sources)


def breakdowns(table, ranks: Mapping[str, list[list[dict]]], fits: Mapping[tuple, Any] | None = None,
               probes: Mapping[str, Any] | None = None, *, flavours: FlavourFacts) -> list[Breakdown]:
    """A Breakdown per cell of `table` that has per-rank phases; where compute is modelled, a co-located cell's
    compute is its probe's (`probes`: cell_id → probe.ProbeResult), not the 1-worker rate's."""
    from bench.analysis.collectives import stack_of

    rows = table.to_dict("records")
    find = OneWorker(rows, flavours)
    out = []
    for r in rows:
        windows = ranks.get(r["cell_id"])
        # A layout cell's collectives run inside its forward and backward (its phases time them as compute): its
        # split would read "communication 0". Its own figures (each dimension's collectives, the bubble) stand in
        # for it (bench/analysis/layout_cells.py).
        if not windows or isinstance(r.get("layout"), str):
            continue
        one = r if int(r["gpus"]) == 1 else find.baseline(r)[0]
        x1 = float(one["samples_per_sec"]) if one is not None else None
        exposed = None
        if x1 and int(r["gpus"]) > 1:
            fit = (fits or {}).get(stack_of(r)) if all(k in r for k in ("engine", "nodes")) else None
            try:
                exposed = expected_rate(r, x1, fit)[0].exposed_s
            except (AnalysisError, KeyError, ValueError):
                exposed = None
        probe = (probes or {}).get(r["cell_id"])
        b = breakdown(r, windows, probe.rate if probe is not None else x1, exposed)
        if b is not None:
            out.append(b)
    return out
