"""The expected value of every multi-worker cell of a store (pure: frames in, rows out): each cell's Expected from
the probes it ran with where it has them (bench/analysis/expected_probes.py), else from the what-if model at its
1-worker rate X(1) (bench/analysis/expected.py), with its slow rank and what ran beside its ranks. `bench status`
and the report read it through expected_with_probes."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

from bench.analysis import AnalysisError
from bench.analysis.expected import Expected, expected_rate, verdict, with_beside
from bench.analysis.expected_probes import engine_probed, probed
from bench.analysis.flavours import FlavourFacts
from bench.analysis.outside import beside_cell
from bench.analysis.stand_in import OneWorker, stand_in_words
from bench.analysis.straggler import straggler
from bench.analysis.windows import earlier_windows


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



def _slow_end(fit, fast: bool):
    """The fit at one end of its intervals (α low and β high when `fast`)."""
    if fit is None or fit.alpha_ci is None:
        return fit
    a = fit.alpha_ci[0] if fast else fit.alpha_ci[1]
    b = fit.beta_ci[1] if fast else fit.beta_ci[0]
    return replace(fit, alpha_s=max(0.0, a), beta_Bps=b)



def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _low(r: Mapping[str, Any]) -> float:
    v = r.get("boot_low")
    return float(r["samples_per_sec"] if _missing(v) else v)


def _high(r: Mapping[str, Any]) -> float:
    v = r.get("boot_high")
    return float(r["samples_per_sec"] if _missing(v) else v)
