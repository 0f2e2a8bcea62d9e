"""MFU (model FLOPs utilisation) of GPU cells, and the GPU power and energy their workers sampled, as pure functions
on DataFrames (no I/O; the catalogue and the FLOP table are packaged data, read through their modules).

    MFU = images/sec per GPU × model FLOPs per image ÷ the GPU's dense peak FLOP/s for the cell's precision

- images/sec per GPU: a record's (or a cell's median) global images/sec — Σ samples of all workers over the
  measured window (scaling.py's X) — divided by `gpus`, its worker count (one worker per GPU).
- model FLOPs per image (`flops_per_sample`): 3 × one forward pass's matmul and convolution FLOPs for the cell's
  model at its image size, counted from the model by models/workloads/resnet50/flops.py two independent ways
  (FlopCounterMode and a layer walk) into bench/data/model_flops.yaml. BatchNorm, ReLU, pooling, additions, the loss and
  the optimizer are not counted (the convention: they are no model FLOPs).
- the peak: the catalogue's dense (no 2:4 sparsity) per-GPU figure at the data sheet's boost clock, per number format
  (bench/data/catalog.yaml `peak_tflops`, each with its source). Which one a cell uses: `peak_format`.

A cell has no MFU — missing, with the reason in `mfu_why` — on a CPU (no peak), on a GPU the catalogue has no peak
for in that format (fp16 on a P40), or at an image size the table has no count for.

Power: GPU workers sample NVML board power over each measured window (models/gpu/power.py) and the record keeps
`power.mean_watts_per_gpu` and `power.joules_per_image` (all GPUs' energy over all images of the window) in its
JSON; `power_of` reads them, `cell_power` takes each cell's median over its windows.
"""
from __future__ import annotations

import json
import math
import numbers
from typing import Any, Callable, Iterable, Mapping

import pandas as pd

from bench.analysis.missing import is_missing

# What `bench export` adds to every record (derived, never imported: bench/imports/importer.py leaves them out).
EXPORT_COLUMNS = ("flops_per_sample", "peak_format", "peak_tflops", "mfu", "mean_watts_per_gpu", "joules_per_image")
POWER_COLUMNS = ("mean_watts_per_gpu", "joules_per_image")
_KEY = ["run_id", "cell_id", "job", "repeat"]


def peak_format(precision: str, peaks: Mapping[str, float]) -> str | None:
    """The number format whose peak a cell of `precision` is measured against, of those the GPU has (`peaks`).

    fp16 and bf16 cells run their convolutions and matmuls under autocast in that format on tensor cores: its peak.
    fp32 cells run them in TF32 on GPUs that have TF32 (Ampere and newer): the PyTorch worker sets
    torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 on every GPU (models/gpu/plan.py's
    DevicePlan.tf32, applied in models/workloads/resnet50/pytorch_worker.py; PyTorch's own defaults are True for cuDNN
    convolutions, which are nearly all of ResNet-50's FLOPs, and False for matmuls since 1.12), and TensorFlow/Keras
    leave TensorFloat-32 at TensorFlow's default, enabled (tf.config.experimental.enable_tensor_float_32_execution).
    So an fp32 cell is held to the TF32 peak where there is one, else to the CUDA cores' fp32 peak."""
    if precision == "fp32":
        fmt = "tf32" if "tf32" in peaks else "fp32"
    else:
        fmt = precision
    return fmt if fmt in peaks else None


def mfu(samples_per_sec_per_gpu: float, flops_per_sample: float, peak_tflops: float) -> float:
    """The fraction of the peak the model's FLOPs use: rate × FLOPs per image ÷ (peak TFLOP/s × 10¹²)."""
    return samples_per_sec_per_gpu * flops_per_sample / (peak_tflops * 1e12)


def catalogue_peaks() -> dict[str, dict[str, float]]:
    """gpu key → {format: dense TFLOP/s per GPU}, from the catalogue (empty for cpu)."""
    from bench.facts.catalog import catalog

    return {key: dict(sku.peak_tflops) for key, sku in catalog().items()}


def table_flops(model: str, image_size: int, seq_len: int | None = None) -> int | None:
    """Model FLOPs per sample: ResNet-50's per image from the packaged table; a transformer's per sequence by the
    6N + 12LHQT convention at the cell's sequence length (models/workloads/transformer/shapes.py,
    docs/transformer.md)."""
    from models.registry.workloads import MODEL_WORKLOADS, TRANSFORMER_WORKLOAD, is_transformer

    spec = MODEL_WORKLOADS.get(model) or (TRANSFORMER_WORKLOAD if is_transformer(model) else None)
    if spec is not None:  # a model-named workload's own count, where it declares one
        count = spec.get("flops_per_sample")
        return None if count is None else int(count({"model": model, "image_size": image_size, "seq_len": seq_len}))
    from bench.facts.model_flops import flops_per_image

    return flops_per_image(model, image_size)


def _why(gpu: str, precision: str, model: str, size, peaks: Mapping[str, Mapping[str, float]],
         flops: int | None) -> tuple[str | None, float | None, str | None]:
    """(format, peak TFLOP/s, why there is no MFU) for one kind of cell."""
    if gpu == "cpu":
        return None, None, "CPU: no peak"
    if gpu not in peaks:
        return None, None, f"{gpu}: not in the catalogue"
    if not isinstance(precision, str):
        return None, None, "no precision recorded"
    fmt = peak_format(precision, peaks[gpu])
    if fmt is None:
        return None, None, f"no {precision} peak for {gpu}"
    if flops is None:
        what = "no model or image size recorded" if model is None or size is None else \
            f"no FLOP count for {model} at {int(size) if float(size).is_integer() else size} px"
        return fmt, peaks[gpu][fmt], what
    return fmt, peaks[gpu][fmt], None


def with_mfu(df: pd.DataFrame, peaks: Mapping[str, Mapping[str, float]] | None = None,
             flops: Callable[[str, int, int | None], int | None] | None = None) -> pd.DataFrame:
    """Adds flops_per_sample, peak_format, peak_tflops, mfu and mfu_why (None where there is an MFU) to records or a
    cell summary (columns gpu, model, image_size, precision, samples_per_sec, gpus). `peaks` and `flops` default to
    the catalogue's and the packaged table's."""
    peaks = catalogue_peaks() if peaks is None else peaks
    flops = table_flops if flops is None else flops
    out = df.copy()
    if out.empty:
        for c, dtype in (("flops_per_sample", float), ("peak_format", object), ("peak_tflops", float),
                         ("mfu", float), ("mfu_why", object)):
            out[c] = pd.Series(dtype=dtype)
        return out
    kinds = {}
    absent = pd.Series(None, index=out.index, dtype=object)
    # Missing values as None (a NaN is not equal to itself: no dictionary key).
    keys = [tuple(None if is_missing(v) else v for v in k)
            for k in zip(*(out[c] if c in out else absent
                           for c in ("gpu", "precision", "model", "image_size", "seq_len")))]
    for key in set(keys):
        gpu, precision, model, size, seq_len = key
        count = flops(model, int(size), seq_len) if isinstance(model, str) and isinstance(size, numbers.Real) \
            else None
        kinds[key] = (count, *_why(gpu, precision, model, size, peaks, count))
    count = [kinds[k][0] for k in keys]
    out["flops_per_sample"] = pd.Series([math.nan if c is None else float(c) for c in count], index=out.index)
    out["peak_format"] = pd.Series([kinds[k][1] for k in keys], index=out.index, dtype=object)
    out["peak_tflops"] = pd.Series([math.nan if kinds[k][2] is None else kinds[k][2] for k in keys],
                                   index=out.index, dtype=float)
    why = [kinds[k][3] for k in keys]
    rate = pd.to_numeric(out["samples_per_sec"] if "samples_per_sec" in out else absent, errors="coerce") \
        / pd.to_numeric(out["gpus"] if "gpus" in out else absent, errors="coerce")
    value = mfu(rate, out["flops_per_sample"], out["peak_tflops"])
    has = pd.Series([w is None for w in why], index=out.index)
    out["mfu"] = value.where(has)
    out["mfu_why"] = pd.Series([w if w is not None else (None if pd.notna(v) else "no throughput")
                                for w, v in zip(why, out["mfu"])], index=out.index, dtype=object)
    return out


# --- power and energy --------------------------------------------------------------------------------------------
def _power_record(record_json: str | None) -> dict:
    """The `power` field of one record's JSON; {} for a record without one (CPU workers) or an unparsable document."""
    if not isinstance(record_json, str) or not record_json:
        return {}
    try:
        power = (json.loads(record_json) or {}).get("power") or {}
    except (ValueError, AttributeError):
        return {}
    return power if isinstance(power, dict) else {}


def power_of(record_json: str | None) -> tuple[float | None, float | None]:
    """(mean watts per GPU, joules per image) of one record's JSON; None for what was not sampled (CPU workers,
    no NVML or nvidia-smi, an unparsable document)."""
    power = _power_record(record_json)
    return _number(power.get("mean_watts_per_gpu")), _number(power.get("joules_per_image"))


def sm_clock_of(record_json: str | None) -> float | None:
    """The median SM clock (MHz) the record's window ran at, the slowest GPU's (models/gpu/window.py); None where
    it was not read (CPU workers, records from before the sampler read clocks)."""
    return _number(_power_record(record_json).get("sm_clock_mhz"))


def cell_sm_clock(ok: pd.DataFrame) -> dict[str, float]:
    """Per cell of ok records (with record_json): the median over its windows of their SM clocks, where read. Beside
    MFU, whose peak is the boost clock's: a GPU held at its power limit runs below it."""
    if ok.empty or "record_json" not in ok:
        return {}
    clocks = pd.DataFrame({"cell_id": ok["cell_id"].to_numpy(),
                           "mhz": [sm_clock_of(j) for j in ok["record_json"]]}).dropna()
    return clocks.groupby("cell_id")["mhz"].median().to_dict()


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def power_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """run_id, cell_id, job, repeat, mean_watts_per_gpu, joules_per_image of store rows that carry record_json."""
    out = []
    for r in rows:
        watts, jpi = power_of(r.get("record_json"))
        out.append({"run_id": r["run_id"], "cell_id": r["cell_id"], "job": r.get("job") or 0, "repeat": r["repeat"],
                    "mean_watts_per_gpu": watts, "joules_per_image": jpi})
    frame = pd.DataFrame(out, columns=[*_KEY, *POWER_COLUMNS])
    return frame.astype({c: float for c in POWER_COLUMNS})


def with_power(records: pd.DataFrame, power: pd.DataFrame | None = None) -> pd.DataFrame:
    """Adds mean_watts_per_gpu and joules_per_image to records: from `power` (power_frame's rows, matched on run,
    cell, job and repeat) or, without it, from the records' own record_json (only ok non-CPU records are read: a
    CPU worker samples no power)."""
    out = records.drop(columns=[c for c in POWER_COLUMNS if c in records])
    if out.empty:
        return out.assign(**{c: pd.Series(dtype=float) for c in POWER_COLUMNS})
    if power is None:
        if "record_json" not in out:
            return out.assign(**{c: math.nan for c in POWER_COLUMNS})
        read = (out["status"] == "ok") & (out["gpu"] != "cpu")
        parsed = [power_of(j) if r else (None, None) for j, r in zip(out["record_json"], read)]
        return out.assign(mean_watts_per_gpu=pd.Series([p[0] for p in parsed], index=out.index, dtype=float),
                          joules_per_image=pd.Series([p[1] for p in parsed], index=out.index, dtype=float))
    left = pd.DataFrame({"run_id": out["run_id"].to_numpy(), "cell_id": out["cell_id"].to_numpy(),
                         "job": out["job"].fillna(0).astype(int).to_numpy() if "job" in out else 0,
                         "repeat": out["repeat"].astype(int).to_numpy()})
    right = power.astype({"job": int, "repeat": int}).drop_duplicates(_KEY, keep="last")
    found = left.merge(right, on=_KEY, how="left")  # unique keys on the right: one row per record, in order
    return out.assign(**{c: found[c].to_numpy(dtype=float) for c in POWER_COLUMNS})


def cell_power(ok: pd.DataFrame) -> pd.DataFrame:
    """Per cell: the median over its measured windows of mean watts per GPU and of joules per image (NaN where no
    window was sampled)."""
    if ok.empty or not set(POWER_COLUMNS) <= set(ok.columns):
        return pd.DataFrame(columns=["cell_id", *POWER_COLUMNS]).astype({c: float for c in POWER_COLUMNS})
    return ok.groupby("cell_id", sort=False)[list(POWER_COLUMNS)].median().reset_index()


def with_cell_power(table: pd.DataFrame, ok: pd.DataFrame) -> pd.DataFrame:
    """The cell table with mean_watts_per_gpu and joules_per_image from its cells' windows (cell_power)."""
    base = table.drop(columns=[c for c in POWER_COLUMNS if c in table])
    if base.empty:
        return base.assign(**{c: pd.Series(dtype=float) for c in POWER_COLUMNS})
    return base.merge(cell_power(ok), on="cell_id", how="left")


def export_columns(records: pd.DataFrame) -> pd.DataFrame:
    """The store's records (with record_json) followed by EXPORT_COLUMNS, what `bench export` writes: per record,
    its MFU from its own rate, and the power and energy sampled over its window."""
    extra = with_mfu(with_power(records))
    return pd.concat([records.drop(columns=[c for c in EXPORT_COLUMNS if c in records]),
                      extra[list(EXPORT_COLUMNS)]], axis=1)
