"""Tensor parallel on the transformer (DTensor): the fused q/k/v and gate/up rows reordered so each rank's column
shard is whole (`fused_row_orders`, `reorder_rows`, `order_for` to put them back) and the blocks parallelized
(`apply_tp`)."""
from __future__ import annotations

from typing import Any


def _row_order(torch, parts: list[int], tp: int):
    """Row indices that put shard r's slice of each part together: [part0_r, part1_r, ...] for r in 0..tp-1."""
    starts = [sum(parts[:i]) for i in range(len(parts))]
    order = []
    for r in range(tp):
        for start, size in zip(starts, parts):
            share = size // tp
            order.extend(range(start + r * share, start + (r + 1) * share))
    return torch.tensor(order)


def fused_row_orders(torch, shape, tp: int) -> dict[str, Any]:
    """Parameter-name suffix → the row order that makes a column shard whole: q/k/v per head group, gate/up."""
    out = {"attn.qkv": _row_order(torch, [shape.width, shape.kv_width, shape.kv_width], tp)}
    if shape.style == "llama":
        out["mlp.up"] = _row_order(torch, [shape.ffn, shape.ffn], tp)
    return out


def reorder_rows(torch, module, orders: dict[str, Any], *, inverse: bool = False) -> None:
    with torch.no_grad():
        for name, p in module.named_parameters():
            order = order_for(name, orders)
            if order is None:
                continue
            p.copy_(p[torch.argsort(order)] if inverse else p[order])


def order_for(name: str, orders: dict[str, Any]):
    for suffix, order in orders.items():
        if name.endswith((f"{suffix}.weight", f"{suffix}.bias")):
            return order
    return None


def apply_tp(torch, model, tp_mesh) -> None:
    """Tensor and sequence parallel on every block; the embedding's output split along the sequence, the head's
    input gathered (both stay replicated)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,
                                                   RowwiseParallel, SequenceParallel, parallelize_module)

    if getattr(model, "embed", None) is not None:
        parallelize_module(model.embed, tp_mesh, PrepareModuleOutput(
            output_layouts=Replicate(), desired_output_layouts=Shard(1), use_local_output=True))
    for block in model.blocks:
        parallelize_module(block, tp_mesh, {
            "attn_norm": SequenceParallel(),
            "attn": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "attn.qkv": ColwiseParallel(),
            "attn.out": RowwiseParallel(output_layouts=Shard(1)),
            "mlp_norm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.up": ColwiseParallel(),
            "mlp.down": RowwiseParallel(output_layouts=Shard(1)),
        })
    if getattr(model, "norm", None) is not None:
        parallelize_module(model.norm, tp_mesh, SequenceParallel(use_local_output=False))
        parallelize_module(model.head, tp_mesh, PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True))
