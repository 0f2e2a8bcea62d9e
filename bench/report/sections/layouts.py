"""Parallel layouts, measured beside the model (issue 66; docs/layouts.md "In the report"): one row per layout cell
(a transformer cell whose `layout` key is set) with its tokens/s and interval, tokens/s per GPU, MFU, the largest
rank's peak memory beside bench/layouts/memory.py's prediction, the pipeline bubble (stage 0's and the stages' mean)
beside (p − 1)/(v·m), and the time per step in each mesh dimension's collectives. bench/analysis/layout_cells.py
computes the figures from the records' `layout` and `peak_memory` (read by bench/report/layout_records.py); this
section picks and formats. Left out when the store has no layout cell."""
from __future__ import annotations

import pandas as pd

from bench.analysis.layout_cells import LayoutFigures, cell_layouts, in_mesh_order
from bench.analysis.missing import MISSING, is_missing, text
from bench.cells.label import cell_label
from bench.cells.label_parts import relative_labels, shared_title
from bench.cells.units import IMAGES, format_rate, format_value, unit_of_cell
from bench.report.format import pct
from bench.report.layout_text import bubble_text, memory_text, share_text
from bench.report.sections.blocks import Section, table, write_csv
from bench.report.sections.context import Context

TITLE = "Parallel layouts: measured beside the model"
CSV_NAME = "layouts.csv"


def build(ctx: Context) -> Section | None:
    t = ctx.other_table
    if t.empty or "layout" not in t or not t["layout"].notna().any():
        return None
    figures = cell_layouts(ctx.other_ok)
    t = t[t["layout"].notna() & t["cell_id"].isin(list(figures))]
    if t.empty:
        return None
    dims = dimensions(figures.values())
    records = t.to_dict("records")
    labels, shared = relative_labels([cell_label(r) for r in records])
    if len(records) == 1:  # one cell: its whole label, nothing shared to name (as the headline)
        labels, shared = [cell_label(records[0])], ""
    rows = [row(r, figures[r["cell_id"]], dims, label) for r, label in zip(records, labels)]
    csv = write_csv(pd.DataFrame([csv_row(r, figures[r["cell_id"]], dims) for r in records]), ctx.out_dir, CSV_NAME)
    rate = (unit_of_cell(records[0]) or IMAGES).rate
    columns = ["cell", "layout", "workers", rate, "95% CI", f"{rate} per GPU", "MFU", "peak memory per rank",
               "model's memory per rank", "bubble: stage 0", "bubble: mean", "bubble: (p−1)/m",
               *(collective_column(d) for d in dims), "cell_id"]
    title = shared_title(shared, len(rows))
    return Section("layouts", TITLE, NOTE, tables=(table("layouts-table", columns, rows, csv=csv.name, total=len(rows),
                                                         title=title[:1].upper() + title[1:] or None),),
                   files=(csv,))


def dimensions(figures) -> list[str]:
    """Every mesh dimension any cell timed, in the mesh's order (outermost first)."""
    return list(in_mesh_order(d for f in figures for d in f.collective_s))


def collective_column(dim: str) -> str:
    return f"{dim} collectives per step"


def interval(r: dict, unit) -> str:
    """The median's 95% bootstrap interval in the cell's unit (the headline's and `bench status`'s), over what."""
    low, high = r.get("boot_low"), r.get("boot_high")
    if is_missing(low) or is_missing(high):
        low, high = r.get("ci_low"), r.get("ci_high")
    if is_missing(low) or is_missing(high):
        return f"{MISSING} (no interval: {text(r.get('ci_over'), missing='no windows')})"
    return f"{format_value(low, unit)}–{format_value(high, unit)} ({r.get('ci_over')})"


def row(r: dict, f: LayoutFigures, dims: list[str], label: str) -> dict:
    unit = unit_of_cell(r) or IMAGES
    p = f.predicted_memory
    predicted = memory_text(p.total) if p.total is not None else (p.why or MISSING)
    return {"cell": label, "layout": f.layout, "workers": int(r["gpus"]),
            unit.rate: format_rate(r["samples_per_sec"], unit), "95% CI": interval(r, unit),
            f"{unit.rate} per GPU": format_rate(r["samples_per_sec_per_gpu"], unit),
            "MFU": pct(r.get("mfu"), 1, none=text(r.get("mfu_why"), missing="n/a")),
            "peak memory per rank": memory_text(f.peak_memory_bytes)
            + (f" ({f.peak_memory_kind})" if f.peak_memory_kind else ""),
            "model's memory per rank": predicted,
            "bubble: stage 0": bubble_text(f.bubble_stage0, f.pipelined),
            "bubble: mean": bubble_text(f.bubble_mean, f.pipelined),
            "bubble: (p−1)/m": bubble_text(f.bubble_predicted, f.pipelined),
            **{collective_column(d): share_text(f.collective_s.get(d), f.step_s) if d in f.collective_s
               else f"no {d} dimension" for d in dims},
            "cell_id": r["cell_id"], "_bad": False}


def csv_row(r: dict, f: LayoutFigures, dims: list[str]) -> dict:
    unit = unit_of_cell(r) or IMAGES
    per = unit.per_sample

    def scaled(v):
        return None if is_missing(v) else float(v) * per

    p = f.predicted_memory
    return {"cell_id": r["cell_id"], "layout": f.layout, "gpu": r.get("gpu"), "gpus": int(r["gpus"]),
            "nodes": r.get("nodes"), "model": r.get("model"), "seq_len": r.get("seq_len"),
            "batch_per_gpu": r.get("batch_per_gpu"), "precision": r.get("precision"), "rate_unit": unit.rate,
            "units_per_sec": scaled(r["samples_per_sec"]), "ci_low_units": scaled(r.get("boot_low")),
            "ci_high_units": scaled(r.get("boot_high")), "ci_over": r.get("ci_over"),
            "units_per_sec_per_gpu": scaled(r["samples_per_sec_per_gpu"]), "mfu": r.get("mfu"),
            "mfu_why": r.get("mfu_why"), "windows": f.windows, "peak_memory_bytes": f.peak_memory_bytes,
            "peak_memory_kind": f.peak_memory_kind, "predicted_memory_bytes": p.total,
            "predicted_states_bytes": p.states, "predicted_activations_bytes": p.activations,
            "predicted_loss_bytes": p.loss, "predicted_memory_why": p.why, "schedule": f.schedule,
            "microbatches": f.microbatches, "virtual_stages": f.virtual_stages, "bubble_stage0": f.bubble_stage0,
            "bubble_mean": f.bubble_mean, "bubble_predicted": f.bubble_predicted, "step_s": f.step_s,
            **{f"collective_s_{d}": f.collective_s.get(d) for d in dims}}


NOTE = ("One row per layout cell (a transformer cell whose `layout` key is set; docs/layouts.md), its latest complete "
        "run. Tokens/s: the median over its measured windows with the 95% bootstrap interval (as the headline's); "
        "per GPU: over the cell's workers; MFU as the transformer section computes it (a CPU has no peak). Peak "
        "memory per rank: the largest rank's over every window (the CUDA allocator's peak on a GPU, the process's "
        "peak resident set on a CPU). The model's memory per rank: bench/layouts/memory.py's prediction for the "
        "cell's shape, layout, sequence and micro-batch (the worst stage: sharded fp32 weights, gradients and AdamW "
        "moments, the bf16 working copies, the saved activations of the micro-batches in flight and the loss's "
        "logits, at bf16 compute); it counts no interpreter, library, CUDA context or allocator overhead, so on a "
        "CPU cell, whose resident set is mostly the Python process and torch, it is far below the measured peak. "
        "Bubble: a pipeline stage's idle time over its busy time inside the schedule, stage 0's and the mean over "
        "the stages, each the median over the windows, beside Megatron-LM's (p − 1)/m ((p − 1)/(v·m) interleaved), "
        "which assumes balanced stages (the tiny shape's last stage also holds the head and the loss). Collectives "
        "per step: the time inside each mesh dimension's collective calls and their waits (DDP's all-reduces: while "
        "any is in flight, launch to completion) (the mean over the ranks, the median over the windows) and its share "
        "of the median step.")
