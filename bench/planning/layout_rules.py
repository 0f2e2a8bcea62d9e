"""Why a cell's parallel layout (its `layout` key, docs/layouts.md) cannot run: the plan's skip reason, from
bench/layouts' own rules (feasibility.py and the memory model), so the plan and `bench model --layouts` refuse a
layout with the same sentence.

What a layout cell's batch means: `batch_per_gpu` sequences per data-parallel replica and micro-batch of
`grad_accum`; under a pipeline (pp > 1) the replica's `batch_per_gpu` sequences are split into the layout's `m`
micro-batches (torchtitan's local batch and pipeline micro-batches), so `m` must divide them. Ranks of one replica
(tp × pp of them) share its sequences."""
from __future__ import annotations

from typing import Any

from bench.facts.catalog import GpuSku
from bench.layouts.feasibility import Job, memory_reason, reasons
from bench.layouts.layout import Layout, LayoutError, parse_layout
from bench.layouts.memory import cell_rank_memory, is_sharded, usable_bytes
from models.registry.workloads import is_transformer


def cell_layout(cell: dict[str, Any]) -> Layout | None:
    """The cell's layout, None for a cell without one; LayoutError for one that is not a layout of its world."""
    text = cell.get("layout")
    if text is None:
        return None
    layout, _ = parse_layout(text, world=cell["gpus"])
    return layout


def layout_reason(cell: dict[str, Any], sku: GpuSku, nodes: int) -> str | None:
    """One line, or None when the cell names no layout or its layout can run here."""
    text = cell.get("layout")
    if text is None:
        return None
    model = cell.get("model") or "resnet50"
    if not is_transformer(model):
        return f"layout={text}: layouts train the transformer only (model={model})"
    try:
        layout = cell_layout(cell)
    except LayoutError as e:
        return str(e)
    from bench.layouts.shapes import shape_named

    shape = shape_named(model)
    seq = cell.get("seq_len") or shape.seq
    per_node = -(-cell["gpus"] // nodes)
    job = Job(seq=seq, global_batch=layout.dp * cell["batch_per_gpu"], gpus_per_node=per_node, cpu=sku.is_cpu,
              tp_across_nodes=bool(cell.get("tp_across_nodes")))
    why = reasons(layout, shape, job)  # first: what no engine can run (ep reserved, cp on a CPU, a heads split)
    if why:
        return f"layout={text}: {why[0]}"
    engine = "fsdp2" if is_sharded(layout) else "native"
    if cell["engine"] != engine:
        what = "shards the model" if engine == "fsdp2" else "only replicates the model (DDP)"
        return f"layout={text} {what}: it runs as engine={engine}, not engine={cell['engine']}"
    if sku.is_cpu:
        return None
    memory = cell_rank_memory(shape, layout, seq=seq, batch_per_gpu=cell["batch_per_gpu"],
                              checkpointing=bool(cell.get("activation_checkpointing")))
    too_big = memory_reason(memory.total, usable_bytes(sku.memory_gb))
    return f"layout={text} on {sku.key}: {too_big}" if too_big else None
