"""Every layout of a cluster, judged: refused (with its reasons), or its memory per GPU and predicted step, ranked by
tokens/s per GPU with the layouts that fit first. Pure: the shape, the SKU's facts and the fabric in, rows out."""
from __future__ import annotations

from dataclasses import dataclass

from bench.layouts.fabric import Fabric
from bench.layouts.feasibility import Job, memory_reason, reasons
from bench.layouts.layout import Layout
from bench.layouts.memory import rank_memory
from bench.layouts.steptime import step_time

# The compute efficiency the planner assumes on a GPU, measured, not fitted: the Llama-3-1B-shaped FSDP2 cell of the
# H200 store (benchmarks/results/h200-transformer.db, cell 108209e03484: bf16, compiled, 8 × 2,048 tokens, one
# H200) ran at 53.8 % of the dense bf16 peak (docs/lab/2026-12-04-h200-transformer.md). tests/test_layouts_model.py
# reads the store and holds this figure to it.
MEASURED_EFFICIENCY = 0.538
EFFICIENCY_SOURCE = "measured MFU of the Llama 3 1B shape, FSDP2, bf16, compiled, one H200 (h200-transformer.db)"


@dataclass(frozen=True)
class Cluster:
    gpus_per_node: int
    nodes: int
    peak_flops: float  # dense bf16, FLOP/s per GPU
    usable_bytes: float | None  # per GPU
    fabric: Fabric
    cpu: bool = False

    @property
    def world(self) -> int:
        return self.gpus_per_node * self.nodes


def judge(shape, layout: Layout, cluster: Cluster, job: Job, *, efficiency: float = MEASURED_EFFICIENCY,
          checkpointing: tuple[str, ...] = ("none", "full")) -> dict:
    """One layout's row: `refused` with reasons, or memory, `fits` and the predicted step. Of the checkpointing
    choices, the first that fits (else the last)."""
    row = {"layout": layout.label(), "degrees": layout.as_dict(), "refused": reasons(layout, shape, job)}
    if row["refused"]:
        return row
    for choice in checkpointing:
        memory = rank_memory(shape, layout, seq=job.seq, microbatch_seqs=job.global_batch // layout.dp //
                             layout.microbatches, checkpointing=choice)
        too_big = memory_reason(memory.total, cluster.usable_bytes)
        if too_big is None:
            break
    step = step_time(shape, layout, cluster.fabric, seq=job.seq, global_batch=job.global_batch,
                     peak_flops=cluster.peak_flops, efficiency=efficiency, checkpointing=choice)
    row.update(checkpointing=choice, memory=memory.as_dict(), fits=too_big is None, memory_reason=too_big,
               bubble=layout.bubble, **step.as_dict())
    return row


def with_microbatches(layout: Layout, job: Job) -> Layout:
    """A layout the planner made: one sequence a micro-batch, so a pipeline's micro-batches are its replica's
    sequences (the smallest bubble the batch allows); data-parallel layouts take their sequences in one micro-batch."""
    if layout.pp == 1 or job.global_batch % layout.dp:
        return layout
    return layout.with_microbatches(job.global_batch // layout.dp)


def plan_layouts(shape, layouts: list[Layout], cluster: Cluster, job: Job, **kw) -> dict:
    """Judged rows: `ranked` (fitting first, then by tokens/s per GPU) and `refused`."""
    rows = [judge(shape, layout, cluster, job, **kw) for layout in layouts]
    ranked = sorted((r for r in rows if not r["refused"]),
                    key=lambda r: (not r["fits"], -round(r["tokens_per_s_per_gpu"], 6), _dimensions(r), r["layout"]))
    for i, row in enumerate(ranked, 1):
        row["rank"] = i if row["fits"] else None
    return {"ranked": ranked, "refused": [r for r in rows if r["refused"]]}


def _dimensions(row: dict) -> int:
    """Degrees above 1: of two layouts predicted alike, the simpler ranks first."""
    return sum(1 for k in ("dp_replicate", "dp_shard", "tp", "pp", "cp", "ep") if row["degrees"][k] > 1)
