"""The training cells of a store as `bench status` judges them, computed once for its table and its prose (pure:
frames in, frames and Expected rows out): the latest complete run of each training cell, one row per cell with its
rate, 95% interval, speedup and efficiency (scaling.py), and each multi-worker cell's expected value and verdict
(expected.py), with what those rest on (the allreduce fits, the ranks' windows, the compute probes found).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from bench.analysis.expected import Expected
from bench.analysis.flavours import FlavourFacts


@dataclass(frozen=True)
class Judged:
    ok: pd.DataFrame  # the ok records of each training cell's latest complete run
    table: pd.DataFrame  # scaling(cell_summary(ok)): one row per cell, speedup and efficiency against its series
    expected: tuple[Expected, ...]  # one per multi-worker cell
    fits: Mapping[tuple, Any]  # collectives.fit_stacks() of those runs' sweeps
    windows: Mapping[str, list]  # cell_id → its windows' per-rank figures
    found: Mapping[str, Any] | None  # cell_id → the compute probe that stands for it (None: not looked up)
    flavours: FlavourFacts

    def run_of(self) -> dict[str, str]:
        """cell_id → the run whose records the cell's row shows."""
        return run_of(self.ok)


def run_of(ok: pd.DataFrame) -> dict[str, str]:
    """cell_id → the run of each cell's rows in `ok` (the ok records of each cell's latest complete run)."""
    if ok.empty:
        return {}
    pairs = ok[["cell_id", "run_id"]].drop_duplicates("cell_id")
    return dict(zip(pairs["cell_id"], pairs["run_id"]))


def judge(records: pd.DataFrame, collectives: pd.DataFrame | None, ranks: list[dict],
          probes: Mapping[str, list[dict]] | None, *, flavours: FlavourFacts) -> Judged | None:
    """None when the store has no complete training cell. `records`: Store.dataframe(); `collectives`:
    Store.collectives(); `ranks`: Store.rank_windows(); `probes`: the probes stored beside the store
    (bench.commands.lines.probe_entries; None = not looked up); `flavours`: bench.launch.analysis_facts()."""
    from bench.analysis.collectives import fit_stacks, training_only
    from bench.analysis.expected_cells import expected_with_probes
    from bench.analysis.scaling import cell_summary, latest_complete, scaling, split_imported
    from bench.analysis.windows import windows_of

    measured = split_imported(records)[0]
    if measured.empty:
        return None
    all_ok = latest_complete(measured)
    ok = training_only(all_ok)
    if ok.empty:
        return None
    table = scaling(cell_summary(ok))
    sweeps = collectives.merge(all_ok[["cell_id", "run_id"]].drop_duplicates(), on=["cell_id", "run_id"]) \
        if collectives is not None and not collectives.empty else collectives
    fits = fit_stacks(sweeps.to_dict("records")) if sweeps is not None and not sweeps.empty else {}
    windows = windows_of(ranks, ok)
    found, expected = expected_with_probes(table, ok, fits, windows, ranks, probes, flavours=flavours)
    return Judged(ok=ok, table=table, expected=tuple(expected), fits=fits, windows=windows, found=found,
                  flavours=flavours)
