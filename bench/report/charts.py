"""Scaling charts: throughput vs workers with the ideal line, and efficiency vs workers; one figure per GPU."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on workers or CI
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from bench.analysis.scaling import SERIES_KEYS, series_label, varying_workload_keys  # noqa: E402

MAX_SERIES_PER_CHART = 12  # past this a legend is unreadable; the rest stay in the table


def scaling_charts(table: pd.DataFrame, out_dir: Path) -> list[tuple[str, Path]]:
    """Writes one PNG per GPU; returns (title, path) pairs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    varying = varying_workload_keys(table)
    charts = []
    for gpu, by_gpu in table.groupby("gpu", sort=True):
        groups = list(by_gpu.groupby(SERIES_KEYS, dropna=False, sort=True))
        shown = groups[:MAX_SERIES_PER_CHART]
        fig, (ax_t, ax_e) = plt.subplots(1, 2, figsize=(11, 4.2 + 0.22 * len(shown)), constrained_layout=True)
        for _, s in shown:
            s = s.sort_values("gpus")
            label = series_label(s.iloc[0], varying).removeprefix(f"{gpu} · ")
            yerr = [s["images_per_sec"] - s["min"], s["max"] - s["images_per_sec"]]
            line = ax_t.errorbar(s["gpus"], s["images_per_sec"], yerr=yerr, marker="o", capsize=3, label=label)
            base_n, base_x = s["baseline_gpus"].iloc[0], s["baseline_images_per_sec"].iloc[0]
            ax_t.plot(s["gpus"], s["gpus"] / base_n * base_x, linestyle="--", color=line[0].get_color(), alpha=0.5)
            if len(s) > 1:  # a lone cell has nothing to scale against
                ax_e.plot(s["gpus"], 100 * s["efficiency"], marker="o", color=line[0].get_color(), label=label)
        ax_t.set(title=f"{gpu}: throughput (dashed: ideal linear scaling)", xlabel="workers (GPUs)",
                 ylabel="images/sec (global, median; bars: min-max)")
        ax_e.set(title=f"{gpu}: scaling efficiency", xlabel="workers (GPUs)",
                 ylabel="efficiency % vs smallest run of the series")
        ax_e.axhline(100, color="grey", linewidth=0.8)
        ax_e.set_ylim(0, max(110, 100 * by_gpu["efficiency"].max() * 1.05))
        for ax in (ax_t, ax_e):
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted(by_gpu["gpus"].unique()), labels=[str(n) for n in sorted(by_gpu["gpus"].unique())])
            ax.grid(alpha=0.3)
        ax_t.set_ylim(bottom=0)
        fig.legend(*ax_t.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=8,
                   frameon=False)
        if len(groups) > MAX_SERIES_PER_CHART:
            ax_t.text(0.99, 0.01, f"{len(groups) - MAX_SERIES_PER_CHART} more series in the table",
                      transform=ax_t.transAxes, ha="right", fontsize=8)
        path = out_dir / f"scaling_{_slug(gpu)}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        charts.append((f"{gpu}: throughput and scaling efficiency", path))
    return charts


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in str(text))
