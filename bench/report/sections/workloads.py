"""One section per workload that is not counted in images (the transformer; a registered workload), each in its own
unit: its scaling chart per GPU (a PNG like ResNet-50's), then, folded, the rate (global and per worker, tokens/s for
the transformer), the scaling efficiency against the series' smallest worker count, the expected value and verdict,
MFU and peak memory per rank, the sampled watts per GPU and joules per sample (a GPU's), and $ per million units
(tokens) at the VM's list price. The image sections never see these cells (context.py: other_table), so no
transformer figure is ever labelled images/sec."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.analysis.cost import cost_table
from bench.analysis.missing import MISSING, is_missing, text
from bench.cells.label import cell_label
from bench.cells.units import IMAGES, format_rate, quoted, unit_of_cell
from bench.report import charts as ch
from bench.report.format import num, pct
from bench.report.sections.blocks import Chart, Section, table, write_csv
from bench.report.sections.context import Context, vs_expected
from models.registry.workloads import TRANSFORMER_WORKLOAD, workload_spec

CSV_COLUMNS = ["cell_id", "gpu", "framework", "engine", "model", "seq_len", "gpus", "nodes", "precision",
               "batch_per_gpu", "grad_accum", "samples_per_sec", "units_per_sec", "units_per_sec_per_gpu",
               "ci_low_units", "ci_high_units", "speedup", "efficiency", "flops_per_sample", "mfu", "mfu_why",
               "peak_memory_bytes", "mean_watts_per_gpu", "joules_per_sample", "usd_per_hour", "usd_per_million_units"]


def build(ctx: Context) -> list[Section] | None:
    t = ctx.other_table
    if t.empty:
        return None
    specs = [workload_spec(str(r["model"]), str(r["framework"])) or {} for r in t.to_dict("records")]
    titles = [spec.get("title") or f"{r} cells" for spec, r in zip(specs, t["model"])]
    return [one(ctx, t[[x == title for x in titles]], title, spec)
            for title, spec in dict(zip(titles, specs)).items()]


def one(ctx: Context, t, title: str, spec: dict) -> Section:
    units = [unit_of_cell(r) or IMAGES for r in t.to_dict("records")]
    rate = units[0].rate if units else IMAGES.rate
    transformer = spec is TRANSFORMER_WORKLOAD
    sid = section_id(spec)
    per = pd.Series([u.per_sample for u in units], index=t.index, dtype=float)
    peaks = (ctx.other_ok.groupby("cell_id")["peak_memory_bytes"].max()
             if "peak_memory_bytes" in ctx.other_ok else pd.Series(dtype=float))
    t = t.assign(units_per_sec=t["samples_per_sec"] * per, units_per_sec_per_gpu=t["samples_per_sec_per_gpu"] * per,
                 ci_low_units=t["ci_low"] * per, ci_high_units=t["ci_high"] * per,
                 peak_memory_bytes=[peaks.get(c) for c in t["cell_id"]])
    # The worker's power record divides a window's energy by its samples, whatever a sample is (joules_per_image is
    # the store's name for it); the cost is the image cells' rule (VM list price x nodes) over this unit.
    if "joules_per_image" in t:
        t = t.assign(joules_per_sample=t["joules_per_image"])
    priced = cost_table(t[["cell_id", "gpu", "nodes", "samples_per_sec"]], ctx.prices).set_index("cell_id")
    t = t.assign(usd_per_hour=[priced["usd_per_hour"].get(c) for c in t["cell_id"]])
    t = t.assign(usd_per_million_units=t["usd_per_hour"] / (t["units_per_sec"] * 3600.0) * 1e6)
    sample = units[0].sample if units else "sample"
    per_million = f"$ per million {rate.removesuffix('/s')}"
    csv = write_csv(t[[c for c in CSV_COLUMNS if c in t]], ctx.out_dir, f"{sid}.csv")
    charts = scaling_pngs(t, per, rate, sid, ctx)
    verdicts = {e.cell_id: e for e in ctx.other_expected}
    rows = []
    for r, unit in zip(t.to_dict("records"), units):
        e = verdicts.get(r["cell_id"])
        rows.append({
            "cell": cell_label(r), rate: format_rate(r["samples_per_sec"], unit),
            "95% CI": MISSING if is_missing(r["ci_low"]) else
            f"{quoted(r['ci_low'], unit):,.0f}–{quoted(r['ci_high'], unit):,.0f} ({r['ci_over']})",
            f"{rate} per worker": format_rate(r["samples_per_sec_per_gpu"], unit),
            **scaled(r),
            "vs expected": vs_expected(e, int(r["gpus"])),
            "MFU": pct(r["mfu"], 1, none=text(r["mfu_why"])),
            "peak memory per rank": MISSING if is_missing(r["peak_memory_bytes"]) else
            f"{r['peak_memory_bytes'] / 2**20:,.0f} MiB",
            "W/GPU": num(r.get("mean_watts_per_gpu"), "{:,.0f}", "not sampled"),
            f"J/{sample}": num(r.get("joules_per_sample"), "{:,.3f}", "not sampled"),
            per_million: num(r.get("usd_per_million_units"), "${:,.4f}", "no price"),
            "cell_id": r["cell_id"], "_bad": bool(e is not None and e.below)})
    columns = ["cell", rate, "95% CI", f"{rate} per worker", "speedup", "efficiency", "vs expected", "MFU",
               "peak memory per rank", "W/GPU", f"J/{sample}", per_million, "cell_id"]
    note = TRANSFORMER_NOTE if transformer else (
        f"A sample is one {spec.get('sample_unit', 'sample')}; {rate} = samples/s × units per sample (Σ over every "
        "worker, over the measured window; models/registry/workloads.py's entry for the workload says what a sample "
        "is). Speedup and efficiency: against the same series' smallest worker count. MFU where the workload counts "
        "its FLOPs and the GPU has a peak.")
    # The headline above shows each cell's rate, interval, scaling and verdict: every column of it folds here.
    every = table(f"{sid}-table", columns, rows, csv=csv.name, total=len(t), open_=False, collapsible=True,
                  title=f"Every figure of each cell: {len(t)} cell{'s' if len(t) != 1 else ''}")
    return Section(sid, title, note, charts=tuple(Chart(c, p) for c, p in charts), tables=(every,),
                   files=(*(p for _, p in charts), csv))


def section_id(spec: dict) -> str:
    """The section's id, and its CSV's name (<id>.csv), for a workload's registry entry."""
    return "transformer" if spec is TRANSFORMER_WORKLOAD else f"workload-{spec.get('name', 'other')}"


def scaling_pngs(t: pd.DataFrame, per: pd.Series, rate: str, sid: str, ctx: Context) -> list[tuple[str, Path]]:
    """ResNet-50's scaling PNGs (charts.scaling_charts) for this workload's cells, in its unit (summary.md's charts;
    the page's hover chart is the headline's)."""
    quoted = t.assign(samples_per_sec=t["units_per_sec"], baseline_samples_per_sec=t["baseline_samples_per_sec"] * per,
                      **{c: t[c] * per for c in ("boot_low", "boot_high") if c in t})
    return ch.scaling_charts(quoted, ctx.out_dir, rate=f"{rate} (global, median; bars: 95% CI)", prefix=sid)


def scaled(r: dict) -> dict:
    """Speedup and efficiency against the series' 1-worker cell; a series without one (its smallest cell is its own
    baseline) says so rather than showing 1.00× and 100%."""
    base = r.get("baseline_gpus")
    if is_missing(base) or int(base) == int(r["gpus"]) and int(base) != 1:
        why = f"no 1-worker cell in its series (its smallest: {int(base)} workers)" if not is_missing(base) else MISSING
        return {"speedup": why, "efficiency": MISSING}
    return {"speedup": num(r.get("speedup"), "{:.2f}×"), "efficiency": pct(r.get("efficiency"))}


TRANSFORMER_NOTE = ("A sample is one sequence of seq_len tokens; tokens/s = sequences/s × seq_len (Σ over every"
                    " worker, over the measured window). Speedup and efficiency: against the same series' "
                    "smallest worker count, as for ResNet-50. MFU = tokens/s per GPU × FLOPs per token ÷ the "
                    "GPU's dense peak, with FLOPs per token = 6·N + 12·L·H·Q·T (PaLM's appendix B, as nanoGPT "
                    "and torchtitan count: N the parameters every token goes through; causal masking not "
                    "discounted, activation recomputation not counted; docs/transformer.md); a CPU has no peak."
                    " Peak memory: the largest rank's, over the measured windows (the CUDA allocator's peak on "
                    "a GPU, the process's peak resident set on a CPU). Every window's loss fell below the first"
                    " step's, or the worker refused it. W/GPU and J/sequence: the board power NVML sampled over"
                    " each measured window (a GPU's; a CPU has none), the energy over the window's sequences,"
                    " median over windows. $ per million tokens: the VM's list price × nodes ÷ tokens per hour, as"
                    " the cost ranking prices images ('no price' where the catalogue or --prices has none).")
