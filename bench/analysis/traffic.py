"""What one worker's training step is made of, per workload and engine, for the what-if model and the expected value:
the samples it computes (a micro-batch per accumulation step), the model's own gradient stream (models/gradients.py:
ResNet-50's 161 tensors, or a transformer's by layer part at the cell's sequence length) and how many times over a
ring allreduce of it the engine moves (models/registry.py ENGINES `traffic`). Pure: a cell or table row in."""
from __future__ import annotations

import math
from typing import Any, Mapping

from models.gradients import Gradient, resnet50_gradients, transformer_gradients
from models.registry import ENGINES, MODEL_WORKLOADS, is_transformer


def _int(v: Any, default: int) -> int:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return default
    return int(v)


def samples_per_step(row: Mapping[str, Any]) -> int:
    """Samples one worker computes per optimizer step: its micro-batch times the accumulation."""
    return _int(row.get("batch_per_gpu"), 1) * _int(row.get("grad_accum"), 1)


def gradients_of(row: Mapping[str, Any]) -> list[Gradient]:
    model = str(row.get("model") or "resnet50")
    if model in MODEL_WORKLOADS:  # a registered workload declares its own (models/registry.py)
        return list(MODEL_WORKLOADS[model]["gradients"](dict(row)))
    if is_transformer(model):
        from models.transformer_shapes import lookup

        shape = lookup(model)
        return transformer_gradients(shape, _int(row.get("seq_len"), shape.seq))
    return resnet50_gradients(_int(row.get("image_size"), 224))


def traffic_of(row: Mapping[str, Any]) -> float:
    return ENGINES.get(str(row.get("engine") or "horovod"), ENGINES["horovod"])["traffic"]


def step_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """whatif.predict's workload arguments for a cell: its gradient stream and its engine's traffic."""
    return {"gradients": gradients_of(row), "traffic": traffic_of(row)}
