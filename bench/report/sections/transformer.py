"""The transformer cells in their own unit: tokens/s (global and per worker), the scaling efficiency against the
series' smallest worker count, the expected value and verdict, MFU and peak memory per rank. The image sections
never see these cells (context.py: other_table), so no transformer figure is ever labelled images/sec."""
from __future__ import annotations

import pandas as pd

from bench.analysis.missing import MISSING, is_missing, text
from bench.cells.label import cell_label
from bench.cells.units import IMAGES, format_rate, quoted, unit_of_cell
from bench.report.format import num, pct
from bench.report.sections.blocks import Section, table, write_csv
from bench.report.sections.context import Context, vs_expected

TITLE = "Transformer language models (tokens/s)"
COLUMNS = ["cell", "tokens/s", "95% CI", "tokens/s per worker", "speedup", "efficiency", "vs expected", "MFU",
           "peak memory per rank", "cell_id"]
CSV_COLUMNS = ["cell_id", "gpu", "framework", "engine", "model", "seq_len", "gpus", "nodes", "precision",
               "batch_per_gpu", "grad_accum", "samples_per_sec", "tokens_per_sec", "tokens_per_sec_per_gpu",
               "ci_low_tokens", "ci_high_tokens", "speedup", "efficiency", "flops_per_sample", "mfu", "mfu_why",
               "peak_memory_bytes"]


def build(ctx: Context) -> Section | None:
    t = ctx.other_table
    if t.empty:
        return None
    units = [unit_of_cell(r) or IMAGES for r in t.to_dict("records")]
    per = pd.Series([u.per_sample for u in units], index=t.index, dtype=float)
    peaks = (ctx.other_ok.groupby("cell_id")["peak_memory_bytes"].max()
             if "peak_memory_bytes" in ctx.other_ok else pd.Series(dtype=float))
    t = t.assign(tokens_per_sec=t["samples_per_sec"] * per, tokens_per_sec_per_gpu=t["samples_per_sec_per_gpu"] * per,
                 ci_low_tokens=t["ci_low"] * per, ci_high_tokens=t["ci_high"] * per,
                 peak_memory_bytes=[peaks.get(c) for c in t["cell_id"]])
    csv = write_csv(t[[c for c in CSV_COLUMNS if c in t]], ctx.out_dir, "transformer.csv")
    verdicts = {e.cell_id: e for e in ctx.other_expected}
    rows = []
    for r, unit in zip(t.to_dict("records"), units):
        e = verdicts.get(r["cell_id"])
        rows.append({
            "cell": cell_label(r), "tokens/s": format_rate(r["samples_per_sec"], unit),
            "95% CI": MISSING if is_missing(r["ci_low"]) else
            f"{quoted(r['ci_low'], unit):,.0f}–{quoted(r['ci_high'], unit):,.0f} ({r['ci_over']})",
            "tokens/s per worker": format_rate(r["samples_per_sec_per_gpu"], unit),
            "speedup": num(r.get("speedup"), "{:.2f}×"), "efficiency": pct(r.get("efficiency")),
            "vs expected": vs_expected(e, int(r["gpus"])),
            "MFU": pct(r["mfu"], 1, none=text(r["mfu_why"])),
            "peak memory per rank": MISSING if is_missing(r["peak_memory_bytes"]) else
            f"{r['peak_memory_bytes'] / 2**20:,.0f} MiB",
            "cell_id": r["cell_id"], "_bad": bool(e is not None and e.below)})
    note = ("A sample is one sequence of seq_len tokens; tokens/s = sequences/s × seq_len (Σ over every worker, over "
            "the measured window). Speedup and efficiency: against the same series' smallest worker count, as for "
            "ResNet-50. MFU = tokens/s per GPU × FLOPs per token ÷ the GPU's dense peak, with FLOPs per token = "
            "6·N + 12·L·H·Q·T (PaLM's appendix B, as nanoGPT and torchtitan count: N the parameters every token "
            "goes through; causal masking not discounted, activation recomputation not counted; "
            "docs/transformer.md); a CPU has no peak. Peak memory: the largest rank's, over the measured windows "
            "(the CUDA allocator's peak on a GPU, the process's peak resident set on a CPU). Every window's loss "
            "fell below the first step's, or the worker refused it.")
    return Section("transformer", TITLE, note,
                   tables=(table("transformer-table", COLUMNS, rows, csv=csv.name, total=len(t)),), files=(csv,))
