"""A layout's step time: compute at a stated efficiency of the GPU's dense peak, the pipeline bubble, and each
dimension's traffic priced on the tier it crosses (bench/layouts/fabric.py), less what hides behind compute.

    step = compute · (1 + bubble) + Σ exposed(dimension)
    compute = FLOPs per rank / (peak · efficiency), FLOPs = 6N + 12·L·H·Q·T per token (shapes.py), × 4/3 with full
                                                                           activation checkpointing (one more forward)
Per dimension, per rank and step (bf16 activations, fp32 gradient reduction; torchtitan's mesh order, tp innermost,
then cp, dp_shard, dp_replicate, pp outermost, so a group stays inside a node when it and the degrees inside it fit):
- tp (sequence parallel): per layer and micro-batch 2 all-gathers and 2 reduce-scatters of the micro-batch's
  activations forward, as many backward (and forward again under full checkpointing); exposed whole (no async TP);
- cp (ring attention): key and value chunks passed around the ring, forward once and twice backward; hidden behind
  the attention's own FLOPs, the rest exposed;
- pp: one activation forward and one gradient backward per micro-batch and model chunk; exposed whole;
- dp_shard (FSDP over dp_shard × cp): bf16 all-gather forward and again backward (once with pp: torchtitan keeps the
  blocks gathered between micro-batches), fp32 reduce-scatter of the gradients; prefetched behind compute, so
  only the part compute cannot cover is exposed, and never less than one block's share (the first gather, the last
  reduce-scatter);
- dp_replicate (DDP, or HSDP's replicas): fp32 ring allreduce of the shard's gradients behind the backward pass
  (2/3 of compute), never less than one block's share.
Ring collectives: (n − 1)/n · bytes / β + (n − 1) · α per all-gather or reduce-scatter, twice that for allreduce.
Not modelled: traffic of two dimensions sharing a NIC at once, kernel slow-down beside communication, the optimizer
step and the host."""
from __future__ import annotations

from dataclasses import dataclass

from bench.layouts.fabric import Fabric, Tier
from bench.layouts.layout import Layout

BACKWARD_FRACTION = 2 / 3
DIMENSIONS = ("tp", "cp", "pp", "dp_shard", "dp_replicate")


@dataclass(frozen=True)
class StepTime:
    compute_s: float
    bubble_s: float
    exposed_s: dict[str, float]  # per dimension
    traffic_s: dict[str, float]  # per dimension, before overlap
    tiers: dict[str, str]  # per dimension: intra | inter | none
    step_s: float
    tokens_per_s_per_gpu: float
    mfu: float

    def as_dict(self) -> dict:
        return {"compute_s": self.compute_s, "bubble_s": self.bubble_s, "exposed_s": self.exposed_s,
                "traffic_s": self.traffic_s, "tiers": self.tiers, "step_s": self.step_s,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu}


def _gather_s(ranks: int, nbytes: float, tier: Tier) -> float:
    """One ring all-gather or reduce-scatter of a full tensor of `nbytes`."""
    if ranks <= 1:
        return 0.0
    return (ranks - 1) / ranks * nbytes / tier.beta_Bps + (ranks - 1) * tier.alpha_s


def _strides(layout: Layout) -> dict[str, int]:
    """Each dimension's stride in ranks (torchtitan's mesh: pp, dp_replicate, dp_shard, cp, tp; tp innermost)."""
    return {"tp": 1, "cp": layout.tp, "dp_shard": layout.tp * layout.cp,
            "dp_replicate": layout.tp * layout.cp * layout.dp_shard,
            "pp": layout.tp * layout.cp * layout.dp_shard * layout.dp_replicate}


def step_time(shape, layout: Layout, fabric: Fabric, *, seq: int, global_batch: int, peak_flops: float,
              efficiency: float, checkpointing: str = "none") -> StepTime:
    world = layout.world
    tokens_per_replica = global_batch * seq / layout.dp
    flops_per_token = shape.flops_per_token(seq)
    recompute = 4 / 3 if checkpointing == "full" else 1.0
    compute = flops_per_token * tokens_per_replica * recompute / (layout.tp * layout.cp * layout.pp)
    compute_s = compute / (peak_flops * efficiency)
    bubble_s = compute_s * layout.bubble
    strides = _strides(layout)
    tiers = {d: fabric.tier(strides[d], getattr(layout, d)) for d in DIMENSIONS}
    layers_per_rank = shape.layers / layout.pp
    activation = tokens_per_replica / layout.cp * shape.width * 2  # one step's activations, all micro-batches
    traffic: dict[str, float] = {}

    tp_collectives = (4 + 4 + (4 if checkpointing == "full" else 0)) * layers_per_rank
    traffic["tp"] = tp_collectives * _gather_s(layout.tp, activation, tiers["tp"])

    kv = tokens_per_replica / layout.cp * shape.kv_width * 2 * 2  # keys and values of the rank's chunk
    traffic["cp"] = 3 * layers_per_rank * (layout.cp - 1) * (kv / tiers["cp"].beta_Bps + tiers["cp"].alpha_s) \
        if layout.cp > 1 else 0.0

    hops = 2 * layout.microbatches * layout.virtual_stages
    traffic["pp"] = (hops * (activation / layout.microbatches / layout.tp / tiers["pp"].beta_Bps + tiers["pp"].alpha_s)
                     if layout.pp > 1 else 0.0)

    stage_params = (shape.layers * (shape.block_matrices() + shape.block_vectors()) / layout.pp
                    + shape.vocab * shape.width * (1 if layout.pp > 1 or shape.tied else 2)) / layout.tp
    gathers = 1 if layout.pp > 1 else 2
    # The shard group is dp_shard × cp ranks: priced on the tier of its outer part (dp_shard's).
    traffic["dp_shard"] = (_gather_s(layout.shard_group, stage_params * 2, tiers["dp_shard"]) * gathers
                           + _gather_s(layout.shard_group, stage_params * 4, tiers["dp_shard"]))
    shard_grad = stage_params * 4 / layout.shard_group
    traffic["dp_replicate"] = 2 * _gather_s(layout.dp_replicate, shard_grad, tiers["dp_replicate"])

    block_share = 1 / max(1.0, layers_per_rank)
    exposed = {
        "tp": traffic["tp"],
        "cp": max(0.0, traffic["cp"] - compute_s * _attention_fraction(shape, seq)),
        "pp": traffic["pp"],
        "dp_shard": max(traffic["dp_shard"] * block_share, traffic["dp_shard"] - compute_s),
        "dp_replicate": max(traffic["dp_replicate"] * block_share,
                            traffic["dp_replicate"] - BACKWARD_FRACTION * compute_s),
    }
    step_s = compute_s + bubble_s + sum(exposed.values())
    tokens_per_s_per_gpu = global_batch * seq / step_s / world
    return StepTime(compute_s=compute_s, bubble_s=bubble_s, exposed_s=exposed, traffic_s=traffic,
                    tiers={d: ("none" if getattr(layout, d) == 1 else
                               "intra" if tiers[d] is fabric.intra else "inter") for d in DIMENSIONS},
                    step_s=step_s, tokens_per_s_per_gpu=tokens_per_s_per_gpu,
                    mfu=tokens_per_s_per_gpu * flops_per_token / peak_flops)


def _attention_fraction(shape, seq: int) -> float:
    """The share of a step's FLOPs that is attention scores and values (12·L·H·Q·T of the FLOPs per token)."""
    return 12 * shape.layers * shape.heads * shape.head_dim * seq / shape.flops_per_token(seq)
