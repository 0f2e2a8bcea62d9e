"""Throughput per precision (DeepLearningExamples style): one row per setting, the mixed-precision speedup over
fp32 and each precision's scaling."""
from __future__ import annotations

import pandas as pd

from bench.analysis.compare import precision_table
from bench.cells.label import framework_words
from bench.report.format import num
from bench.report.sections.blocks import MAX_ROWS, Section, omitted, table, write_csv
from bench.report.sections.context import Context

TITLE = "Throughput per precision (DeepLearningExamples style)"


def build(ctx: Context) -> Section | None:
    if ctx.table.empty:
        return None
    pt = precision_table(ctx.table)
    present = [p for p in ("fp32", "fp16", "bf16") if f"samples_per_sec_{p}" in pt]
    if pt.empty or len(present) < 2:
        return omitted("precision", TITLE, f"only {', '.join(present) or 'no'} precision measured (no "
                       "mixed-precision speedup to show).")
    csv = write_csv(pt, ctx.out_dir, "precision.csv")
    columns = ["gpu", "framework", "mpi", "IB", "batch/worker", "workers"]
    columns += [f"images/sec {p}" for p in present]
    columns += [f"{p} speedup over fp32" for p in ("fp16", "bf16") if p in present and "fp32" in present]
    columns += [f"{p} scaling" for p in present]
    rows = []
    for _, r in pt.head(MAX_ROWS).iterrows():
        row = {"gpu": r["gpu"], "framework": framework_words(r["framework"], r.get("engine")),
               "mpi": r["mpi"], "IB": "on" if r["ib"] else "off", "batch/worker": int(r["batch_per_gpu"]),
               "workers": int(r["gpus"]), "_bad": False}
        for p in present:
            row[f"images/sec {p}"] = num(r[f"samples_per_sec_{p}"])
            eff, sp, base = r[f"efficiency_{p}"], r[f"speedup_{p}"], r[f"baseline_gpus_{p}"]
            row[f"{p} scaling"] = "—" if pd.isna(eff) or (base == r["gpus"] and r["gpus"] > 1) else \
                f"{sp:.2f}× ({100 * eff:.0f}% vs {int(base)})"
        for p in ("fp16", "bf16"):
            if f"{p}_over_fp32" in r:
                row[f"{p} speedup over fp32"] = num(r[f"{p}_over_fp32"], "{:.2f}×")
        rows.append(row)
    return Section("precision", TITLE,
                   "One row per setting; mixed-precision speedup = images/sec in fp16/bf16 ÷ images/sec in fp32 of the "
                   "otherwise identical cell; scaling = speedup (efficiency) over the smallest worker count of the "
                   "same series.",
                   tables=(table("precision-table", columns, rows, csv=csv.name, total=len(pt)),), files=(csv,))
