"""The layout part of a store's layout records (their `layout` and `peak_memory`, bench/analysis/layout_cells.py), read
from their JSON: only the runs that hold an ok record of a layout cell are read, so a store without layout cells parses
no JSON at all (the report and `bench status` read the store's columns without it)."""
from __future__ import annotations

import pandas as pd

from bench.analysis.layout_cells import layout_frame


def layout_records(store, records: pd.DataFrame) -> pd.DataFrame:
    """layout_frame (run_id, cell_id, job, repeat, layout_json) of every ok layout record in `records` (the store's
    rows without their JSON)."""
    if records.empty or not {"run_id", "layout", "status"} <= set(records.columns):
        return layout_frame([])
    chosen = records[(records["status"] == "ok") & records["layout"].notna()]
    wanted = set(zip(chosen["run_id"], chosen["cell_id"]))
    rows = [r for run in sorted(chosen["run_id"].dropna().unique()) for r in store.records(run_id=run)
            if (r["run_id"], r["cell_id"]) in wanted and r.get("status") == "ok"]
    return layout_frame(rows)
