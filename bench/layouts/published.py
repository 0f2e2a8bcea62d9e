"""The published tables the layout model is checked against, and its predictions beside them.

The protocol (issue 66): from each table's smallest run, predict its larger runs. The smallest run fixes one number,
the compute efficiency (the fraction of the bf16 dense peak that run's compute went at, solved so the model gives its
published tokens/s per GPU); the larger runs are then predicted with the catalogue's links (bench/analysis/whatif.py)
and nothing else fitted. The model's constants are never tuned to these figures: a miss is printed as a miss
(docs/layouts.md).

Sources:
- torchtitan: benchmarks/llama3_h100_202412_torchtitan.md in pytorch/torchtitan (H100 SXM with 96 GB HBM2e at 500 W,
  8 per host, 400 Gb/s RDMA per GPU; Llama 3.1; eager rows; sequence 8,192, torchtitan's default). Table 1 and 3:
  8B FSDP, local batch 2, selective checkpointing; table 5: 405B, FSDP 8 × TP 8 × PP 8, local batch 32, global 256,
  full checkpointing. ASSUMED for table 5 (the table does not say): micro-batches = the PP degree (torchtitan's
  default when pipeline_parallel_microbatches is unset, in its pipelining utilities of the time) and two model
  chunks per rank for the interleaved schedule (its default for looped schedules); 126 layers over 16 chunks split
  unevenly there (the planner itself refuses an uneven split).
- NVIDIA dgxc-benchmarking (H100 SXM, bf16, sequence 8,192), as the issue quotes them: 8B TP1 PP1 CP2, 70B TP4 PP4
  CP2 VP5, 405B TP8 PP9 CP2 VP7. ASSUMED (not in the quoted figures): one sequence a micro-batch, and a global batch
  that grows with the GPUs (128 sequences per 8 GPUs for 8B, per 64 for 70B, 256 per 576 for 405B), so the
  micro-batches per replica and the bubble stay the same; Megatron's distributed optimizer is modelled as dp_shard.
"""
from __future__ import annotations

from dataclasses import dataclass

from bench.layouts.fabric import fabric_of
from bench.layouts.layout import Layout
from bench.layouts.shapes import shape_named
from bench.layouts.steptime import efficiency_for, step_time


@dataclass(frozen=True)
class Run:
    gpus: int
    layout: Layout
    global_batch: int
    published: float  # tokens/s per GPU


@dataclass(frozen=True)
class Table:
    name: str
    source: str
    model: str
    checkpointing: str
    runs: tuple[Run, ...]  # the first is the anchor
    tolerance: float  # the target, as a fraction


def _pp(dp_shard, tp, pp, cp, v, m, schedule="interleaved") -> Layout:
    return Layout(dp_shard=dp_shard, tp=tp, pp=pp, cp=cp, schedule=schedule, virtual_stages=v, microbatches=m)


TORCHTITAN = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md"
DGXC = "NVIDIA dgxc-benchmarking, H100 SXM bf16 (figures as quoted in issue 66)"
TABLES: tuple[Table, ...] = (
    Table("torchtitan 8B FSDP", TORCHTITAN, "llama3-8b", "none", (
        Run(8, Layout(dp_shard=8), 16, 5762), Run(128, Layout(dp_shard=128), 256, 5605)), 0.05),
    Table("dgxc 8B TP1 PP1 CP2", DGXC, "llama3-8b", "none", (
        Run(8, Layout(dp_shard=4, cp=2), 128, 10153), Run(128, Layout(dp_shard=64, cp=2), 2048, 10006)), 0.05),
    Table("dgxc 70B TP4 PP4 CP2 VP5", DGXC, "llama3-70b", "none", (
        Run(64, _pp(2, 4, 4, 2, 5, 64), 128, 1113), Run(2048, _pp(64, 4, 4, 2, 5, 64), 4096, 1098)), 0.05),
    Table("dgxc 405B TP8 PP9 CP2 VP7", DGXC, "llama3-405b", "none", (
        Run(576, _pp(4, 8, 9, 2, 7, 64), 256, 208), Run(2304, _pp(16, 8, 9, 2, 7, 64), 1024, 203)), 0.05),
    Table("torchtitan 405B 1F1B → interleaved", TORCHTITAN, "llama3-405b", "full", (
        Run(512, _pp(8, 8, 8, 1, 1, 8, "1f1b"), 256, 100), Run(512, _pp(8, 8, 8, 1, 2, 8), 256, 128)), 0.10),
)
SEQ, SKU, GPUS_PER_NODE = 8192, "H100", 8


def predict(table: Table, run: Run, efficiency: float) -> float:
    from bench.facts.catalog import catalog

    peak = catalog()[SKU].peak_tflops["bf16"] * 1e12
    fabric = fabric_of(SKU, GPUS_PER_NODE, "ib")
    step = step_time(shape_named(table.model), run.layout, fabric, seq=SEQ, global_batch=run.global_batch,
                     peak_flops=peak, efficiency=efficiency, checkpointing=table.checkpointing)
    return step.tokens_per_s_per_gpu


def anchor_efficiency(table: Table) -> float:
    """The efficiency at which the model gives the anchor run its published figure."""
    anchor = table.runs[0]
    return efficiency_for(lambda e: predict(table, anchor, e), anchor.published)


def checks() -> list[dict]:
    """Per table, its anchor's efficiency and each larger run's prediction beside its published figure."""
    out = []
    for table in TABLES:
        efficiency = anchor_efficiency(table)
        for run in table.runs[1:]:
            predicted = predict(table, run, efficiency)
            error = predicted / run.published - 1
            out.append({"table": table.name, "source": table.source, "model": table.model, "gpus": run.gpus,
                        "layout": run.layout.label(), "anchor_gpus": table.runs[0].gpus,
                        "anchor_published": table.runs[0].published, "anchor_efficiency": efficiency,
                        "published": run.published, "predicted": predicted, "error": error,
                        "tolerance": table.tolerance, "within": abs(error) <= table.tolerance})
    return out
