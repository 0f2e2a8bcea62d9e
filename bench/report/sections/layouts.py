"""Parallel layouts, measured beside the model (issue 66; docs/layouts.md "In the report"): one row per layout cell
(a transformer cell whose `layout` key is set) with its tokens/s and interval, tokens/s per GPU, MFU, the largest
rank's peak memory beside bench/layouts/memory.py's prediction, the pipeline bubble (stage 0's and the stages' mean)
beside (p − 1)/(v·m), and the time per step in each mesh dimension's collectives. bench/analysis/layout_cells.py
computes the figures from the records' `layout` and `peak_memory` (read by bench/report/layout_records.py); this
section picks and formats. Left out when the store has no layout cell."""
from __future__ import annotations

import pandas as pd

from bench.analysis.layout_cells import LayoutFigures, cell_layouts, in_mesh_order
from bench.analysis.layout_prediction import TWIN, LayoutPrediction, predict
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
    every = t.to_dict("records")  # the 1-worker cells too: they anchor the predictions
    t = t[t["layout"].notna() & t["cell_id"].isin(list(figures))]
    if t.empty:
        return None
    dims = dimensions(figures.values())
    records = t.to_dict("records")
    predicted = predictions(every, figures, ctx.sweeps.to_dict("records"))
    labels, shared = relative_labels([cell_label(r) for r in records])
    if len(records) == 1:  # one cell: its whole label, nothing shared to name (as the headline)
        labels, shared = [cell_label(records[0])], ""
    rows = [row(r, figures[r["cell_id"]], dims, label, predicted[r["cell_id"]]) for r, label in zip(records, labels)]
    csv = write_csv(pd.DataFrame([csv_row(r, figures[r["cell_id"]], dims, predicted[r["cell_id"]]) for r in records]),
                    ctx.out_dir, CSV_NAME)
    rate = (unit_of_cell(records[0]) or IMAGES).rate
    columns = ["cell", "layout", "workers", rate, "95% CI", f"{rate} per GPU", f"model's {rate} per GPU",
               "the model's anchor", "MFU", "peak memory per rank",
               "model's memory per rank", "bubble: stage 0", "bubble: mean", "bubble: (p−1)/m",
               *(collective_column(d) for d in dims), "cell_id"]
    title = shared_title(shared, len(rows))
    return Section("layouts", TITLE, NOTE, tables=(table("layouts-table", columns, rows, csv=csv.name, total=len(rows),
                                                         title=title[:1].upper() + title[1:] or None),),
                   files=(csv,))


def predictions(cells: list[dict], figures: dict[str, LayoutFigures],
                sweeps: list[dict]) -> dict[str, LayoutPrediction]:
    """Each layout cell's prediction (bench/analysis/layout_prediction.py) from the report's cells, each with its
    ranks' share of the cores, and the sweeps."""
    shared = [{**c, "core_share": f.core_share, "core_share_why": f.core_share_why} if (f := figures.get(c["cell_id"]))
              else c for c in cells]
    return {c["cell_id"]: predict(c, shared, sweeps) for c in shared if c["cell_id"] in figures}


def predicted_text(p: LayoutPrediction, measured: float, unit) -> str:
    """The predicted rate per GPU and how far it is from the measured one; why not where there is none."""
    if p.tokens_per_s_per_gpu is None:
        return f"{MISSING} ({p.why})"
    predicted = p.tokens_per_s_per_gpu / unit.per_sample  # per sample, as the measured rates are stored
    off = f" ({100 * (predicted / measured - 1):+.0f}% vs measured)" if measured and not is_missing(measured) else ""
    return format_rate(predicted, unit) + off


def anchor_text(p: LayoutPrediction) -> str:
    """What the prediction's compute stands on: the one-node twin, or the 1-worker cell's FLOP/s alone."""
    if p.anchor is None:
        return MISSING
    share = f"; {p.core_share:.2f} of a core per rank" if p.core_share is not None and p.core_share < 1 else ""
    if p.anchor == TWIN:
        return f"twin `{p.twin_layout}` on one node ({p.twin_cell_id}){share}"
    return f"FLOP/s alone of the 1-worker cell {p.base_cell_id}: no layout overhead, reads high{share}"


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


def row(r: dict, f: LayoutFigures, dims: list[str], label: str, prediction: LayoutPrediction) -> dict:
    unit = unit_of_cell(r) or IMAGES
    p = f.predicted_memory
    predicted = memory_text(p.total) if p.total is not None else (p.why or MISSING)
    return {"cell": label, "layout": f.layout, "workers": int(r["gpus"]),
            unit.rate: format_rate(r["samples_per_sec"], unit), "95% CI": interval(r, unit),
            f"{unit.rate} per GPU": format_rate(r["samples_per_sec_per_gpu"], unit),
            f"model's {unit.rate} per GPU": predicted_text(prediction, r["samples_per_sec_per_gpu"], unit),
            "the model's anchor": anchor_text(prediction),
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


def csv_row(r: dict, f: LayoutFigures, dims: list[str], prediction: LayoutPrediction) -> dict:
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
            "units_per_sec_per_gpu": scaled(r["samples_per_sec_per_gpu"]),
            "predicted_units_per_sec_per_gpu": prediction.tokens_per_s_per_gpu, "prediction_anchor": prediction.anchor,
            "prediction_base_cell_id": prediction.base_cell_id, "prediction_twin_cell_id": prediction.twin_cell_id,
            "prediction_core_share": prediction.core_share, "prediction_why": prediction.why, "mfu": r.get("mfu"),
            "mfu_why": r.get("mfu_why"), "windows": f.windows, "peak_memory_bytes": f.peak_memory_bytes,
            "peak_memory_kind": f.peak_memory_kind, "predicted_memory_bytes": p.total,
            "predicted_states_bytes": p.states, "predicted_activations_bytes": p.activations,
            "predicted_loss_bytes": p.loss, "predicted_memory_why": p.why, "schedule": f.schedule,
            "microbatches": f.microbatches, "virtual_stages": f.virtual_stages, "bubble_stage0": f.bubble_stage0,
            "bubble_mean": f.bubble_mean, "bubble_predicted": f.bubble_predicted, "step_s": f.step_s,
            **{f"collective_s_{d}": f.collective_s.get(d) for d in dims}}


NOTE = ("One row per layout cell (a transformer cell whose `layout` key is set; docs/layouts.md), its latest complete "
        "run. Tokens/s: the median over its measured windows with the 95% bootstrap interval (as the headline's); "
        "per GPU: over the cell's workers. The model's tokens/s per GPU: bench/analysis/layout_prediction.py's "
        "prediction from the store's other cells, nothing fitted to the cell (docs/layouts.md \"In the report\"): "
        "compute anchored on the same layout run on one node (its twin: the efficiency at which the model gives it "
        "its rate), or for a one-node cell on the 1-worker cell's FLOP/s alone, which leaves out what the layout "
        "costs in compute and so reads high; each rank at its share of the cores of the machine the ranks share "
        "(their records' machine ids), nothing hidden behind compute where ranks outnumber cores; the traffic priced "
        "on the store's 2-rank collective sweeps inside a node and across two (a catalogue GPU without sweeps: the "
        "catalogue's links), with how far it is from the measured rate. MFU as the transformer section computes it "
        "(a CPU has no peak). Peak "
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
