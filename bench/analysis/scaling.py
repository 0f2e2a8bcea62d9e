"""Scaling arithmetic, as pure functions on DataFrames (no I/O).

Speedup S(N) = X(N) / X(N0) and efficiency E(N) = X(N) / ((N / N0) · X(N0)), where X is a cell's median global
images/sec and N0 the smallest worker count measured in the same series: normally N0 = 1, and the table says so.
"""
from __future__ import annotations

import statistics

import pandas as pd

from bench.analysis.stats import median_ci
from bench.matrix import CELL_KEYS

# A series is every cell setting except the worker count: the same SKU, framework, MPI, fabric and workload.
SERIES_KEYS = [k for k in CELL_KEYS if k != "gpus"]


def latest_complete(records: pd.DataFrame) -> pd.DataFrame:
    """The ok records of each cell's most recent run in which every repeat succeeded."""
    if records.empty:
        return records
    per_run = records.groupby(["cell_id", "run_id"]).agg(
        ok=("status", lambda s: (s == "ok").sum()), bad=("status", lambda s: (s != "ok").sum()),
        repeats=("repeats", "max"), started=("start_unix", "min")).reset_index()
    complete = per_run[(per_run.ok >= per_run.repeats) & (per_run.bad == 0)]
    latest = complete.sort_values("started").groupby("cell_id").tail(1)[["cell_id", "run_id"]]
    ok = records[records.status == "ok"]
    return ok.merge(latest, on=["cell_id", "run_id"])


def latest_failures(records: pd.DataFrame) -> pd.DataFrame:
    """Cells whose most recent attempt did not succeed, with the reason."""
    if records.empty:
        return records
    last_run = records.sort_values("written_unix").groupby("cell_id").tail(1)[["cell_id", "run_id"]]
    last = records.merge(last_run, on=["cell_id", "run_id"])
    return last[last.status != "ok"]


def cell_summary(ok_records: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: median global images/sec over its measured windows, a 95% interval for that median, and
    the spread across ranks.

    The interval is taken over job medians when the cell ran several jobs (separate launches: independent), else
    over the windows of its one job (`ci_over` says which)."""
    columns = ["cell_id", *CELL_KEYS, "nodes", "n", "images_per_sec", "min", "max", "ci_low", "ci_high",
               "ci_coverage", "ci_over", "rank_spread", "slowest_rank", "images_per_sec_per_gpu"]
    if ok_records.empty:
        return pd.DataFrame(columns=columns)
    keys = ["cell_id", *CELL_KEYS, "nodes"]
    rows = []
    for key, g in ok_records.groupby(keys, dropna=False, sort=False):
        rates = g["images_per_sec"].tolist()
        jobs = g.groupby("job")["images_per_sec"].median().tolist() if "job" in g else []
        ci = median_ci(jobs if len(jobs) >= 2 else rates)
        slowest = g["slowest_rank"].mode()
        rows.append({**dict(zip(keys, key)), "n": len(rates), "images_per_sec": statistics.median(rates),
                     "min": min(rates), "max": max(rates), "ci_low": ci.low, "ci_high": ci.high,
                     "ci_coverage": ci.coverage, "ci_over": f"{len(jobs)} jobs" if len(jobs) >= 2 else
                     f"{len(rates)} windows", "rank_spread": g["rank_spread"].max() if "rank_spread" in g else None,
                     "slowest_rank": int(slowest.iloc[0]) if len(slowest) else None})
    out = pd.DataFrame(rows, columns=columns[:-1])
    out["images_per_sec_per_gpu"] = out["images_per_sec"] / out["gpus"]
    return out.sort_values([*SERIES_KEYS, "gpus"], kind="stable").reset_index(drop=True)


def scaling(summary: pd.DataFrame) -> pd.DataFrame:
    """Adds baseline_gpus, baseline_images_per_sec, speedup and efficiency to a cell summary."""
    if summary.empty:
        return summary.assign(baseline_gpus=[], baseline_images_per_sec=[], speedup=[], efficiency=[],
                              series_cells=[])
    parts = []
    for _, series in summary.groupby(SERIES_KEYS, dropna=False, sort=False):
        base = series.loc[series["gpus"].idxmin()]
        s = series.copy()
        s["baseline_gpus"] = int(base["gpus"])
        s["baseline_images_per_sec"] = base["images_per_sec"]
        s["speedup"] = s["images_per_sec"] / base["images_per_sec"]
        s["efficiency"] = s["speedup"] / (s["gpus"] / base["gpus"])
        s["series_cells"] = len(s)
        parts.append(s)
    return pd.concat(parts, ignore_index=True)


def series_label(row: pd.Series, varying: list[str] | None = None) -> str:
    """Short name of a series: gpu · framework · mpi · ib, real data if so, plus the workload keys that vary."""
    framework = row["framework"] + (" (DDP)" if row.get("engine") == "native" else "")
    label = f"{row['gpu']} · {framework} · {row['mpi']} · IB {'on' if row['ib'] else 'off'}"
    if row.get("data") == "imagenet":
        label += f" · ImageNet {row['data_layout']}"
    extra = [f"{k}={row[k]}" for k in (varying or [])]
    return label + (f" ({', '.join(extra)})" if extra else "")


# Shown through the label's own words (framework, engine, data) or not worth a legend entry.
_UNLABELLED = {"gpu", "framework", "mpi", "ib", "engine", "data", "data_layout", "loader_workers"}


def varying_workload_keys(summary: pd.DataFrame) -> list[str]:
    """Workload keys that differ between the synthetic-data cells of a report (so a legend must name them)."""
    synthetic = summary[summary["data"] == "synthetic"] if "data" in summary else summary
    keys = [k for k in SERIES_KEYS if k not in _UNLABELLED]
    return [k for k in keys if synthetic[k].nunique(dropna=False) > 1]


INPUT_BOUND_BELOW = 0.8  # a real-data cell under 80% of its synthetic twin is waiting for input


def input_bound(summary: pd.DataFrame) -> pd.DataFrame:
    """Adds `synthetic_images_per_sec` and `real_vs_synthetic` to real-data cells that have a synthetic twin (every
    other setting equal), and `input_bound` where the ratio is below INPUT_BOUND_BELOW."""
    out = summary.copy()
    out["synthetic_images_per_sec"] = float("nan")
    if out.empty:
        out["real_vs_synthetic"] = []
        out["input_bound"] = []
        return out
    twin_keys = [k for k in CELL_KEYS if k not in ("data", "data_layout", "loader_workers")]
    synthetic = out[out["data"] == "synthetic"].set_index(twin_keys)["images_per_sec"]
    synthetic = synthetic[~synthetic.index.duplicated()]
    real = out["data"] == "imagenet"
    for i in out.index[real]:
        key = tuple(out.loc[i, twin_keys])
        if key in synthetic.index:
            out.loc[i, "synthetic_images_per_sec"] = synthetic.loc[key]
    out["real_vs_synthetic"] = out["images_per_sec"] / out["synthetic_images_per_sec"]
    out["input_bound"] = out["real_vs_synthetic"] < INPUT_BOUND_BELOW
    return out
