"""The GPU part of what-ran: which GPU, driver, CUDA, cuDNN and NCCL, its clocks and power limit, and the
numerics the worker chose (cuDNN autotuning, TF32, autocast dtype, loss scaling, channels-last).

`gpu_what_ran` is pure: it takes an `nvidia-smi --query-gpu=FACT_FIELDS` row (parsed by models/gpu/query.py, or
None where nvidia-smi is absent) and what torch reported, so it is tested with reconstructed outputs on a machine
with no GPU. `torch_gpu_facts` asks torch (CUDA calls: GPU path only).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

from models.gpu.plan import ComputePlan, DevicePlan
from models.gpu.query import parse_query_gpu

# Asked of nvidia-smi, in this order (--format=csv,noheader: values carry their units, "1980 MHz", "700.00 W").
FACT_FIELDS = ("uuid", "name", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
               "power.limit")
_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(MHz|W)?\s*$")


def _number(value: str | None) -> float | None:
    """"1980 MHz" → 1980.0, "700.00 W" → 700.0; None for a missing or unreadable value."""
    m = _NUMBER.match(value or "")
    return float(m.group(1)) if m else None


def smi_row_for(rows: list[dict[str, str | None]], uuid: str | None, index: int) -> dict[str, str | None] | None:
    """This process's GPU among nvidia-smi's rows: by UUID (CUDA_VISIBLE_DEVICES renumbers devices), else by index."""
    if uuid:
        for row in rows:
            if row.get("uuid") and row["uuid"].removeprefix("GPU-") == uuid.removeprefix("GPU-"):
                return row
        return None
    return rows[index] if 0 <= index < len(rows) else None


def gpu_what_ran(smi: dict[str, str | None] | None, facts: dict[str, Any], device: DevicePlan,
                 compute: ComputePlan) -> dict[str, Any]:
    """The record's `gpu` field. `facts` is what torch said (torch_gpu_facts); `smi` may be None."""
    smi = smi or {}
    clocks = {"clocks_sm_mhz": "clocks.sm", "clocks_mem_mhz": "clocks.mem", "clocks_max_sm_mhz": "clocks.max.sm",
              "clocks_max_mem_mhz": "clocks.max.mem"}
    return {
        "name": facts.get("name") or smi.get("name"),
        "uuid": facts.get("uuid") or smi.get("uuid"),
        "compute_capability": facts.get("compute_capability"),
        "driver": smi.get("driver_version"),
        "cuda": facts.get("cuda"),
        "cudnn": facts.get("cudnn"),
        "nccl": facts.get("nccl"),
        **{key: _number(smi.get(field)) for key, field in clocks.items()},
        "power_limit_w": _number(smi.get("power.limit")),
        "cudnn_benchmark": device.cudnn_benchmark,
        "tf32": device.tf32,
        "amp_dtype": compute.autocast_dtype,
        "grad_scaler": compute.grad_scaler,
        "channels_last_input": compute.input_channels_last,
        "channels_last_params": compute.param_channels_last,
    }


def gpu_record(torch, device, device_plan: DevicePlan, compute: ComputePlan) -> dict[str, Any]:
    """A worker's `gpu` field on `device` (CUDA calls: GPU path only): torch's facts, nvidia-smi's row of the same GPU
    (found by UUID), and the worker's own choices."""
    facts = torch_gpu_facts(torch, device)
    return gpu_what_ran(smi_row_for(query_smi(), facts["uuid"], device.index), facts, device_plan, compute)


def query_smi(fields=FACT_FIELDS, smi: str = "nvidia-smi") -> list[dict[str, str | None]]:
    """nvidia-smi's rows for `fields`; [] where it is absent or fails."""
    if not shutil.which(smi):
        return []
    try:
        out = subprocess.run([smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_query_gpu(out, fields)


def torch_gpu_facts(torch, device) -> dict[str, Any]:
    """What torch says about the GPU `device` (CUDA calls: only where CUDA is present)."""
    props = torch.cuda.get_device_properties(device)
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # noqa: BLE001 - a torch built without NCCL
        nccl = None
    uuid = getattr(props, "uuid", None)
    return {"name": props.name, "uuid": str(uuid) if uuid is not None else None,
            "compute_capability": f"{props.major}.{props.minor}", "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "nccl": nccl}
