"""What every section reads: the selected records and the frames bench.analysis derives from them, computed once
per report. Sections only pick from these, format and draw."""
from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.analysis.breakdown import Breakdown, breakdowns
from bench.analysis.collectives import fit_stacks, training_only
from bench.analysis.cost import Price, catalogue_prices, merge_prices
from bench.analysis.expected import Expected
from bench.analysis.expected_cells import expected_with_probes
from bench.analysis.mfu import with_cell_power, with_mfu
from bench.analysis.scaling import cell_summary, input_bound, latest_complete, latest_failures, scaling, split_imported
from bench.analysis.windows import windows_of
from bench.cells.units import image_rows, other_rows
from bench.launch import analysis_facts
from bench.report.environments import sample_record_json

# The compute probes stored next to the store (bench/backends/local/compute_probe.py), for co-located cells' expected
# values: set by `bench report` around the rendering (bench/commands/report.py) when build_context is not given them.
PROBES: ContextVar[dict[str, list[dict]] | None] = ContextVar("bench_report_probes", default=None)


@dataclass(frozen=True)
class Context:
    out_dir: Path  # where sections write their charts and CSVs
    records: pd.DataFrame  # every selected record, measured and imported
    imported: pd.DataFrame  # published references (imported records): overlays only
    ok: pd.DataFrame  # the latest complete run of each training cell
    table: pd.DataFrame  # one row per training cell: throughput, interval, speedup, efficiency, MFU, W, J/img
    sweeps: pd.DataFrame  # the collective rows of each collective cell's latest complete run
    references: pd.DataFrame  # reference_summary(imported)
    failures: pd.DataFrame  # the latest attempt of each cell that failed
    prices: dict[str, Price]  # the catalogue's, overridden by --prices
    env_json: list[str]  # a sample of record JSON for the environments table
    run_env_json: dict[str, str] = field(default_factory=dict)  # run_id → one record's JSON (history: what changed)
    run_sources: dict[str, str] = field(default_factory=dict)  # run_id → its source revision's text (the same)
    expected: tuple[Expected, ...] = ()  # per multi-worker cell: expected value, verdict, straggler
    breakdowns: tuple[Breakdown, ...] = ()  # per cell with per-rank phases: where the step time went
    # The workloads that are not counted in images (a transformer's tokens/s): their cells' rows and table, which
    # the image sections above never see; each such workload has its own section (sections/transformer.py).
    other_ok: pd.DataFrame = field(default_factory=pd.DataFrame)
    other_table: pd.DataFrame = field(default_factory=pd.DataFrame)
    other_expected: tuple[Expected, ...] = ()


def build_context(records: pd.DataFrame, out_dir: Path, *, prices: dict[str, Price] | None = None,
                  env_json: list[str] | None = None, collectives: pd.DataFrame | None = None,
                  run_env_json: dict[str, str] | None = None, ranks: list[dict] | None = None,
                  run_sources: dict[str, str] | None = None, probes: dict[str, list[dict]] | None = None) -> Context:
    """`ranks`: Store.rank_windows() (per-rank figures of each ok record), for expected values and breakdowns;
    `probes`: the stored compute probes and costs (else PROBES: bench.commands.lines.probe_entries), for co-located
    cells' expected values."""
    measured, imported = split_imported(records)
    all_ok = latest_complete(measured)
    trained = training_only(all_ok)  # collective cells have no training rates: their own section
    ok, other_ok = image_rows(trained), other_rows(trained)
    # MFU per cell from its median rate, and the median power and energy of its windows (records carry
    # mean_watts_per_gpu and joules_per_image when the caller read them: render.read_store does).
    table = with_cell_power(with_mfu(input_bound(scaling(cell_summary(ok)))), ok)
    other_table = with_cell_power(with_mfu(scaling(cell_summary(other_ok))), other_ok) if not other_ok.empty \
        else pd.DataFrame()
    sweeps = latest_sweeps(collectives, all_ok)
    windows = windows_of(ranks or [], ok)
    fits = fit_stacks(sweeps.to_dict("records")) if not sweeps.empty else {}
    flavours = analysis_facts()
    found, expected = expected_with_probes(table, ok, fits, windows, ranks or [],
                                           PROBES.get() if probes is None else probes, flavours=flavours) \
        if not table.empty else (None, [])
    expected = tuple(expected)
    other_expected = tuple(expected_with_probes(other_table, other_ok, fits, windows_of(ranks or [], other_ok),
                                                ranks or [], PROBES.get() if probes is None else probes,
                                                flavours=flavours)[1]) if not other_table.empty else ()
    if not table.empty:
        verdicts = {e.cell_id: e for e in expected}
        table = table.assign(expected_samples_per_sec=[getattr(verdicts.get(c), "expected", None)
                                                      for c in table["cell_id"]],
                             vs_expected=[vs_expected(verdicts.get(c), int(n))
                                          for c, n in zip(table["cell_id"], table["gpus"])])
    return Context(out_dir=out_dir, records=records, imported=imported, ok=ok, table=table, sweeps=sweeps,
                   references=reference_summary(imported), failures=latest_failures(measured),
                   prices=merge_prices(catalogue_prices(), prices),
                   env_json=sample_record_json(ok) if env_json is None else env_json, expected=expected,
                   run_env_json=run_env_json or {}, run_sources=run_sources or {},
                   breakdowns=tuple(breakdowns(table, windows, fits, found, flavours=flavours))
                   if windows and not table.empty else (),
                   other_ok=other_ok, other_table=other_table, other_expected=other_expected)


ONE_WORKER = "1 worker: the baseline"  # a 1-worker cell has no expected value: it is X(1) for the others


def vs_expected(e: Expected | None, gpus: int) -> str:
    """The main table's `vs expected`: the verdict, naming a stand-in 1-worker cell and the slow rank; else why
    there is none."""
    if gpus == 1:
        return ONE_WORKER
    if e is None or e.expected is None:
        return e.why if e is not None and e.why else "no expected value"
    return (e.verdict + (f" vs {e.stand_in}" if e.stand_in else "")
            + (f" (slow: rank {e.straggler.rank})" if e.straggler else ""))


def latest_sweeps(collectives: pd.DataFrame | None, ok: pd.DataFrame) -> pd.DataFrame:
    """The collective rows of each cell's latest complete run (the runs `ok` holds)."""
    if collectives is None or collectives.empty or ok.empty:
        return pd.DataFrame(columns=["cell_id", "run_id", "bytes", "time_median_s", "busbw_bytes_per_s"])
    return collectives.merge(ok[["cell_id", "run_id"]].drop_duplicates(), on=["cell_id", "run_id"])


def reference_summary(imported: pd.DataFrame) -> pd.DataFrame:
    """Published references (imported records): median images/sec per cell, labelled by their source."""
    if imported.empty:
        return pd.DataFrame(columns=["gpu", "gpus", "samples_per_sec", "ref_label"])
    ok = imported[imported["status"] == "ok"] if "status" in imported else imported
    ok = ok[ok["samples_per_sec"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=["gpu", "gpus", "samples_per_sec", "ref_label"])
    src = ok["source"].fillna("") if "source" in ok else pd.Series("", index=ok.index)
    # run ids are import:<source>:<file or run>; the source is what a reader recognises.
    src = src.where(src != "", ok["run_id"].astype(str).str.split(":").str[1].fillna(ok["run_id"].astype(str)))
    ok = ok.assign(ref_source=src)
    keys = [k for k in ("gpu", "framework", "mpi", "ib", "precision", "batch_per_gpu", "data", "gpus") if k in ok]
    out = ok.groupby(["ref_source", *keys], dropna=False, sort=True).agg(
        samples_per_sec=("samples_per_sec", "median"), nodes=("nodes", "max"), records=("samples_per_sec", "size")
    ).reset_index()
    out["ref_label"] = [f"{r.ref_source} · {r.framework} · {r.mpi} · IB {'on' if r.ib else 'off'}"
                        for r in out.itertuples()]
    return out
