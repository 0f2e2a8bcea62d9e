"""A co-located cell's expected value from the probes measured beside it (pure: a row and a probe in, an Expected
out): from its engine probe (engine_probed: N ranks computing beside the engine, plus the gradients' collectives),
from its compute probe (probed: N plain processes, and the split of its step into measured parts), and the two
checks the local backend runs on a cell just measured against its engine probe (ran_faster_than_probe,
ran_slower_than_probe), which decide whether the probe is measured again. The value, the verdict and TOLERANCE are
bench/analysis/expected.py's."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Iterable, Mapping

from bench.analysis.expected import TOLERANCE, Expected, expected_rate, verdict
from bench.analysis.flavours import FlavourFacts
from bench.analysis.outside import Beside
from bench.analysis.step_split import split_step
from bench.analysis.traffic import samples_per_step

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
    from models.registry.engines import ENGINES

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
    def rate(r: float) -> float:
        return n * batch / (batch / r + comm)

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
    from bench.analysis.stats.intervals import bootstrap_ci

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

