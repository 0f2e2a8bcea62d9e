"""Scaling: throughput, speedup and efficiency per GPU (a chart each) and the main table, one folded block per GPU
(every figure of each cell: the headline above has the few that answer the question), so the page stays readable at
5 cells and at 5,000."""
from __future__ import annotations

from bench.report import charts as ch
from bench.report.format import COLUMNS, GPU_COLUMNS, table_rows
from bench.report.sections.blocks import Chart, Section, omitted, table, write_csv
from bench.report.sections.context import Context

CSV = "cells.csv"  # every row of the main table


def build(ctx: Context) -> Section | None:
    if ctx.records.empty:
        return None
    if ctx.table.empty:
        if not ctx.other_table.empty:  # only other workloads' cells (a transformer's): their own sections show them
            return omitted("scaling", "Scaling (ResNet-50, img/s)", "no image cell has a complete successful run in "
                           "this store; the other workloads' cells are in their own sections.")
        which = "training cell" if not ctx.sweeps.empty else "cell"  # collective cells have their own section
        return omitted("scaling", "Scaling", f"no {which} has a complete successful run yet"
                       + (" (see the failed cells below)." if not ctx.failures.empty else "."))
    charts = ch.scaling_charts(ctx.table, ctx.out_dir, ctx.references)
    rows = table_rows(ctx.table)
    csv = write_csv(ctx.table, ctx.out_dir, CSV)
    gpus = list(dict.fromkeys(r["gpu"] for r in rows))
    tables = []
    for i, g in enumerate(gpus):
        grows = [r for r in rows if r["gpu"] == g]
        columns = COLUMNS if g == "cpu" else GPU_COLUMNS  # a GPU's block shows MFU, W/GPU and J/img
        tables.append(table("scaling-table" if i == 0 else f"scaling-table-{i + 1}", columns, grows, csv=csv.name,
                            title=f"{g}: {len(grows)} cell{'s' if len(grows) != 1 else ''}", open_=False,
                            collapsible=True))
    return Section("scaling", "Scaling: throughput, speedup and efficiency",
                   "Per GPU: throughput vs workers with the ideal line (dashed, from the series' baseline) and "
                   "efficiency vs workers. Bars: bootstrap 95% CI over job-level repeats (over windows when a cell "
                   "ran one job). A GPU's table adds MFU (model FLOPs per second per GPU ÷ the data sheet's dense "
                   "peak for the cell's precision: see the MFU section), the mean board power per GPU and the energy "
                   "per image its workers sampled (medians over the windows)."
                   + (" Dotted hollow diamonds: published references (imported, not measured here)."
                      if not ctx.references.empty else ""),
                   charts=tuple(Chart(t, p) for t, p in charts), tables=tuple(tables),
                   files=(*(p for _, p in charts), csv))
