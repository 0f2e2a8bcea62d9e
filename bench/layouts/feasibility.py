"""Why a layout cannot train a shape on a cluster: each rule returns one sentence or nothing, so the plan can print
it as a skip reason and the planner beside the layout. Pure: the shape, the layout and plain numbers in."""
from __future__ import annotations

from dataclasses import dataclass

from bench.layouts.layout import Layout


@dataclass(frozen=True)
class Job:
    """What the layout must carry: the sequences of one step and where it runs."""

    seq: int  # tokens per sequence
    global_batch: int  # sequences per optimizer step, all replicas together
    gpus_per_node: int
    cpu: bool = False  # CPU workers (the catalogue's `cpu`)
    tp_across_nodes: bool = False  # the cell asks for TP over the inter-node fabric (to measure a bad one)


def shape_reasons(layout: Layout, shape) -> list[str]:
    """The shape does not split this way: heads, key/value heads or layers."""
    out = []
    if shape.heads % layout.tp:
        out.append(f"{shape.heads} heads are not divisible by tp={layout.tp}")
    if shape.kv_heads % layout.tp:
        out.append(f"{shape.kv_heads} key/value heads are not divisible by tp={layout.tp}")
    chunks = layout.pp * layout.virtual_stages
    if shape.layers % chunks:
        out.append(f"{shape.layers} layers are not divisible by pp × virtual stages = {chunks}")
    return out


def batch_reasons(layout: Layout, job: Job) -> list[str]:
    """The batch does not split this way: replicas, micro-batches, context-parallel chunks."""
    out = []
    if job.global_batch % layout.dp:
        out.append(f"the global batch of {job.global_batch} sequences is not divisible by the {layout.dp} "
                   "data-parallel replicas (dp_replicate × dp_shard)")
    elif (job.global_batch // layout.dp) % layout.microbatches:
        out.append(f"{job.global_batch // layout.dp} sequences per replica are not divisible by "
                   f"{layout.microbatches} micro-batches")
    # Load-balanced ring attention gives each rank two chunks of the sequence (torchtitan's context_parallel).
    if layout.cp > 1 and job.seq % (2 * layout.cp):
        out.append(f"sequence length {job.seq} is not divisible by 2 × cp = {2 * layout.cp} (load-balanced chunks)")
    if layout.schedule == "interleaved" and layout.microbatches < layout.pp:
        out.append(f"interleaved 1F1B needs at least pp={layout.pp} micro-batches, got {layout.microbatches}")
    return out


def tp_crosses_nodes(layout: Layout, gpus_per_node: int) -> bool:
    """Whether a tp group spans nodes (tp is the mesh's innermost dimension: a group is consecutive ranks)."""
    return layout.tp > 1 and (layout.tp > gpus_per_node or gpus_per_node % layout.tp != 0)


def placement_reasons(layout: Layout, job: Job) -> list[str]:
    """Where the ranks land: TP across nodes, CP on CPU workers, the reserved expert degree."""
    out = []
    if tp_crosses_nodes(layout, job.gpus_per_node) and not job.tp_across_nodes:
        out.append(f"tp={layout.tp} would cross nodes of {job.gpus_per_node} GPUs (ask for it to measure the fabric)")
    if layout.cp > 1 and job.cpu:
        out.append("context parallelism runs on GPU cells only (ring attention over the GPU's attention kernels)")
    if layout.ep > 1:
        out.append("ep is reserved for mixture-of-experts shapes, which bench does not train yet")
    return out


def memory_reason(needed_bytes: float, capacity_bytes: float | None) -> str | None:
    if capacity_bytes is None or needed_bytes <= capacity_bytes:
        return None
    return f"needs {needed_bytes / 2**30:.1f} GiB per GPU, {capacity_bytes / 2**30:.1f} GiB usable"


def reasons(layout: Layout, shape, job: Job) -> list[str]:
    """Every reason, memory aside (the memory model needs a layout that splits)."""
    return shape_reasons(layout, shape) + batch_reasons(layout, job) + placement_reasons(layout, job)
