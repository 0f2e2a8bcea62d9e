"""The GPU power and energy of a store's records, read from their JSON (the sampled `power` field): only the runs
that hold an ok GPU record are read, record by record, so a CPU store or a CPU-only run parses no JSON at all (the
report and `bench status` read the store's columns without it: 100,000 JSON documents would be most of their time)."""
from __future__ import annotations

import pandas as pd

from bench.analysis.mfu import power_frame


def power_records(store, records: pd.DataFrame) -> pd.DataFrame:
    """power_frame (run_id, cell_id, job, repeat, mean_watts_per_gpu, joules_per_image) of every ok non-CPU record
    in `records` (the store's rows without their JSON)."""
    if records.empty or not {"run_id", "gpu", "status"} <= set(records.columns):
        return power_frame([])
    gpu = records[(records["status"] == "ok") & (records["gpu"] != "cpu")]
    rows = [r for run in sorted(gpu["run_id"].dropna().unique()) for r in store.records(run_id=run)
            if r.get("status") == "ok" and r.get("gpu") != "cpu"]
    return power_frame(rows)
