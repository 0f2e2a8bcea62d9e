"""Per-rank memory of a layout: the training state after sharding, the activations one micro-batch leaves for the
backward pass, and how many micro-batches a pipeline keeps in flight. Bytes; a rank's peak is its worst stage's.

What is counted (bf16 compute; fp32 master weights, gradients and AdamW's two moments, as torchtitan and bench's
transformer worker train):
- states, sharded (FSDP2/HSDP, and any layout with tp, pp or cp): 16 bytes a parameter over the shard group
  (dp_shard × cp), plus the bf16 working copy of the two blocks in flight (the one computing, the one prefetched)
  and of the root (embedding and head: FSDP2 keeps the root unsharded after forward);
- states, DDP (only dp_replicate): 4 (fp32 weights) + 4 (gradients) + 8 (AdamW) + 4 (DDP's gradient buckets, a
  second copy while gradient_as_bucket_view is off, the default) + 2 (autocast's bf16 weight copies, saved for the
  backward pass) = 22 bytes a parameter;
- activations per layer and token, what torch.compile's partitioner saves of a Llama block (matmul inputs and the
  attention kernel's outputs; norms, RoPE and SiLU recomputed): the block input, q with k and v, the attention
  output, the residual before the MLP, the gate and up projections = 4·width + 2·kv_width + 2·ffn elements of 2 bytes;
  under DDP's autocast the residual stream is fp32 (2 of those 4·width are 4 bytes). Divided by tp (sequence
  parallel) and cp (each rank holds its share of the sequence). Full checkpointing keeps only the block input per
  layer, plus one layer's full set while it is recomputed;
- the loss: bf16 logits and their gradient (4 bytes per vocabulary entry and token of the micro-batch; the head and
  loss compiled together), on the last stage, over tp (a vocabulary-parallel loss);
- in flight on the first stage: 1F1B min(p, m) micro-batches, interleaved (1 + (p − 1)/(p·v)) times that (Megatron-LM,
  Narayanan et al., 2021, section 2.2.2), GPipe all m.

Checked against the H200 store's Llama-1B-shaped cells (tests/test_layouts_memory.py, docs/layouts.md)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from bench.layouts.layout import Layout

CHECKPOINTING = ("none", "full")
SHARDED_BYTES_PER_PARAM = 4 + 4 + 8
DDP_BYTES_PER_PARAM = 4 + 4 + 8 + 4 + 2
BF16 = 2


@dataclass(frozen=True)
class RankMemory:
    states: float  # weights, gradients, optimizer state, working copies
    activations: float  # every micro-batch in flight, the recompute working set included
    loss: float  # logits and their gradient
    in_flight: float  # micro-batches whose activations are held at once

    @property
    def total(self) -> float:
        return self.states + self.activations + self.loss

    def as_dict(self) -> dict:
        return {"states_bytes": self.states, "activations_bytes": self.activations, "loss_bytes": self.loss,
                "in_flight_microbatches": self.in_flight, "total_bytes": self.total}


def is_sharded(layout: Layout) -> bool:
    """Whether the parameters are sharded (FSDP2 style): any degree but dp_replicate."""
    return layout.shard_group > 1 or layout.tp > 1 or layout.pp > 1


def in_flight(layout: Layout) -> float:
    p, m = layout.pp, layout.microbatches
    if p == 1:
        return 1.0
    if layout.schedule == "gpipe":
        return float(m)
    held = float(min(p, m))
    if layout.schedule == "interleaved":
        held *= 1 + (p - 1) / (p * layout.virtual_stages)
    return held


def layer_activation_bytes(shape, tokens: float, *, fp32_residual: bool) -> float:
    """One layer's saved activations for `tokens` tokens on one rank (no checkpointing)."""
    elements = 4 * shape.width + 2 * shape.kv_width + 2 * shape.ffn
    extra = 2 * shape.width * BF16 if fp32_residual else 0  # two residual tensors at 4 bytes instead of 2
    return tokens * (elements * BF16 + extra)


def rank_memory(shape, layout: Layout, *, seq: int, microbatch_seqs: int, checkpointing: str = "none",
                sharded: bool | None = None) -> RankMemory:
    """The worst stage's memory on one rank. `sharded` overrides the engine a data-parallel-only layout implies (a
    one-rank FSDP2 cell is sharded over one rank)."""
    if checkpointing not in CHECKPOINTING:
        raise ValueError(f"checkpointing {checkpointing!r} is not one of {', '.join(CHECKPOINTING)}")
    sharded = is_sharded(layout) if sharded is None else sharded
    blocks = math.ceil(shape.layers / layout.pp)
    block = shape.block_matrices() + shape.block_vectors()
    table = shape.vocab * shape.width
    ends = table if layout.pp > 1 or shape.tied else 2 * table  # a stage holds the embedding, the head, or both
    params = (blocks * block + ends) / layout.tp
    if sharded:
        working = BF16 * (2 * block + ends) / layout.tp
        states = SHARDED_BYTES_PER_PARAM * params / layout.shard_group + working
    else:
        states = DDP_BYTES_PER_PARAM * params
    tokens = microbatch_seqs * seq / (layout.tp * layout.cp)
    one_layer = layer_activation_bytes(shape, tokens, fp32_residual=not sharded)
    if checkpointing == "full":
        kept = tokens * shape.width * (4 if not sharded else BF16)
        per_microbatch = blocks * kept
        recompute = one_layer
    else:
        per_microbatch, recompute = blocks * one_layer, 0.0
    held = in_flight(layout)
    loss = 2 * BF16 * tokens * shape.vocab
    return RankMemory(states=states, activations=held * per_microbatch + recompute, loss=loss, in_flight=held)


def cell_rank_memory(shape, layout: Layout, *, seq: int, batch_per_gpu: int, checkpointing: bool) -> RankMemory:
    """rank_memory of a layout cell as the worker trains it: `batch_per_gpu` sequences per replica and step, split
    into the layout's m micro-batches under a pipeline (bench/planning/layout_rules.py); ValueError when they do not
    make m micro-batches."""
    microbatch = batch_per_gpu // layout.microbatches if layout.pp > 1 else batch_per_gpu
    if microbatch < 1:
        raise ValueError(f"{batch_per_gpu} sequences do not make {layout.microbatches} micro-batches")
    return rank_memory(shape, layout, seq=seq, microbatch_seqs=microbatch,
                       checkpointing="full" if checkpointing else "none")


def usable_bytes(memory_gb: float | None, reserve: float = 0.10) -> float | None:
    """What a GPU of the catalogue's `memory_gb` leaves the model: the catalogue's figure read as GiB (NVIDIA's
    "80GB" H100 reports 79.1 GiB to torch), less `reserve` for the CUDA context, NCCL's buffers and the caching
    allocator's fragmentation (an assumption, not measured here)."""
    if memory_gb is None:
        return None
    return memory_gb * 2**30 * (1 - reserve)
