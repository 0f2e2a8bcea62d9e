"""MFU and energy of the GPU cells: how much of the GPU's dense peak the model's FLOPs use, beside the board power and
the energy per image the workers sampled (bench/analysis/mfu.py computes; this section picks and formats)."""
from __future__ import annotations

from bench.analysis.missing import is_missing, text
from bench.cells.label import cell_label
from bench.report.format import gpu_figures, num
from bench.report.sections.blocks import MAX_ROWS, Section, omitted, table, write_csv
from bench.report.sections.context import Context

TITLE = "MFU and energy per image (GPU cells)"
COLUMNS = ["cell", "images/sec per GPU", "GFLOP per image", "TFLOP/s per GPU", "peak (dense)", "MFU", "W/GPU",
           "J/img", "cell_id"]
CSV_COLUMNS = ["cell_id", "gpu", "gpus", "precision", "image_size", "samples_per_sec", "samples_per_sec_per_gpu",
               "flops_per_sample", "peak_format", "peak_tflops", "mfu", "mfu_why", "mean_watts_per_gpu",
               "joules_per_image"]


def build(ctx: Context) -> Section | None:
    from bench.facts.catalog import catalog

    if ctx.table.empty:
        return None
    gpu = ctx.table[ctx.table["gpu"] != "cpu"]
    if gpu.empty:
        return omitted("mfu", TITLE, "no GPU cell measured (MFU divides by a GPU's peak; a CPU cell has none).")
    gpu = gpu.sort_values(["gpu", "mfu"], ascending=[True, False], na_position="last", kind="stable")
    csv = write_csv(gpu[[c for c in CSV_COLUMNS if c in gpu]], ctx.out_dir, "mfu.csv")
    rows = []
    for _, r in gpu.head(MAX_ROWS).iterrows():
        achieved = r["samples_per_sec_per_gpu"] * r["flops_per_sample"] / 1e12
        rows.append({"cell": cell_label(r), "images/sec per GPU": f"{r['samples_per_sec_per_gpu']:,.1f}",
                     "GFLOP per image": num(r["flops_per_sample"] / 1e9, "{:.2f}", text(r["mfu_why"])),
                     "TFLOP/s per GPU": num(achieved, "{:,.1f}"),
                     "peak (dense)": text(r["peak_format"], missing=text(r["mfu_why"]))
                     + ("" if is_missing(r["peak_tflops"]) else f" {r['peak_tflops']:,.1f} TFLOP/s"),
                     **gpu_figures(r), "cell_id": r["cell_id"], "_bad": False})
    skus = catalog()
    sources = "; ".join(f"{g}: {skus[g].peak_source}" for g in dict.fromkeys(gpu["gpu"])
                        if g in skus and skus[g].peak_source)
    note = ("MFU = images/sec per GPU × model FLOPs per image ÷ the GPU's dense peak FLOP/s for the cell's "
            "precision. "
            "Model FLOPs per image = 3 × one forward pass's convolution and matmul FLOPs (forward, and a backward "
            "pass of twice that) at the cell's image size, counted from the model two independent ways "
            "(bench/data/model_flops.yaml, written by models/workloads/resnet50/flops.py); BatchNorm, activations, "
            "pooling and the optimizer are not counted. The peak is the data sheet's boost-clock figure without "
            "sparsity: fp16 and bf16 cells against their tensor-core peak, fp32 cells against TF32's where the GPU "
            "has TF32 (the workers leave TF32 on), else fp32's. W/GPU and J/img: NVML board power sampled over each "
            "measured window, the median over windows. Peaks: " + (sources or "none") + ".")
    return Section("mfu", TITLE, note,
                   tables=(table("mfu-table", COLUMNS, rows, csv=csv.name, total=len(gpu)),), files=(csv,))
