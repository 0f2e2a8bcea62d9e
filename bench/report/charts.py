"""Charts (matplotlib, PNG): scaling per GPU, GPU at a fixed scale, axis comparisons, real vs synthetic data, cost,
and predicted vs measured efficiency. Every chart caps its series so the legend stays readable; what is left out is
named on the chart and stays in the tables."""
from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on workers or CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bench.analysis.scaling import SERIES_KEYS, varying_workload_keys  # noqa: E402
from bench.cells.label import framework_words

MAX_SERIES_PER_CHART = 12  # past this a legend is unreadable; the rest stay in the table
MAX_BARS = 25
MAX_POINTS_WITH_BARS = 300  # past this, per-pair error bars are a grey smear: points and a median line instead
DPI = 90


def _yerr(df: pd.DataFrame, mid: str = "samples_per_sec", low: str = "boot_low", high: str = "boot_high"):
    lo = (df[mid] - df[low]).clip(lower=0) if low in df else 0 * df[mid]
    hi = (df[high] - df[mid]).clip(lower=0) if high in df else 0 * df[mid]
    return [lo.to_numpy(dtype=float), hi.to_numpy(dtype=float)]


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, pil_kwargs={"compress_level": 1})  # fast zlib: a report has a dozen charts
    plt.close(fig)
    return path


def _x(values) -> np.ndarray:
    """Worker counts on a log2 axis, placed by hand (a linear axis of log2(N) draws far faster than a log scale
    when a chart has thousands of points)."""
    return np.log2(np.asarray(values, dtype=float))


def _log2_ticks(ax, values) -> None:
    ticks = sorted({int(v) for v in values})
    ax.set_xticks(_x(ticks), labels=[str(t) for t in ticks])
    ax.minorticks_off()
    lo, hi = _x([min(ticks)])[0], _x([max(ticks)])[0]
    ax.set_xlim(lo - 0.4, hi + 0.4)


def _draw_all(draw, jobs: list, *, parallel_from: int) -> list:
    """draw(job) for each job, in order; in forked processes when there are at least `parallel_from` jobs and
    several cores (each figure is independent, and drawing is CPU-bound), and only from a process of one thread: a
    child forked beside other threads can wait forever on a lock one of them held (bench.cli.main called by a
    threaded program)."""
    if len(jobs) >= parallel_from and (os.cpu_count() or 1) > 1 and threading.active_count() == 1:
        try:
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1, 8), mp_context=ctx) as pool:
                return list(pool.map(draw, jobs))
        except (OSError, ValueError, BrokenProcessPool):  # no fork here, or a worker died: draw them one by one
            pass
    return [draw(job) for job in jobs]


def scaling_charts(table: pd.DataFrame, out_dir: Path, references: pd.DataFrame | None = None, *,
                   rate: str = "images/sec (global, median; bars: 95% CI)", prefix: str = "scaling"
                   ) -> list[tuple[str, Path]]:
    """One PNG per GPU, <prefix>_<gpu>.png: throughput vs workers (bars: bootstrap 95% CI; dashed: ideal linear
    scaling from the named baseline) and efficiency vs workers; `rate` labels the throughput axis (another workload's
    table comes with its rates in its own unit). Published references (imported) are drawn dotted with hollow
    markers. With several GPUs the figures are drawn in parallel processes (each is independent)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    varying = varying_workload_keys(table)
    refs = references if references is not None else pd.DataFrame(columns=["gpu"])
    jobs = [(gpu, by_gpu, refs[refs["gpu"] == gpu] if not refs.empty else refs, varying, out_dir, rate, prefix)
            for gpu, by_gpu in table.groupby("gpu", sort=True)]
    return _draw_all(_scaling_figure, jobs, parallel_from=4)


def _series_parts(row: pd.Series, varying: list[str]) -> list[tuple[str, str]]:
    """(key, words) for each setting a series label can name, in reading order."""
    parts = [("framework", framework_words(row["framework"], row.get("engine"))),
             ("mpi", str(row["mpi"])), ("ib", f"IB {'on' if row['ib'] else 'off'}"),
             ("data", f"ImageNet {row['data_layout']}" if row.get("data") == "imagenet" else "synthetic")]
    return parts + [(k, f"{k}={row[k]}") for k in varying]


def differing_labels(rows: list[pd.Series], varying: list[str]) -> tuple[list[str], str]:
    """A legend label per series naming only the settings that differ between the chart's series, and the
    settings they all share (for the title). One series: its label is everything, nothing is shared."""
    parts = [_series_parts(r, varying) for r in rows]
    if len(parts) <= 1:
        return [" · ".join(w for _, w in p) for p in parts], ""
    keys = [k for k, _ in parts[0]]
    same = {k for i, k in enumerate(keys) if len({p[i][1] for p in parts}) == 1}
    labels = [" · ".join(w for k, w in p if k not in same) for p in parts]
    return labels, " · ".join(w for k, w in parts[0] if k in same)


def _scaling_figure(job) -> tuple[str, Path]:
    gpu, by_gpu, ref_gpu, varying, out_dir, rate, prefix = job
    groups = list(by_gpu.groupby(SERIES_KEYS, dropna=False, sort=True))
    # Longest series first (they say the most about scaling), then the fastest.
    groups.sort(key=lambda kv: (-len(kv[1]), -kv[1]["samples_per_sec"].max()))
    shown = groups[:MAX_SERIES_PER_CHART]
    ref_groups = list(ref_gpu.groupby("ref_label", sort=True))[:4] if not ref_gpu.empty else []
    legend_rows = (len(shown) + len(ref_groups) + 1) // 2
    height = 4.6 + 0.19 * legend_rows
    fig, (ax_t, ax_e) = plt.subplots(1, 2, figsize=(11, height))
    # Fixed margins instead of constrained layout (a third of the drawing time): legend below both plots.
    fig.subplots_adjust(left=0.07, right=0.98, top=1 - 0.62 / height, bottom=(0.75 + 0.19 * legend_rows) / height,
                        wspace=0.22)
    labels, common = differing_labels([s.iloc[0] for _, s in shown], varying)
    for (_, s), label in zip(shown, labels):
        s = s.sort_values("gpus")
        line = ax_t.errorbar(_x(s["gpus"]), s["samples_per_sec"], yerr=_yerr(s), marker="o", capsize=3,
                             label=label)
        colour = line[0].get_color()
        base_n, base_x = s["baseline_gpus"].iloc[0], s["baseline_samples_per_sec"].iloc[0]
        ax_t.plot(_x(s["gpus"]), s["gpus"] / base_n * base_x, linestyle="--", color=colour, alpha=0.5)
        if len(s) > 1:  # a lone cell has nothing to scale against
            ax_e.plot(_x(s["gpus"]), 100 * s["efficiency"], marker="o", color=colour, label=label)
    for label, r in ref_groups:
        r = r.sort_values("gpus")
        line = ax_t.plot(_x(r["gpus"]), r["samples_per_sec"], linestyle=":", marker="D", markerfacecolor="none",
                         color="black", alpha=0.7, label=f"published: {label}")
        if len(r) > 1:
            base = r.iloc[0]
            ax_e.plot(_x(r["gpus"]), 100 * r["samples_per_sec"] / (r["gpus"] / base["gpus"] * base["samples_per_sec"]),
                      linestyle=":", marker="D", markerfacecolor="none", color=line[0].get_color(), alpha=0.7)
    if common:
        fig.suptitle(f"{gpu}, every series: {common}", fontsize=9, y=1 - 0.08 / height, va="top")
    ax_t.set(title=f"{gpu}: throughput (dashed: ideal linear scaling)", xlabel="workers (GPUs)",
             ylabel=rate)
    ax_e.set(title=f"{gpu}: scaling efficiency", xlabel="workers (GPUs)",
             ylabel="efficiency % vs smallest run of the series")
    ax_e.axhline(100, color="grey", linewidth=0.8)
    top = by_gpu["efficiency"].max()
    ax_e.set_ylim(0, max(110, 100 * (top if pd.notna(top) else 1) * 1.05))
    xs = list(by_gpu["gpus"]) + (list(ref_gpu["gpus"]) if not ref_gpu.empty else [])
    for ax in (ax_t, ax_e):
        _log2_ticks(ax, xs)
        ax.grid(alpha=0.3)
    ax_t.set_ylim(bottom=0)
    fig.legend(*ax_t.get_legend_handles_labels(), loc="lower center", ncols=2, fontsize=8, frameon=False)
    if len(groups) > MAX_SERIES_PER_CHART:
        ax_t.text(0.99, 0.01, f"{len(groups) - MAX_SERIES_PER_CHART} more series in the table",
                  transform=ax_t.transAxes, ha="right", fontsize=8)
    path = _save(fig, out_dir / f"{prefix}_{slug(gpu)}.png")
    return f"{gpu}: throughput and scaling efficiency", path


def bar_chart(rows: pd.DataFrame, label_col: str, title: str, path: Path, *, xlabel: str = "images/sec (global, "
              "median; bars: 95% CI)", value: str = "samples_per_sec", low: str = "boot_low",
              high: str = "boot_high", note: str | None = None, fmt: str = "{:,.0f}") -> Path:
    """Horizontal bars, best (first row) on top, capped at MAX_BARS."""
    shown = rows.head(MAX_BARS).iloc[::-1]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.32 * len(shown)), constrained_layout=True)
    xerr = _yerr(shown, value, low, high) if low in shown and high in shown else None
    ax.barh([str(v) for v in shown[label_col]], shown[value], xerr=xerr, capsize=3, color="#4c72b0")
    for y, v in enumerate(shown[value]):
        ax.text(v, y, " " + fmt.format(v), va="center", fontsize=8)
    ax.set(title=title, xlabel=xlabel)
    ax.grid(axis="x", alpha=0.3)
    ax.tick_params(axis="y", labelsize=8)
    if len(rows) > MAX_BARS or note:
        ax.text(0.99, 0.01, note or f"top {MAX_BARS} of {len(rows)}; all in the table", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=8)
    return _save(fig, path)


def ratio_chart(pairs: pd.DataFrame, title: str, ylabel: str, path: Path, *, colour_by: str = "value",
                mismatch: pd.Series | None = None) -> Path:
    """One point per matched pair: x = workers, y = ratio (bars: bootstrap 95% CI); a line at 1 (no difference).
    Colour = the compared value (a handful at most); `mismatch` marks pairs whose transport was not the one asked
    for with a red cross."""
    fig, ax = plt.subplots(figsize=(9, 4.5), constrained_layout=True)
    values = sorted(pairs[colour_by].astype(str).unique())
    rng = np.random.default_rng(0)
    many = len(pairs) > MAX_POINTS_WITH_BARS
    for i, v in enumerate(values[:MAX_SERIES_PER_CHART]):
        p = pairs[pairs[colour_by].astype(str) == v]
        x = _x(p["gpus"]) + (rng.uniform(-0.15, 0.15, len(p)) if len(p) > 1 else 0.0)
        if many:  # thousands of pairs: points only, and the median ratio per worker count as a line
            dots = ax.scatter(x, p["ratio"], s=6, alpha=0.25, label=f"{v} (each pair)")
            med = p.groupby("gpus")["ratio"].median()
            ax.plot(_x(med.index), med.to_numpy(), marker="s", color=dots.get_facecolor()[0][:3], linewidth=2,
                    label=f"{v}: median ratio")
        else:
            ax.errorbar(x, p["ratio"], yerr=_yerr(p, "ratio", "ratio_low", "ratio_high"), fmt="o", capsize=2,
                        alpha=0.8, markersize=4, label=v)
    if mismatch is not None and mismatch.any():
        m = pairs[mismatch.to_numpy()]
        ax.scatter(_x(m["gpus"]), m["ratio"], marker="x", s=90, color="red", linewidths=2, zorder=5,
                   label="transport mismatch (requested ≠ effective)")
    if many:
        ax.text(0.01, 0.01, f"{len(pairs)} pairs: 95% CI bars only up to {MAX_POINTS_WITH_BARS} (see the table)",
                transform=ax.transAxes, fontsize=8)
    ax.axhline(1.0, color="grey", linewidth=1)
    ax.set(title=title, xlabel="workers (GPUs)", ylabel=ylabel)
    _log2_ticks(ax, pairs["gpus"])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    if len(values) > MAX_SERIES_PER_CHART:
        ax.text(0.99, 0.01, f"{len(values) - MAX_SERIES_PER_CHART} more values in the table",
                transform=ax.transAxes, ha="right", fontsize=8)
    return _save(fig, path)


def real_vs_synthetic_chart(rows: pd.DataFrame, bound_below: float, path: Path) -> Path:
    shown = rows.head(MAX_BARS).iloc[::-1]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.32 * len(shown)), constrained_layout=True)
    colours = ["#c44e52" if r < bound_below else "#4c72b0" for r in shown["real_vs_synthetic"]]
    ax.barh(shown["label"], 100 * shown["real_vs_synthetic"], color=colours)
    ax.axvline(100 * bound_below, color="#c44e52", linestyle="--", linewidth=1)
    ax.axvline(100, color="grey", linewidth=1)
    ax.set(title="Real data as % of synthetic (red: input-bound, below the dashed line)",
           xlabel="real-data images/sec as % of the synthetic twin")
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(axis="x", alpha=0.3)
    if len(rows) > MAX_BARS:
        ax.text(0.99, 0.01, f"worst {MAX_BARS} of {len(rows)}", transform=ax.transAxes, ha="right", fontsize=8)
    return _save(fig, path)


def prediction_chart(rows: pd.DataFrame, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 5.5), constrained_layout=True)
    ax.scatter(100 * rows["efficiency"], 100 * rows["predicted_efficiency"], s=14, alpha=0.7)
    ax.plot([0, 110], [0, 110], color="grey", linewidth=1)
    ax.set(xlim=(0, 110), ylim=(0, 110), xlabel="measured efficiency %", ylabel="predicted efficiency %",
           title="What-if model vs measurement (grey: perfect prediction)")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in str(text))


def study_figures(jobs: list[tuple]) -> list[Path]:
    """study_figure for each argument tuple, in parallel processes when the machine has several cores (each
    figure is independent; text rendering makes them the slow part of a small report)."""
    return _draw_all(_study_job, jobs, parallel_from=2)


def _study_job(job: tuple) -> Path:
    return study_figure(*job)


def study_figure(gpu: str, published: pd.DataFrame, predicted: pd.DataFrame, measured: pd.DataFrame,
                 path: Path, published_label: str, unexplained: dict[str, str] | None = None) -> Path:
    """The study's chart for one GPU series: images/sec and efficiency vs GPUs. Published bars: dotted, hollow
    diamonds; the what-if model: dashed, same colour; measured cells of this GPU here: solid, filled circles.
    `unexplained`: series → a short text written beside that series' model curve (whatif.UNEXPLAINED)."""
    entries = 2 * published["series"].nunique() + (measured["label"].nunique() if not measured.empty else 0)
    height = 4.2 + 0.17 * entries
    fig, (ax_t, ax_e) = plt.subplots(1, 2, figsize=(11, height))
    fig.subplots_adjust(left=0.07, right=0.98, top=1 - 0.4 / height, bottom=(0.75 + 0.17 * entries) / height,
                        wspace=0.22)
    xs = list(published["gpus"]) + list(measured["gpus"]) if not measured.empty else list(published["gpus"])
    for series, s in published.groupby("series", sort=True):
        s = s.sort_values("gpus")
        line = ax_t.plot(_x(s["gpus"]), s["samples_per_sec"], linestyle=":", marker="D", markerfacecolor="none",
                         label=f"{series}: {published_label}")
        colour = line[0].get_color()
        ax_e.plot(_x(s["gpus"]), 100 * s["efficiency"], linestyle=":", marker="D", markerfacecolor="none",
                  color=colour)
        p = predicted[predicted["series"] == series].sort_values("gpus")
        if not p.empty:
            ax_t.plot(_x(p["gpus"]), p["samples_per_sec"], linestyle="--", color=colour, alpha=0.8,
                      label=f"{series}: what-if model (bench model)")
            ax_e.plot(_x(p["gpus"]), 100 * p["efficiency"], linestyle="--", color=colour, alpha=0.8)
            for x, e, res in zip(_x(p["gpus"]), p["efficiency"], p.get("residual_points", [None] * len(p))):
                if res is not None and pd.notna(res):  # the model's miss at this bar, in points
                    ax_e.annotate(f"{res:+.0f}", (x, 100 * e), textcoords="offset points", xytext=(0, 4),
                                  ha="center", fontsize=6, color=colour)
            if series in (unexplained or {}):  # beside the curve: the miss is shown, and why it stays
                at = s.iloc[len(s) // 2]  # under the published curve's middle bar
                ax_e.annotate(unexplained[series], (_x([at["gpus"]])[0], 100 * at["efficiency"]),
                              textcoords="offset points", xytext=(0, -14), ha="center", va="top", fontsize=6.5,
                              color=colour, wrap=True,
                              bbox=dict(boxstyle="round,pad=0.3", fc="white", ec=colour, alpha=0.9, lw=0.6))
    for label, m in (measured.groupby("label", sort=True) if not measured.empty else []):
        m = m.sort_values("gpus")
        line = ax_t.plot(_x(m["gpus"]), m["samples_per_sec"], marker="o", linewidth=2,
                         label=f"{label}: measured here")
        if len(m) > 1:
            ax_e.plot(_x(m["gpus"]), 100 * m["efficiency"], marker="o", linewidth=2, color=line[0].get_color())
    ax_t.set(title=f"{gpu}: ResNet-50 throughput", xlabel="GPUs", ylabel="images/sec (global)")
    ax_e.set(title=f"{gpu}: scaling efficiency", xlabel="GPUs", ylabel="efficiency % vs the series' 1-GPU run")
    ax_e.axhline(100, color="grey", linewidth=0.8)
    top = measured["efficiency"].max() if not measured.empty else float("nan")
    ax_e.set_ylim(0, max(110, 105 * top if pd.notna(top) else 0))
    for ax in (ax_t, ax_e):
        _log2_ticks(ax, xs)
        ax.grid(alpha=0.3)
    ax_t.set_ylim(bottom=0)
    fig.legend(*ax_t.get_legend_handles_labels(), loc="lower center", ncols=1, fontsize=8, frameon=False)
    return _save(fig, path)


def history_chart(panels: list[tuple[str, list[float], list[int], list[tuple[int, float, float]]]], path: Path,
                  ncols: int = 3) -> Path:
    """Small multiples, one panel per cell: throughput per run (x: the run's position in time), each change
    point a dashed line before its first run, each level between change points a grey segment.
    panels: (title, values, change indices, levels as (start index, end index exclusive, level))."""
    n = len(panels)
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, min(ncols, n), figsize=(3.6 * min(ncols, n), 2.3 * nrows), squeeze=False)
    for ax, (title, values, changes, levels) in zip(axes.flat, panels):
        xs = np.arange(1, len(values) + 1)
        ax.plot(xs, values, marker="o", markersize=3, linewidth=1)
        for start, end, level in levels:
            ax.hlines(level, start + 0.6, end + 0.4, colors="grey", linewidth=2, alpha=0.6)
        for k in changes:
            ax.axvline(k + 0.5, color="red", linestyle="--", linewidth=1)
        ax.set_title(title, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("run", fontsize=7)
        ax.set_ylabel("img/s", fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.tight_layout()
    return _save(fig, path)


BREAKDOWN_COLOURS = {"input": "#8c8c8c", "compute": "#4c72b0", "communication": "#dd8452", "rest": "#c9c9c9"}


def breakdown_chart(labels: list[str], parts: list[dict[str, float]], sources: list[dict[str, str]],
                    path: Path) -> Path:
    """Where each cell's step time went: one horizontal stacked bar per cell (seconds per step); a modelled part is
    hatched, a measured one solid."""
    labels, parts, sources = labels[:MAX_BARS], parts[:MAX_BARS], sources[:MAX_BARS]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.42 * len(labels)))
    y = np.arange(len(labels))
    left = np.zeros(len(labels))
    for name, colour in BREAKDOWN_COLOURS.items():
        widths = np.array([p[name] for p in parts])
        hatches = ["//" if s[name] == "modelled" else "" for s in sources]
        for i, (w, h) in enumerate(zip(widths, hatches)):
            ax.barh(y[i], w, left=left[i], color=colour, hatch=h, edgecolor="white" if not h else "#333333",
                    label=name if i == 0 else None)
        left += widths
    ax.set_yticks(y, labels=labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per step (hatched: modelled, solid: measured by the workers)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Where the step time went")
    fig.tight_layout()
    return _save(fig, path)
