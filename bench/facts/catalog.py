"""The GPU catalogue: Azure series → VM size, GPU model, GPUs per VM, fabric; it decides nodes and feasibility."""
from __future__ import annotations

import functools
import math
import re
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, field_validator

# The number formats a dense peak is given for (TFLOP/s per GPU, the data sheet's boost-clock figure, without 2:4
# sparsity): plain fp32 (CUDA cores), and the tensor-core formats tf32, fp16 and bf16 where the GPU has them.
PEAK_FORMATS = ("fp32", "tf32", "fp16", "bf16")


class GpuSku(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    vm_size: str
    gpu_model: str
    gpus_per_vm: int
    compute_capability: str | None
    memory_gb: float | None
    ib: bool
    fabric: str
    sriov: bool
    fp16: bool
    bf16: bool
    retired: str | None = None
    # Pay-as-you-go list price of one VM of this size (USD per hour) and the date it was read; null = unknown.
    price_per_hour_usd: float | None = None
    price_read: str | None = None
    # What nvidia-smi calls this SKU's GPU: a regular expression (case-insensitive, searched); null for cpu.
    smi_name: str | None = None
    # NVIDIA GPU feature discovery's `nvidia.com/gpu.product` values for this GPU (Kubernetes node affinity).
    gfd_products: tuple[str, ...] = ()
    # Dense peak throughput per number format (PEAK_FORMATS), TFLOP/s per GPU, and where the figures come from;
    # empty for cpu. bench/analysis/mfu.py picks the one a cell's precision runs at.
    peak_tflops: dict[str, float] = {}
    peak_source: str | None = None

    @field_validator("peak_tflops")
    @classmethod
    def _peaks(cls, v: dict[str, float]) -> dict[str, float]:
        for fmt, tflops in v.items():
            if fmt not in PEAK_FORMATS:
                raise ValueError(f"peak_tflops: {fmt!r} is not one of {', '.join(PEAK_FORMATS)}")
            if not tflops > 0:
                raise ValueError(f"peak_tflops.{fmt}: {tflops} is not a positive TFLOP/s figure")
        return v

    @property
    def is_cpu(self) -> bool:
        return self.key == "cpu"

    def is_this_gpu(self, smi_name: str) -> bool:
        """Whether a GPU nvidia-smi names `smi_name` is this SKU's."""
        return self.smi_name is not None and re.search(self.smi_name, smi_name, re.IGNORECASE) is not None

    def nodes_for(self, workers: int, per_node: int | None = None) -> int:
        """Nodes for `workers`: `per_node` each if given, else as many as one VM has GPUs."""
        return math.ceil(workers / (per_node or self.gpus_per_vm))


@functools.cache
def catalog() -> dict[str, GpuSku]:
    text = resources.files("bench").joinpath("data/catalog.yaml").read_text()
    return {key: GpuSku(key=key, **entry) for key, entry in yaml.safe_load(text).items()}


def sku_of_gpu(smi_name: str | None) -> str | None:
    """The catalogue key of the GPU nvidia-smi calls `smi_name`; None when no entry (or more than one) matches."""
    if not smi_name:
        return None
    keys = [key for key, sku in catalog().items() if sku.is_this_gpu(smi_name)]
    return keys[0] if len(keys) == 1 else None
