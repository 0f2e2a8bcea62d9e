"""Is this number normal? For each measured multi-worker cell, the throughput it should reach given what was measured
on the same machines, the verdict, the slow rank, and where each cell's step time went (pure: frames in, rows out).

Expected value. X(1) is the 1-worker (compute-only) rate of the same series (every setting equal but the worker
count), measured in the same store. Where the store has no such twin, a 1-worker cell that differs only in settings
one worker's rate does not depend on (STAND_IN_KEYS: the MPI flavour, the engine, the fabric, how often the rate was
measured) stands in for it, and the row names it (`stand_in`); with none either, the row says why (`why`: "no
1-worker cell with real data", ...). N workers each compute at X(1), and the step grows by the allreduce that the
backward pass does not hide — from the cell's own stack's measured α-β fit when the store has a usable one
(bench/analysis/collectives.py), else from the data sheet (bench/analysis/whatif.py's LINKS), and the row says which
(`links`). That is whatif.predict(), the same arithmetic as the what-if model:

    expected X(N) = N · batch / step(N)        step(N) = batch / X(1) + exposed allreduce(N)

Interval: the 95% bootstrap interval of X(1) carried through (low: X(1)'s low end with the fit's slow end, α high and
β low; high: the other ends). The data sheet has no interval of its own: its interval is X(1)'s only.

Verdict (measured median M with its 95% interval [M−, M+], expected E with [E−, E+]):
    below expected   M+ < E− · (1 − TOLERANCE)       "below expected by 1 − M/E (interval 1 − M+/E− … 1 − M−/E+)"
    above expected   M− > E+ · (1 + TOLERANCE)
    as expected      otherwise (but with a process outside the cell named as slowing it, a median below
                     E− · (1 − TOLERANCE) is called below: with_beside)
TOLERANCE is what the expected value does not hold: the machine's other load between the 1-worker cell and this one
(on a shared 2-core machine a 1-worker cell's rate moves by ~10% between runs: docs/diagnose.md), and the engine's
idle loop's cost on shared cores where no contention was measured (ρ_idle 0.77–0.93 beside Horovod's Gloo loop,
docs/scaling-model.md). Against an engine probe an earlier run measured, the tolerance is two runs' noise instead
where that is larger (reused_tolerance: 13.8% for CPU cells).

The slow rank: bench/analysis/straggler.py; the 1-worker cell that gives X(1): stand_in.py; a co-located cell's
step split into parts against its compute probe: step_split.py; where every cell's step went: breakdown.py. A
co-located cell's value from its engine or compute probe: expected_probes.py; every multi-worker cell of a store:
expected_cells.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from bench.analysis.outside import Beside
from bench.analysis.step_split import Split
from bench.analysis.straggler import Straggler
from bench.analysis.traffic import samples_per_step, step_of
from bench.cells.units import IMAGES, RateUnit, format_rate, format_value

TOLERANCE = 0.10


@dataclass(frozen=True)
class Expected:
    cell_id: str
    workers: int
    measured: float
    measured_low: float
    measured_high: float
    expected: float | None  # None: no 1-worker cell in the series (then `why`)
    expected_low: float | None = None
    expected_high: float | None = None
    links: str = ""  # "measured fit" or "data sheet"
    verdict: str = "no expected value"
    gap: float | None = None  # 1 − measured / expected
    gap_low: float | None = None
    gap_high: float | None = None
    straggler: Straggler | None = None
    why: str = ""
    baseline_id: str | None = None  # the 1-worker cell whose rate is X(1)
    stand_in: str = ""  # when that cell is not this one's twin: which it is, e.g. "the openmpi 1-worker cell"
    # co-located cells with a compute probe: the step's parts (then links = "compute probe")
    split: "Split | None" = None
    note: str = ""  # why a co-located cell has no probe-based value (e.g. "no compute probe for these settings")
    beside: "Beside | None" = None  # what ran beside its ranks outside the cell (bench/analysis/outside.py)
    engine_probe: Any = None  # the engine probe the value rests on (then links = "engine probe")
    comm_s: float | None = None  # the communication the value adds to the engine probe's step, seconds a step
    probe_age_s: float | None = None  # how long before the cell its engine probe was measured (None: not known)
    tolerance: float = TOLERANCE  # what the verdict allowed beyond the intervals (reused_tolerance for a reused probe)
    engine_cost: float | None = None  # 1 − the engine probe's rate / the compute probe's: the engine's threads

    @property
    def below(self) -> bool:
        return self.verdict.startswith("below")

    def describe(self, unit: RateUnit = IMAGES) -> str:
        """One line; rates in the unit users quote for the cell's workload (img/s, tokens/s)."""
        if self.expected is None:
            return f"no expected value: {self.why}"
        if self.engine_probe is not None:
            ep = self.engine_probe
            source = (f"engine probe: {self.workers} × {format_rate(ep.rate, unit)} with the engine up and no "
                      f"gradient traffic, plus {self.comm_s:.3f} s a step for the gradients' allreduce ({self.links})"
                      + ("" if self.engine_cost is None else
                         f"; the engine's threads cost {100 * self.engine_cost:.0f}% of the compute probe's rate")
                      + ("" if self.tolerance <= TOLERANCE else
                         f"; the probe is an earlier run's ({age_words(self.probe_age_s)} before), so the verdict "
                         f"allows {100 * self.tolerance:.0f}% for the noise between two runs"))
        elif self.split is not None:
            sp = self.split
            source = (f"compute probe: {self.workers} × {format_rate(sp.probe_rate, unit)}, {self.workers} plain "
                      f"processes at once")
        else:
            source = self.links + (f"; X(1) from {self.stand_in} {self.baseline_id}" if self.stand_in else "") \
                + (f"; {self.note}" if self.note else "")
        text = (f"measured {format_rate(self.measured, unit)}, expected {format_value(self.expected, unit)} "
                f"[{format_value(self.expected_low, unit)}, {format_value(self.expected_high, unit)}] ({source}): "
                f"{self.verdict}")
        if self.split is not None and not self.below:
            named = self.split.named()
            text += f": {named}" if named else ""
        return text + (f"; slow: {self.straggler.describe()}" if self.straggler else "")



def age_words(seconds: float | None) -> str:
    """How old a probe is, in the unit that reads best: minutes, hours or days."""
    if seconds is None:
        return "an unknown time"
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"



def verdict(measured: float, low: float, high: float, e: float, e_low: float, e_high: float,
            tolerance: float = TOLERANCE) -> tuple[str, float, float, float]:
    """(verdict text, gap, gap low, gap high) of a measured median and interval against an expected one."""
    gap, gap_low, gap_high = 1 - measured / e, 1 - high / e_low, 1 - low / e_high
    if high < e_low * (1 - tolerance):
        return (f"below expected by {100 * gap:.0f}% ({100 * gap_low:.0f}–{100 * gap_high:.0f}%)",
                gap, gap_low, gap_high)
    if low > e_high * (1 + tolerance):
        return (f"above expected by {-100 * gap:.0f}% ({-100 * gap_high:.0f}–{-100 * gap_low:.0f}%)",
                gap, gap_low, gap_high)
    return "as expected", gap, gap_low, gap_high



def expected_rate(row: Mapping[str, Any], x1: float, fit=None) -> tuple[Any, str]:
    """whatif.predict() for one cell at 1-worker rate x1: (Prediction, links)."""
    from bench.analysis.whatif import predict

    gpus, nodes = int(row["gpus"]), int(row.get("nodes") or 1)
    per_node = math.ceil(gpus / nodes) if nodes > 1 else None
    p = predict(row["gpu"], gpus, x1, samples_per_step(row), fabric="ib" if row.get("ib") else "tcp",
                precision=row.get("precision") or "fp32", gpus_per_node=per_node,
                measured=fit if fit is not None and fit.usable else None, **step_of(row))
    return p, "measured fit" if p.links.startswith("measured") else "data sheet"



def with_beside(e: Expected, beside: Beside | None) -> Expected:
    """The verdict once what ran beside the cell's ranks is known (bench/analysis/outside.py). Outside work that
    contended for the cell's cores (or steal, or throttling) is named; and a cell it slowed is judged against its
    expected value itself, not against the parts the cell measured of itself (which would count a neighbour's CPU
    time as the engine's own, and call a slowed first run as expected). With a named cause, a median below the
    expected value's low end by more than the tolerance is called below even where the median's interval reaches it."""
    if beside is None:
        return e
    e = replace(e, beside=beside)
    if e.expected is None:
        return e
    if not beside.slowing:
        # a neighbour in a minority of windows is not the cell's condition (the median stands), but the windows it
        # slowed are part of the measurement: say so rather than hide them
        return replace(e, verdict=f"{e.verdict}, though {beside.describe()}") if beside.in_some_windows else e
    cause = beside.describe()
    if e.below:
        return replace(e, verdict=f"{e.verdict.split(', unexplained:')[0]}: {cause}")
    text, gap, g_lo, g_hi = verdict(e.measured, e.measured_low, e.measured_high, e.expected,
                                    e.expected_low if e.expected_low is not None else e.expected,
                                    e.expected_high if e.expected_high is not None else e.expected,
                                    e.tolerance)
    if text.startswith("below"):
        return replace(e, verdict=f"{text}: {cause}", gap=gap, gap_low=g_lo, gap_high=g_hi)
    e_low = e.expected_low if e.expected_low is not None else e.expected
    if e.measured < e_low * (1 - e.tolerance):
        # The median is below, but the median's interval reaches the expected value: a neighbour that shares the
        # ranks' cores makes windows uneven (the scheduler gives it a core for some windows, not others: 4,554 to
        # 17,047 tokens/s in one run of the tiny transformer beside a busy loop, tests/test_outside.py). The named
        # cause is the evidence the interval lacks, so the median decides, and the line shows the interval.
        return replace(e, verdict=f"below expected by {100 * gap:.0f}% at the median (interval {100 * g_lo:.0f}% "
                                  f"to {100 * g_hi:.0f}%: uneven windows): {cause}",
                       gap=gap, gap_low=g_lo, gap_high=g_hi)
    return replace(e, verdict=f"{text}, though {cause}")

