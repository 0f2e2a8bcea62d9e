"""A layout's step time: compute at a stated efficiency of the GPU's dense peak, the pipeline bubble, and each
dimension's traffic priced on the tier it crosses (bench/layouts/fabric.py), less what hides behind compute.

    step = compute of the busiest pipeline rank + bubble + Σ exposed(dimension)
    compute = FLOPs per rank / (peak · efficiency), FLOPs = 6N + 12·L·H·Q·T per token (shapes.py), × 4/3 with full
                                                                           activation checkpointing (one more forward)
The blocks are split evenly over the pipeline's pp × v stages; the output head (6·V·d per token) runs on the last
stage, split over tp (torchtitan's column-wise head) unless `head_over_tp` is False (the CPU worker keeps it whole on
every tp rank). With stages of S_j seconds per step, the busiest S_max sets the pace and the others' fill and drain
are the bubble: Σ_{j≠max} S_j / (v·m), Megatron-LM's (p − 1)/(v·m) of a step when the stages are equal.
Per dimension, per rank and step (bf16 activations, fp32 gradient reduction; torchtitan's mesh order, tp innermost,
then cp, dp_shard, dp_replicate, pp outermost, so a group stays inside a node when it and the degrees inside it fit):
- tp (sequence parallel): per layer and micro-batch 2 all-gathers and 2 reduce-scatters of the micro-batch's
  activations forward, as many backward (and forward again under full checkpointing); exposed whole (no async TP);
- cp (ring attention): key and value chunks passed around the ring, forward once and twice backward; hidden behind
  the attention's own FLOPs, the rest exposed;
- pp: one activation forward and one gradient backward per micro-batch and model chunk, and with a tied embedding
  (on the first and the last stage) one fp32 all-reduce of its gradient between the two per step; exposed whole;
- dp_shard (FSDP over dp_shard × cp): bf16 all-gather forward and again backward (once with pp: torchtitan keeps the
  blocks gathered between micro-batches), fp32 reduce-scatter of the gradients; prefetched behind compute, so
  only the part compute cannot cover is exposed, and never less than one block's share (the first gather, the last
  reduce-scatter);
- dp_replicate (DDP, or HSDP's replicas): fp32 ring allreduce of the shard's gradients behind the backward pass
  (2/3 of compute), never less than one block's share.
Ring collectives: (n − 1)/n · bytes / β + (n − 1) · α per all-gather or reduce-scatter, twice that for allreduce;
from a tier's measured 2-rank times where it has them (Tier.measured: a collective sweep), the ring's n − 1 steps
each priced as the 2-rank operation of 2·bytes/n, and k groups of a dimension sharing a node's one measured link
priced as k times the bytes (Fabric.sharing). Activations and gathered parameters are bf16 unless
`activation_bytes`/`param_bytes` say otherwise (4 for the fp32 CPU cells); gradients are reduced in fp32.
`overlap=False` exposes every dimension's traffic whole: where ranks outnumber the cores and the transport is
CPU-driven (Gloo on the CPU cells), no core is idle to move bytes behind compute.
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


def _collective_s(op: str, ranks: int, nbytes: float, tier: Tier) -> float:
    """One ring `op` (allgather, reduce_scatter, allreduce) of a full tensor of `nbytes` over `ranks` ranks."""
    if ranks <= 1:
        return 0.0
    curve = tier.measured.get(op)
    if curve:
        return (ranks - 1) * interpolate(curve, 2 * nbytes / ranks)
    passes = 2 if op == "allreduce" else 1
    return passes * ((ranks - 1) / ranks * nbytes / tier.beta_Bps + (ranks - 1) * tier.alpha_s)


def _send_s(nbytes: float, tier: Tier, op: str = "sendrecv") -> float:
    """One point-to-point send of `nbytes` (a pipeline's activation or gradient, a context-parallel chunk), from the
    measured `op` where the tier has it (a pipeline's: `pipeline_p2p`, the exchange as its schedule posts it), else
    sendrecv's, else α and β."""
    curve = tier.measured.get(op) or tier.measured.get("sendrecv")
    return interpolate(curve, nbytes) if curve else nbytes / tier.beta_Bps + tier.alpha_s


def interpolate(curve: tuple[tuple[int, float], ...], nbytes: float) -> float:
    """Seconds at `nbytes` on a measured (bytes, seconds) curve in size order: linear between the sizes around it,
    the smallest size's time below it, the last two sizes' line beyond the largest."""
    if nbytes <= curve[0][0] or len(curve) == 1:
        return curve[0][1]
    for (b0, t0), (b1, t1) in zip(curve, curve[1:]):
        if nbytes <= b1:
            return t0 + (t1 - t0) * (nbytes - b0) / (b1 - b0)
    (b0, t0), (b1, t1) = curve[-2], curve[-1]
    return t1 + max(0.0, (t1 - t0) / (b1 - b0)) * (nbytes - b1)


def _strides(layout: Layout) -> dict[str, int]:
    """Each dimension's stride in ranks (torchtitan's mesh: pp, dp_replicate, dp_shard, cp, tp; tp innermost)."""
    return {"tp": 1, "cp": layout.tp, "dp_shard": layout.tp * layout.cp,
            "dp_replicate": layout.tp * layout.cp * layout.dp_shard,
            "pp": layout.tp * layout.cp * layout.dp_shard * layout.dp_replicate}


def step_time(shape, layout: Layout, fabric: Fabric, *, seq: int, global_batch: int, peak_flops: float,
              efficiency: float, checkpointing: str = "none", head_over_tp: bool = True, activation_bytes: int = 2,
              param_bytes: int = 2, overlap: bool = True) -> StepTime:
    world = layout.world
    tokens_per_replica = global_batch * seq / layout.dp
    flops_per_token = shape.flops_per_token(seq)
    recompute = 4 / 3 if checkpointing == "full" else 1.0
    head_flops = 6 * shape.vocab * shape.width
    rate = peak_flops * efficiency
    # Seconds per step of a pipeline rank's blocks, and of the last rank's head on top.
    per_token = tokens_per_replica * recompute / layout.cp / rate
    blocks_s = (flops_per_token - head_flops) / (layout.tp * layout.pp) * per_token
    head_s = head_flops / (layout.tp if head_over_tp else 1) * per_token
    compute_s = blocks_s + head_s  # the last pipeline rank's: the busiest
    bubble_s = (layout.pp - 1) * blocks_s / (layout.virtual_stages * layout.microbatches)
    strides = _strides(layout)
    tiers = {d: fabric.tier(strides[d], getattr(layout, d)) for d in DIMENSIONS}
    # Groups that share one node's link at once each move their bytes over it: priced as that many times the bytes.
    shared = {d: fabric.sharing(strides[d], getattr(layout, d)) for d in DIMENSIONS}
    layers_per_rank = shape.layers / layout.pp
    # one step's activations, all micro-batches
    activation = tokens_per_replica / layout.cp * shape.width * activation_bytes
    traffic: dict[str, float] = {}

    # Per layer and micro-batch pass: 2 all-gathers and 2 reduce-scatters (forward, backward, the recomputed forward).
    tp_pairs = (2 + 2 + (2 if checkpointing == "full" else 0)) * layers_per_rank
    traffic["tp"] = tp_pairs * (_collective_s("allgather", layout.tp, activation * shared["tp"], tiers["tp"])
                                + _collective_s("reduce_scatter", layout.tp, activation * shared["tp"], tiers["tp"]))

    kv = tokens_per_replica / layout.cp * shape.kv_width * 2 * activation_bytes  # keys and values of the rank's chunk
    traffic["cp"] = (3 * layers_per_rank * (layout.cp - 1) * _send_s(kv * shared["cp"], tiers["cp"])
                     if layout.cp > 1 else 0.0)

    hops = 2 * layout.microbatches * layout.virtual_stages
    traffic["pp"] = (hops * _send_s(activation / layout.microbatches / layout.tp * shared["pp"], tiers["pp"],
                                    "pipeline_p2p")
                     if layout.pp > 1 else 0.0)
    if layout.pp > 1 and shape.tied:
        # A tied embedding lives on the first and the last stage: its fp32 gradient is all-reduced between the two
        # after the schedule, once a step, before the optimizer can run (nothing to hide it behind).
        tied = shape.vocab * shape.width * 4 / (layout.tp if head_over_tp else 1)
        traffic["pp"] += _collective_s("allreduce", 2, tied * shared["pp"], tiers["pp"])

    head = shape.vocab * shape.width * (1 if layout.pp > 1 or shape.tied else 2)
    stage_params = (shape.layers * (shape.block_matrices() + shape.block_vectors()) / layout.pp / layout.tp
                    + head / (layout.tp if head_over_tp else 1))
    gathers = 1 if layout.pp > 1 else 2
    # The shard group is dp_shard × cp ranks: priced on the tier of its outer part (dp_shard's).
    traffic["dp_shard"] = (_collective_s("allgather", layout.shard_group, stage_params * param_bytes
                                         * shared["dp_shard"], tiers["dp_shard"]) * gathers
                           + _collective_s("reduce_scatter", layout.shard_group, stage_params * 4 * shared["dp_shard"],
                                           tiers["dp_shard"]))
    shard_grad = stage_params * 4 / layout.shard_group
    traffic["dp_replicate"] = _collective_s("allreduce", layout.dp_replicate, shard_grad * shared["dp_replicate"],
                                            tiers["dp_replicate"])

    block_share = 1 / max(1.0, layers_per_rank)
    exposed = {
        "tp": traffic["tp"],
        "cp": max(0.0, traffic["cp"] - compute_s * _attention_fraction(shape, seq)),
        "pp": traffic["pp"],
        "dp_shard": max(traffic["dp_shard"] * block_share, traffic["dp_shard"] - compute_s),
        "dp_replicate": max(traffic["dp_replicate"] * block_share,
                            traffic["dp_replicate"] - BACKWARD_FRACTION * compute_s),
    }
    if not overlap:  # nothing hides behind compute
        exposed = dict(traffic)
    step_s = compute_s + bubble_s + sum(exposed.values())
    tokens_per_s_per_gpu = global_batch * seq / step_s / world
    return StepTime(compute_s=compute_s, bubble_s=bubble_s, exposed_s=exposed, traffic_s=traffic,
                    tiers={d: ("none" if getattr(layout, d) == 1 else
                               "intra" if tiers[d] is fabric.intra else "inter") for d in DIMENSIONS},
                    step_s=step_s, tokens_per_s_per_gpu=tokens_per_s_per_gpu,
                    mfu=tokens_per_s_per_gpu * flops_per_token / peak_flops)


def efficiency_for(tokens_per_s_at, target: float, low: float = 1e-3, high: float = 2.0) -> float:
    """The compute efficiency at which `tokens_per_s_at(efficiency)` (a prediction, rising with the efficiency) gives
    `target`: the anchor run's one number (bench/layouts/published.py, benchmarks/layout_prediction_shaped.py)."""
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if tokens_per_s_at(mid) < target else (low, mid)
    return (low + high) / 2


def _attention_fraction(shape, seq: int) -> float:
    """The share of a step's FLOPs that is attention scores and values (12·L·H·Q·T of the FLOPs per token)."""
    return 12 * shape.layers * shape.heads * shape.head_dim * seq / shape.flops_per_token(seq)
