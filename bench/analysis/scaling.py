"""Scaling arithmetic, as pure functions on DataFrames (no I/O).

Speedup S(N) = X(N) / X(N0) and efficiency E(N) = X(N) / ((N / N0) · X(N0)), where X is a cell's median global
images/sec and N0 the smallest worker count measured in the same series: normally N0 = 1, and the table says so.
"""
from __future__ import annotations

import pandas as pd

from bench.analysis.stats.intervals import bootstrap_many, median_ci
from bench.backend_settings.registry import BACKENDS
from bench.cells.keys import CELL_KEYS, INPUT_KEYS
from bench.cells.label import framework_words
from bench.records.completeness import IMPORT_RUN_PREFIX, complete_runs

# A series is every cell setting except the worker count: the same SKU, framework, MPI, fabric and workload.
SERIES_KEYS = [k for k in CELL_KEYS if k != "gpus"]


def latest_complete(records: pd.DataFrame) -> pd.DataFrame:
    """The ok records of each cell's most recent run that completed it (bench.records.completeness, the rule the store's
    resume uses too; imported published references excluded: see split_imported)."""
    if records.empty:
        return records
    records = split_imported(records)[0]
    cells, runs = records["cell_id"].tolist(), records["run_id"].tolist()
    jobs = records["jobs"].tolist() if "jobs" in records else [1] * len(records)
    done = complete_runs(cells, runs, records["status"].tolist(), records["repeats"].tolist(), jobs)
    in_complete_run = [key in done for key in zip(cells, runs)]
    complete = records[in_complete_run].groupby(["cell_id", "run_id"], sort=False).agg(
        started=("start_unix", "min")).reset_index()
    latest = complete.sort_values("started", kind="stable").groupby("cell_id").tail(1)[["cell_id", "run_id"]]
    return records[records.status == "ok"].merge(latest, on=["cell_id", "run_id"])


IMPORT_PREFIX = IMPORT_RUN_PREFIX


def measured_sources() -> set[str]:
    """`source` values that mean a measurement: bench itself or one of its backends (the registry's names, which
    load no backend)."""
    return {"", "bench", "measured", *BACKENDS}


def imported_mask(records: pd.DataFrame) -> pd.Series:
    """True for records imported from a published reference (run id `import:…`, or a `source` column naming
    something other than this tool), which are shown as overlays, never mixed into measured tables."""
    mask = records["run_id"].astype(str).str.startswith(IMPORT_PREFIX)
    if "source" in records:
        src = records["source"].fillna("").astype(str).str.strip().str.lower()
        mask |= ~src.isin(measured_sources())
    return mask


def split_imported(records: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measured, imported) records."""
    if records.empty or "run_id" not in records:
        return records, records.iloc[0:0]
    mask = imported_mask(records)
    return records[~mask], records[mask]


def latest_failures(records: pd.DataFrame) -> pd.DataFrame:
    """Cells whose most recent attempt did not succeed, with the reason."""
    if records.empty:
        return records
    last_run = records.sort_values("written_unix").groupby("cell_id").tail(1)[["cell_id", "run_id"]]
    last = records.merge(last_run, on=["cell_id", "run_id"])
    return last[last.status != "ok"]


def cell_summary(ok_records: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: median global images/sec over its measured windows, 95% intervals for that median, the
    spread across ranks and what transport ran.

    Two intervals, over job medians when the cell ran several jobs (separate launches: independent), else over the
    windows of its one job (`ci_over` says which): `ci_low/ci_high`, the distribution-free order-statistic interval
    with the coverage it really has, and `boot_low/boot_high`, the seeded percentile bootstrap of stats.bootstrap_ci
    (computed for many cells at once, same numbers), which error bars and comparisons use. `ci_values` keeps the
    values both rest on."""
    columns = ["cell_id", *CELL_KEYS, "nodes", "n", "samples_per_sec", "min", "max", "ci_low", "ci_high",
               "ci_coverage", "ci_over", "boot_low", "boot_high", "ci_values", "rank_spread", "slowest_rank",
               "requested_transport", "effective_transport", "transport_verdict", "samples_per_sec_per_gpu"]
    if ok_records.empty:
        return pd.DataFrame(columns=columns)
    keys = ["cell_id", *CELL_KEYS, "nodes"]
    # Vectorised per cell (5,000 cells and 100,000 records in about a second); only the intervals loop.
    recs = ok_records.reset_index(drop=True)
    cell_of = recs.groupby(keys, dropna=False, sort=False).ngroup()
    recs = recs.assign(_cell=cell_of.to_numpy())
    firsts = recs.drop_duplicates("_cell").set_index("_cell").sort_index()
    rate = recs.groupby("_cell")["samples_per_sec"]
    out = firsts[keys].copy()
    out["n"] = rate.size()
    out["samples_per_sec"] = rate.median()
    out["min"], out["max"] = rate.min(), rate.max()
    if "job" in recs:
        job_medians = recs.groupby(["_cell", "job"])["samples_per_sec"].median()
        jobs = job_medians.groupby(level=0).agg(list)
    else:
        jobs = pd.Series([[] for _ in out.index], index=out.index)
    windows = rate.agg(list)
    values, over = [], []
    for cell in out.index:
        j = jobs.get(cell, [])
        if len(j) >= 2:
            values.append(tuple(j))
            over.append(f"{len(j)} jobs")
        else:
            values.append(tuple(windows[cell]))
            over.append(f"{len(windows[cell])} windows")
    cis = [median_ci(list(v)) for v in values]
    out["ci_low"] = [c.low for c in cis]
    out["ci_high"] = [c.high for c in cis]
    out["ci_coverage"] = [c.coverage for c in cis]
    out["ci_over"] = over
    boot = bootstrap_many(values)
    out["boot_low"], out["boot_high"] = boot[:, 0], boot[:, 1]
    out["ci_values"] = values
    out["rank_spread"] = recs.groupby("_cell")["rank_spread"].max() if "rank_spread" in recs else None
    out["slowest_rank"] = _mode(recs, "slowest_rank").astype("Int64") if "slowest_rank" in recs else None
    out["requested_transport"] = _mode(recs, "requested_transport")
    out["effective_transport"] = _mode(recs, "effective_transport")
    out["transport_verdict"] = _worst_verdict(recs)
    out["samples_per_sec_per_gpu"] = out["samples_per_sec"] / out["gpus"]
    out = out.reset_index(drop=True)[columns]
    return out.sort_values([*SERIES_KEYS, "gpus"], kind="stable").reset_index(drop=True)


def _mode(recs: pd.DataFrame, col: str) -> pd.Series:
    """Most common non-null value of `col` per cell (ties: the smallest), None where all are null."""
    if col not in recs:
        return pd.Series(None, index=recs["_cell"].unique(), dtype=object)
    counts = recs[["_cell", col]].dropna().value_counts().reset_index(name="_n")
    counts = counts.sort_values(["_cell", "_n", col], ascending=[True, False, True], kind="stable")
    first = counts.drop_duplicates("_cell").set_index("_cell")[col]
    return first.reindex(sorted(recs["_cell"].unique())).astype(object).where(lambda s: s.notna(), None)


_VERDICT_RANK = {"match": 0, "unknown": 1, "mismatch": 2}


def _worst_verdict(recs: pd.DataFrame) -> pd.Series:
    """The worst transport verdict of a cell's records: one mismatching window makes the cell a mismatch."""
    cells = sorted(recs["_cell"].unique())
    if "transport_verdict" not in recs:
        return pd.Series(None, index=cells, dtype=object)
    v = recs[["_cell", "transport_verdict"]].dropna()
    rank = v["transport_verdict"].map(_VERDICT_RANK).fillna(1)
    worst = v.assign(_r=rank).sort_values("_r", kind="stable").drop_duplicates("_cell", keep="last")
    return worst.set_index("_cell")["transport_verdict"].reindex(cells).astype(object).where(
        lambda s: s.notna(), None)


def scaling(summary: pd.DataFrame) -> pd.DataFrame:
    """Adds baseline_gpus, baseline_samples_per_sec, speedup and efficiency to a cell summary."""
    if summary.empty:
        return summary.assign(baseline_gpus=[], baseline_samples_per_sec=[], speedup=[], efficiency=[],
                              series_cells=[])
    s = summary.reset_index(drop=True).copy()
    groups = s.groupby(SERIES_KEYS, dropna=False, sort=False)["gpus"]
    base = groups.transform("idxmin").to_numpy()  # row of the smallest worker count in each series
    s["baseline_gpus"] = s["gpus"].to_numpy()[base].astype(int)
    s["baseline_samples_per_sec"] = s["samples_per_sec"].to_numpy()[base]
    s["speedup"] = s["samples_per_sec"] / s["baseline_samples_per_sec"]
    s["efficiency"] = s["speedup"] / (s["gpus"] / s["baseline_gpus"])
    s["series_cells"] = groups.transform("size").to_numpy()
    return s


def series_label(row: pd.Series, varying: list[str] | None = None) -> str:
    """Short name of a series: gpu · framework · mpi · ib, real data if so, plus the workload keys that vary."""
    framework = framework_words(row["framework"], row.get("engine"))
    label = f"{row['gpu']} · {framework} · {row['mpi']} · IB {'on' if row['ib'] else 'off'}"
    if row.get("data") == "imagenet":
        label += f" · ImageNet {row['data_layout']}"
    extra = [f"{k}={row[k]}" for k in (varying or [])]
    return label + (f" ({', '.join(extra)})" if extra else "")


# Shown through the label's own words (framework, engine, data) or not worth a legend entry.
_UNLABELLED = {"gpu", "framework", "mpi", "ib", "engine", *INPUT_KEYS}


def varying_workload_keys(summary: pd.DataFrame) -> list[str]:
    """Workload keys that differ between the synthetic-data cells of a report (so a legend must name them)."""
    synthetic = summary[summary["data"] == "synthetic"] if "data" in summary else summary
    keys = [k for k in SERIES_KEYS if k not in _UNLABELLED]
    return [k for k in keys if synthetic[k].nunique(dropna=False) > 1]


INPUT_BOUND_BELOW = 0.8  # a real-data cell under 80% of its synthetic twin is waiting for input


def input_bound(summary: pd.DataFrame) -> pd.DataFrame:
    """Adds `synthetic_samples_per_sec` and `real_vs_synthetic` to real-data cells that have a synthetic twin (every
    other setting equal), and `input_bound` where the ratio is below INPUT_BOUND_BELOW."""
    out = summary.copy()
    out["synthetic_samples_per_sec"] = float("nan")
    if out.empty:
        out["real_vs_synthetic"] = []
        out["input_bound"] = []
        return out
    twin_keys = [k for k in CELL_KEYS if k not in INPUT_KEYS]
    synthetic = out[out["data"] == "synthetic"].set_index(twin_keys)["samples_per_sec"]
    synthetic = synthetic[~synthetic.index.duplicated()]
    real = out["data"] == "imagenet"
    for i in out.index[real]:
        key = tuple(out.loc[i, twin_keys])
        if key in synthetic.index:
            out.loc[i, "synthetic_samples_per_sec"] = synthetic.loc[key]
    out["real_vs_synthetic"] = out["samples_per_sec"] / out["synthetic_samples_per_sec"]
    out["input_bound"] = out["real_vs_synthetic"] < INPUT_BOUND_BELOW
    return out
