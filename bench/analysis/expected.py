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
step split into parts against its compute probe: step_split.py; where every cell's step went: breakdown.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from bench.analysis import AnalysisError
from bench.analysis.flavours import FlavourFacts
from bench.analysis.outside import Beside, beside_cell
from bench.analysis.stand_in import OneWorker, stand_in_words
from bench.analysis.step_split import Split, split_step
from bench.analysis.straggler import Straggler, straggler
from bench.analysis.windows import earlier_windows
from bench.cells.units import IMAGES, RateUnit, format_rate, format_value
from bench.analysis.traffic import samples_per_step, step_of

TOLERANCE = 0.10
# An engine probe an earlier run measured and this run reused (bench run measures one for the cell right before it,
# seconds apart; a probe stands for 7 days): the probe and the cell are then two runs, and two runs of an unchanged
# cell differ by the noise between runs — the model `bench check` judges one run a side with (regress.RUN_NOISE, the
# log-scale sd of one run's median). The verdict then allows what two runs differ by at the 95% one-sided level,
# 1 − exp(−1.645 · √2 · σ): 13.8% for CPU cells (σ 0.064), so TOLERANCE for GPU cells (σ 0.01 gives 2.3%). On this
# project's 2-core VM, four healthy runs of the 2-worker cells reusing the first run's probes read 0.79–1.05 of
# their expected values (docs/diagnose.md), the first run, with its own probes, 0.89–1.12.
SAME_RUN_S = 300.0  # a probe measured at most this long before the cell started was measured for it
Z_ONE_SIDED_95 = 1.645


def reused_tolerance(gpu: str) -> float:
    """The verdict's tolerance against a probe an earlier run measured (see SAME_RUN_S)."""
    from bench.analysis.regress import RUN_NOISE

    sigma = RUN_NOISE["cpu" if str(gpu) == "cpu" else "gpu"]
    return max(TOLERANCE, 1 - math.exp(-Z_ONE_SIDED_95 * math.sqrt(2) * sigma))


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
    split: "Split | None" = None  # co-located cells with a compute probe: the step's parts (then links = "compute probe")
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
                f"[{format_value(self.expected_low, unit)}, {format_value(self.expected_high, unit)}] ({source}): {self.verdict}")
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


def _slow_end(fit, fast: bool):
    """The fit at one end of its intervals (α low and β high when `fast`)."""
    if fit is None or fit.alpha_ci is None:
        return fit
    a = fit.alpha_ci[0] if fast else fit.alpha_ci[1]
    b = fit.beta_ci[1] if fast else fit.beta_ci[0]
    return replace(fit, alpha_s=max(0.0, a), beta_Bps=b)


def expected_rate(row: Mapping[str, Any], x1: float, fit=None) -> tuple[Any, str]:
    """whatif.predict() for one cell at 1-worker rate x1: (Prediction, links)."""
    from bench.analysis.whatif import predict

    gpus, nodes = int(row["gpus"]), int(row.get("nodes") or 1)
    per_node = math.ceil(gpus / nodes) if nodes > 1 else None
    p = predict(row["gpu"], gpus, x1, samples_per_step(row), fabric="ib" if row.get("ib") else "tcp",
                precision=row.get("precision") or "fp32", gpus_per_node=per_node,
                measured=fit if fit is not None and fit.usable else None, **step_of(row))
    return p, "measured fit" if p.links.startswith("measured") else "data sheet"


def expected_with_probes(table, ok, fits: Mapping[tuple, Any], windows, ranks: list[dict],
                         probes: Mapping[str, list[dict]] | None, *, flavours: FlavourFacts):
    """Each multi-worker cell's Expected (expected_cells), co-located cells' resting on the stored compute probe each
    ran with and on what earlier runs of its stack measured beyond it. `probes`: {"entries": [...], "costs": [...]}
    as bench/backends/local/compute_probe.py stores them; None = not looked up. Returns (cell_id → ProbeResult or None,
    the Expected list): `bench status` and the report read both from here."""
    from bench.analysis.probe import cell_sites, costs_for, engine_key, probes_for

    found = probes_for(table, ok, windows, probes["entries"]) if probes is not None else None
    engines = probes_for(table, ok, windows, probes.get("engines"), key_of=engine_key) if probes is not None else {}
    sites = cell_sites(ok, windows)
    stored = costs_for(table, windows, ranks, found, probes["costs"], sites) if found else {}
    return found, list(expected_cells(table, fits, windows, found, earlier_windows(ranks, ok), stored,
                                      flavours=flavours, engines=engines,
                                      started={c: t for c, (_, t) in sites.items() if t is not None}))


def expected_cells(table, fits: Mapping[tuple, Any] | None = None,
                   ranks: Mapping[str, list[list[dict]]] | None = None, probes: Mapping[str, Any] | None = None,
                   history: Mapping[str, list[list[list[dict]]]] | None = None,
                   stored: Mapping[str, list[Mapping[str, float]]] | None = None, *,
                   flavours: FlavourFacts, engines: Mapping[str, Any] | None = None,
                   started: Mapping[str, float] | None = None) -> list[Expected]:
    """One Expected per multi-worker cell of `table` (analysis.scaling.scaling() rows, with boot_low/boot_high);
    `fits`: collectives.fit_stacks() of the same store; `ranks`: cell_id → its windows' per_rank lists;
    `probes`: cell_id → the probe.ProbeResult that stands for it (probe.probes_for); `history`: cell_id → the
    windows of each earlier run of the cell (earlier_windows); `stored`: cell_id → the parts earlier runs of its
    stack measured with the same probe, from the probe cache (probe.costs_for), for runs the store does not hold;
    `flavours`: what the stand-in choice and the step's parts need of the MPI flavours (bench.launch.analysis_facts);
    `engines`: cell_id → the engine probe that stands for it (probe.probes_for with engine_key): where there is one,
    the expected value rests on it (engine_probed); `started`: cell_id → when its shown run started (whether its
    engine probe was measured for it or reused from an earlier run)."""
    from bench.analysis.collectives import stack_of
    from bench.analysis.probe import colocated

    out: list[Expected] = []
    rows = table.to_dict("records")
    find = OneWorker(rows, flavours)
    for r in rows:
        if int(r["gpus"]) < 2:
            continue
        lead = Expected(r["cell_id"], int(r["gpus"]), float(r["samples_per_sec"]), _low(r), _high(r),
                        None, straggler=straggler((ranks or {}).get(r["cell_id"], [])))
        one, differs = find.baseline(r)
        probe = (probes or {}).get(r["cell_id"])
        ep = (engines or {}).get(r["cell_id"])
        if ep is not None:
            fit = (fits or {}).get(stack_of(r)) if all(k in r for k in ("engine", "nodes")) else None
            out.append(engine_probed(lead, r, ep, probe, fit, started=(started or {}).get(r["cell_id"])))
            continue
        if probe is not None:
            x1 = float(one["samples_per_sec"]) if one is not None else None
            lead = replace(lead, baseline_id=one["cell_id"] if one is not None else None,
                           stand_in=stand_in_words(one, differs) if one is not None else "")
            out.append(probed(lead, r, probe, (ranks or {}).get(r["cell_id"], []),
                              (history or {}).get(r["cell_id"], []), x1, flavours=flavours,
                              stored=(stored or {}).get(r["cell_id"], ())))
            continue
        if colocated({**r, "nodes": r.get("nodes") or 1}) and probes is not None:
            lead = replace(lead, note="no compute probe for these settings on this machine: N × X(1)")
        if one is None:
            out.append(replace(lead, why=find.why_none(r)))
            continue
        lead = replace(lead, baseline_id=one["cell_id"], stand_in=stand_in_words(one, differs))
        fit = (fits or {}).get(stack_of(r)) if all(k in r for k in ("engine", "nodes")) else None
        try:
            mid, links = expected_rate(r, float(one["samples_per_sec"]), fit)
            lo, _ = expected_rate(r, _low(one), _slow_end(fit, fast=False))
            hi, _ = expected_rate(r, _high(one), _slow_end(fit, fast=True))
        except (AnalysisError, KeyError, ValueError) as e:
            out.append(replace(lead, why=f"the model cannot predict it ({e})"))
            continue
        e, e_lo, e_hi = mid.samples_per_sec, min(lo.samples_per_sec, mid.samples_per_sec), \
            max(hi.samples_per_sec, mid.samples_per_sec)
        text, gap, g_lo, g_hi = verdict(lead.measured, lead.measured_low, lead.measured_high, e, e_lo, e_hi)
        out.append(replace(lead, expected=e, expected_low=e_lo, expected_high=e_hi, links=links, verdict=text,
                           gap=gap, gap_low=g_lo, gap_high=g_hi))
    return [with_beside(e, beside_cell((ranks or {}).get(e.cell_id, []))) for e in out]


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


def engine_probed(lead: Expected, row: Mapping[str, Any], ep, probe=None, fit=None,
                  started: float | None = None) -> Expected:
    """A co-located cell's expected value from its engine probe (bench/backends/local/engine_probe.py): N ranks
    computing beside the engine and each other at the probe's rate, each step longer by the gradients' collectives
    as the engine sends them (Horovod: a tensor per parameter; DDP: 25 MiB buckets; FSDP2: its gradient sync, the
    probe's steps with it on less off, its probe keeping the parameter gathers), timed by the probe on its own: on
    shared cores the ranks compute on every core, so the collectives' work takes turns with compute instead of hiding
    behind it. With no timing, the collectives' fit or the data sheet's allreduce, the gradients' share of the
    engine's traffic (registry `gradient_traffic`).

        expected X(N) = N · batch / (batch / r + c)        interval: r at the probe's slowest and fastest window

    The verdict is the plain one against that interval (TOLERANCE; reused_tolerance when the probe is an earlier
    run's: `started`, when the cell's run started, says which): the parts explain the value, not a gap."""
    from models.registry import ENGINES

    age = started - ep.measured_unix if started is not None and ep.measured_unix else None
    reused = age is not None and age > SAME_RUN_S
    tolerance = reused_tolerance(str(row.get("gpu") or "cpu")) if reused else TOLERANCE

    n, batch = lead.workers, samples_per_step(row)
    engine = ENGINES.get(str(row.get("engine") or "horovod"), ENGINES["horovod"])
    if ep.allreduce_s:
        comm, links = ep.allreduce_s, "timed by the engine probe"
    else:
        p, links = expected_rate(row, ep.rate, fit)
        comm = p.comm_s * engine["gradient_traffic"] / engine["traffic"]
    rate = (lambda r: n * batch / (batch / r + comm))
    e, e_lo, e_hi = rate(ep.rate), rate(min(ep.rate_low, ep.rate)), rate(max(ep.rate_high, ep.rate))
    text, gap, g_lo, g_hi = verdict(lead.measured, lead.measured_low, lead.measured_high, e, e_lo, e_hi, tolerance)
    if (ep.again_for or {}).get("slower") and not text.startswith("below") and lead.measured < e_lo * (1 - tolerance):
        # The cell ran slower than its probe allowed, and the probe measured again right after it (ran_slower_than_
        # probe) still allows more: two launches of the engine agree with each other and not with the cell, which is
        # the evidence the median's interval lacks. The median decides; the line shows the interval.
        text = (f"below expected by {100 * gap:.0f}% at the median (interval {100 * g_lo:.0f}% to {100 * g_hi:.0f}%; "
                f"the engine probe measured again after the cell still allows more)")
    cost = None if probe is None or not probe.rate else 1 - ep.rate / probe.rate
    return replace(lead, expected=e, expected_low=e_lo, expected_high=e_hi, links=links, verdict=text, gap=gap,
                   gap_low=g_lo, gap_high=g_hi, engine_probe=ep, comm_s=comm, engine_cost=cost, probe_age_s=age,
                   tolerance=tolerance)


def ran_faster_than_probe(cell: Mapping[str, Any], cell_id: str, rates: list[float], ep,
                          started: float | None) -> Expected | None:
    """A co-located cell just measured (`rates`: its windows' rates) against the engine probe it ran with: its
    Expected when the cell ran faster than the probe allows, else None: above expected, or its median above the
    expected value by more than the tolerance (a probe whose windows changed mode has an interval wide enough to
    hold the cell while its value is 22% under it). Faster means the probe caught the engine in a state the cell
    was not in: Horovod's idle loop over MPICH spins in MPI in some launches and not others (docs/diagnose.md, "An
    engine probe in two modes"). The local backend measures the probe again then (and once for a slower cell:
    ran_slower_than_probe)."""
    if ep is None or not rates or int(cell.get("gpus") or 1) < 2:
        return None
    e = _against_probe(cell, cell_id, rates, ep, started)
    return e if e.verdict.startswith("above") or e.measured > e.expected * (1 + e.tolerance) else None


def _against_probe(cell: Mapping[str, Any], cell_id: str, rates: list[float], ep, started: float | None) -> Expected:
    """A cell just measured (its windows' rates) judged against an engine probe."""
    from bench.analysis.stats import bootstrap_ci

    ci = bootstrap_ci(rates)
    return engine_probed(Expected(cell_id, int(cell["gpus"]), ci.estimate, ci.low, ci.high, None), cell, ep,
                         started=started)


def ran_slower_than_probe(cell: Mapping[str, Any], cell_id: str, rates: list[float], ep, started: float | None,
                          beside: Beside | None = None) -> Expected | None:
    """A co-located cell just measured against the engine probe it ran with: its Expected when its median is under
    the expected value by more than the tolerance while nothing outside the cell is named
    (`beside`: what its ranks sampled of the node), else None. The local backend then measures the probe once more,
    right after the cell: the engine's rate differs from launch to launch (the tiny transformer's FSDP2 probe read
    7,970, 8,433 and 9,807 tokens/s a rank in three launches on one VM), so a cell 17% under a probe that caught a
    fast launch is judged against the next one too; if that one also allows more, the median is below expected
    (engine_probed), else the newer probe, measured nearer the cell's time, stands for it."""
    if ep is None or not rates or int(cell.get("gpus") or 1) < 2 or (ep.again_for or {}).get("slower"):
        return None
    if beside is not None and beside.slowing:
        return None  # the cause is named: the verdict says so (with_beside), and a probe beside it would be slowed too
    e = _against_probe(cell, cell_id, rates, ep, started)
    return e if e.measured < e.expected * (1 - e.tolerance) else None


def probed(lead: Expected, row: Mapping[str, Any], probe, windows: list[list[Mapping[str, Any]]],
           earlier: list[list[list[Mapping[str, Any]]]], x1: float | None, tolerance: float = TOLERANCE, *,
           flavours: FlavourFacts, stored: Iterable[Mapping[str, float]] = ()) -> Expected:
    """A co-located cell's expected value from its compute probe, the split of its step, and the verdict on the part
    no measurement accounts for."""
    n, batch = lead.workers, samples_per_step(row)
    e, e_lo, e_hi = n * probe.rate, n * probe.rate_low, n * probe.rate_high
    step = n * batch / lead.measured
    split = split_step(row, probe, windows, earlier, step, x1, tolerance, flavours, stored)
    gap = 1 - lead.measured / e
    base = replace(lead, expected=e, expected_low=min(e_lo, e), expected_high=max(e_hi, e), links="compute probe",
                   split=split, gap=gap, gap_low=1 - lead.measured_high / max(e_lo, 1e-12),
                   gap_high=1 - lead.measured_low / max(e_hi, 1e-12))
    text, *_ = verdict(lead.measured, lead.measured_low, lead.measured_high, e, base.expected_low, base.expected_high,
                       tolerance)
    if not text.startswith("below"):
        return replace(base, verdict=text)
    u = split.unexplained_s
    reach = n * batch / max(step - u, 1e-12)  # the rate without the unexplained seconds
    text, g, g_lo, g_hi = verdict(lead.measured, lead.measured_low, lead.measured_high, reach, reach, reach, tolerance)
    if text.startswith("below"):
        why = split.unexplained_words() or f"{u:.3f} s a step no measured part accounts for"
        return replace(base, verdict=f"{text}, unexplained: {why}", gap=g, gap_low=g_lo, gap_high=g_hi)
    if not split.modelled:
        return replace(base, verdict=f"as expected ({100 * gap:.0f}% under the probe's rate, all of it measured)")
    whole = split.parts[-1]
    if whole.reference is None:  # one part, and nothing measured for it before: not judged either way
        return replace(base, verdict=f"not measured apart ({100 * gap:.0f}% under the probe's rate; no earlier run "
                                     f"of this cell to compare)")
    return replace(base, verdict=f"as expected ({100 * gap:.0f}% under the probe's rate, as in earlier runs)")


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _low(r: Mapping[str, Any]) -> float:
    v = r.get("boot_low")
    return float(r["samples_per_sec"] if _missing(v) else v)


def _high(r: Mapping[str, Any]) -> float:
    v = r.get("boot_high")
    return float(r["samples_per_sec"] if _missing(v) else v)
