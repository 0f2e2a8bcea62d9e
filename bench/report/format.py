"""How a cell reads in the report's tables and labels: numbers, intervals, transports, data and short labels.
Pure functions of one table row; the sections pick the rows."""
from __future__ import annotations

import pandas as pd

from bench.analysis.missing import MISSING, is_missing, text
from bench.analysis.scaling import INPUT_BOUND_BELOW
from bench.cells.label import framework_words

COLUMNS = ["gpu", "framework", "mpi", "IB", "transport", "workers", "nodes", "batch/worker", "image", "precision",
           "data", "images/sec", "95% CI", "per worker", "rank spread", "speedup", "efficiency", "vs expected",
           "baseline", "cell_id"]
# A GPU's block of the main table adds, after the rate per worker, its MFU with the power and energy the workers
# sampled, side by side (bench/analysis/mfu.py); a CPU has no peak and samples no power.
GPU_FIGURES = ["MFU", "W/GPU", "J/img"]
GPU_COLUMNS = [*COLUMNS[:COLUMNS.index("per worker") + 1], *GPU_FIGURES, *COLUMNS[COLUMNS.index("per worker") + 1:]]
# Columns set flush left in HTML (words, not numbers).
LEFT = {"gpu", "framework", "mpi", "IB", "transport", "precision", "data", "baseline", "cell_id", "95% CI",
        "rank spread", "cell", "value", "vs", "verdict", "setting", "price read", "price source", "vm",
        "transport (a)", "transport (b)", "source", "reason", "status", "run", "label", "vs expected", "expected",
        "links", "slow rank", "peak (dense)"}


def num(v, fmt="{:,.1f}", none=MISSING) -> str:
    """A number for the page, or `none` (a dash, or the reason) when it is missing (bench/analysis/missing.py)."""
    return text(v, fmt, none)


def pct(v, digits: int = 0, none=MISSING) -> str:
    """A fraction as a percentage, or `none` when it is missing."""
    return none if is_missing(v) else f"{100 * v:.{digits}f}%"


def ci(r) -> str:
    low, high = getattr(r, "boot_low", None), getattr(r, "boot_high", None)
    if is_missing(low) or is_missing(high):
        low, high = r.ci_low, r.ci_high
    n = int(r.ci_over.split()[0]) if isinstance(r.ci_over, str) and r.ci_over.split()[0].isdigit() else 0
    if is_missing(low) or is_missing(high):
        return f"{MISSING} (no interval: {text(r.ci_over, missing='no windows')})"
    return f"{low:,.1f}–{high:,.1f} ({r.ci_over}" + (", too few to trust" if n < 3 else "") + ")"


def transport(r) -> str:
    eff = getattr(r, "effective_transport", None)
    verdict = getattr(r, "transport_verdict", None)
    text = eff if isinstance(eff, str) and eff else "unknown"
    if verdict == "mismatch":
        req = getattr(r, "requested_transport", None)
        return f"⚠ MISMATCH: {text}" + (f" (asked {req})" if isinstance(req, str) and req else "")
    return text


def framework(r) -> str:
    return framework_words(r.framework, getattr(r, "engine", None))


def data_label(r) -> str:
    if r.data != "imagenet":
        return r.data
    label = f"imagenet ({r.data_layout})"
    ratio = getattr(r, "real_vs_synthetic", float("nan"))
    if pd.notna(ratio):
        label += f" {100 * ratio:.0f}% of synthetic"
        if ratio < INPUT_BOUND_BELOW:
            label += " — INPUT-BOUND"
    return label


def settings_label(r, drop: tuple[str, ...] = ()) -> str:
    """What a pair or a series of cells shares, leaving out `drop` (the axis the pair differs in, or shown in
    another column): not a cell's name, which is bench.cells.label.cell_label."""
    parts = []
    if "gpu" not in drop:
        parts.append(str(r["gpu"]))
    if "framework" not in drop:
        parts.append(framework_words(r["framework"], r.get("engine")))
    if "mpi" not in drop:
        parts.append(str(r["mpi"]))
    if "ib" not in drop:
        parts.append(f"IB {'on' if r['ib'] else 'off'}")
    if "precision" not in drop:
        parts.append(str(r["precision"]))
    parts.append(f"b{r['batch_per_gpu']}")
    if r.get("data") == "imagenet":
        parts.append(f"ImageNet {r['data_layout']}")
    if "gpus" not in drop:
        parts.append(f"{int(r['gpus'])} workers")
    return " · ".join(parts)


def precision_label(r, layouts_differ: bool) -> str:
    """The precision, with the memory layout where the table holds both (channels-last is worth ~2x on a GPU:
    two rows that differ only by it must not read the same)."""
    if not layouts_differ:
        return r.precision
    return f"{r.precision}, {'channels-last' if r.channels_last else 'NCHW'}"


def gpu_figures(r) -> dict[str, str]:
    """MFU (or why there is none), mean watts per GPU and joules per image of one cell row: the GPU_FIGURES."""
    return {"MFU": pct(getattr(r, "mfu", None), 1, text(getattr(r, "mfu_why", None))),
            "W/GPU": num(getattr(r, "mean_watts_per_gpu", None), "{:,.0f}", "not sampled"),
            "J/img": num(getattr(r, "joules_per_image", None), "{:.3f}", "not sampled")}


def table_rows(table: pd.DataFrame) -> list[dict[str, str]]:
    """One row per cell of the scaling table, in COLUMNS."""
    rows = []
    layouts_differ = "channels_last" in table and table["channels_last"].dropna().nunique() > 1
    for r in table.itertuples(index=False):
        alone = r.series_cells == 1 and r.gpus > 1  # no smaller run of the same series to divide by
        base = "no smaller run in this series" if alone else \
            f"{int(r.baseline_gpus)} worker{'s' if r.baseline_gpus > 1 else ''}: {r.baseline_samples_per_sec:,.1f}"
        rows.append({
            "gpu": r.gpu, "framework": framework(r), "mpi": r.mpi, "IB": "on" if r.ib else "off",
            "transport": transport(r),
            "workers": int(r.gpus), "nodes": int(r.nodes), "batch/worker": int(r.batch_per_gpu),
            "image": int(r.image_size), "precision": precision_label(r, layouts_differ), "data": data_label(r),
            "images/sec": f"{r.samples_per_sec:,.1f}", "95% CI": ci(r),
            "per worker": f"{r.samples_per_sec_per_gpu:,.1f}", **gpu_figures(r),
            "rank spread": MISSING if r.gpus == 1 else pct(r.rank_spread, 1, "not recorded")
                           + ("" if is_missing(r.rank_spread) or is_missing(r.slowest_rank) else
                              f" (slowest: rank {r.slowest_rank})"),
            "speedup": MISSING if alone else num(r.speedup, "{:.2f}×"),
            "efficiency": MISSING if alone else pct(r.efficiency),
            "vs expected": text(getattr(r, "vs_expected", None)),
            "baseline": base, "cell_id": r.cell_id,
            "_bad": getattr(r, "transport_verdict", None) == "mismatch",
        })
    return rows
