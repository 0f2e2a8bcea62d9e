"""What one worker's training step is made of, per workload and engine, for the what-if model and the expected value:
the samples it computes (a micro-batch per accumulation step), the model's own gradient stream
(models/workloads/gradients.py: ResNet-50's 161 tensors, or a transformer's by layer part at the cell's sequence length)
and how many times over a ring allreduce of it the engine moves (models/registry/engines.py ENGINES `traffic`). Pure: a
cell or table row in."""
from __future__ import annotations

import math
from typing import Any, Mapping

from models.registry.engines import ENGINES
from models.registry.workloads import workload_spec
from models.workloads.gradients import Gradient, resnet50_gradients


def _int(v: Any, default: int) -> int:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return default
    return int(v)


def samples_per_step(row: Mapping[str, Any]) -> int:
    """Samples one worker computes per optimizer step: its micro-batch times the accumulation."""
    return _int(row.get("batch_per_gpu"), 1) * _int(row.get("grad_accum"), 1)


def gradients_of(row: Mapping[str, Any]) -> list[Gradient]:
    """The cell's gradient stream: its workload's own where it declares one (models/registry/workloads.py: the
    transformer's, a registered workload's), else ResNet-50's at the cell's image size."""
    spec = workload_spec(str(row.get("model") or "resnet50"), str(row.get("framework") or "pytorch")) or {}
    if "gradients" in spec:
        return list(spec["gradients"](dict(row)))
    return resnet50_gradients(_int(row.get("image_size"), 224))


def _engine(row: Mapping[str, Any]) -> Mapping[str, Any]:
    return ENGINES.get(str(row.get("engine") or "horovod"), ENGINES["horovod"])


def traffic_of(row: Mapping[str, Any]) -> float:
    return _engine(row)["traffic"]


def step_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """whatif.predict's workload arguments for a cell: its gradient stream and its engine's traffic, with the part of
    it the forward pass waits for."""
    return {"gradients": gradients_of(row), "traffic": traffic_of(row),
            "forward_traffic": _engine(row).get("forward_traffic", 0.0)}


def forward_units(gradients: list[Gradient]) -> list[int]:
    """The parameters of each unit FSDP2 gathers before a forward (bench's FSDP2 shards each block and the root):
    the gradients named blocks.N.* grouped per block, everything else (embeddings, final norm, head) the root's;
    in forward order, the root first."""
    units: dict[str, int] = {}
    for g in gradients:
        parts = g.name.split(".")
        key = ".".join(parts[:2]) if parts[0] == "blocks" and len(parts) > 2 else "root"
        units[key] = units.get(key, 0) + g.params
    root = units.pop("root", 0)
    blocks = sorted(units.items(), key=lambda kv: int(kv[0].split(".")[1]))
    return ([root] if root else []) + [n for _, n in blocks]
