"""The best few layouts as a matrix to measure (`bench model --layouts --emit-matrix PATH`).

Each layout is an `include` entry whose `layout` key (the matrix's layout axis) holds its text form
(bench/layouts/layout.py, `parse_layout` reads it back), beside gpu, gpus, ib, engine (fsdp2 where anything is
sharded, native for DDP), batch_per_gpu (sequences per micro-batch; a pipeline's: per replica, which its m
micro-batches split), grad_accum, activation_checkpointing, and tp_across_nodes (true) where the planner was asked
for tp across nodes and the layout's tp crosses them. `bench plan` plans the file as it is
(tests/test_layouts_cli.py, tests/test_layout_axis.py)."""
from __future__ import annotations

from bench.layouts.feasibility import tp_crosses_nodes
from bench.layouts.layout import Layout
from bench.layouts.memory import is_sharded
from models.workloads.transformer.shapes import CONFIGS, shape_id


def matrix_for(rows: list[dict], *, model: str, shape, sku: str, fabric: str, seq: int, global_batch: int,
               top: int, mpi: str, gpus_per_node: int = 1, tp_across_nodes: bool = False) -> dict:
    """A matrix document (plain data, for yaml.safe_dump) of the first `top` fitting rows, launched by the MPI
    flavour `mpi` (the caller asks the launcher registry, a layer above this one). With `tp_across_nodes` (the
    planner's --tp-across-nodes), a layout whose tp group crosses nodes of `gpus_per_node` asks for it, as the
    plan needs; every other entry leaves the key out (its id as without the key)."""
    workers_model = model if model in CONFIGS else shape_id(shape)
    include = []
    for row in [r for r in rows if r.get("fits")][:top]:
        layout = Layout(**row["degrees"])
        per_replica = global_batch // layout.dp
        entry = {
            "layout": layout.label(), "gpus": layout.world,
            "engine": "fsdp2" if is_sharded(layout) else "native",
            # a pipeline's replica batch, which its m micro-batches split (bench/planning/layout_rules.py)
            "batch_per_gpu": per_replica if layout.pp > 1 else per_replica // layout.microbatches,
            "grad_accum": layout.microbatches if layout.pp == 1 else 1,
            "activation_checkpointing": row["checkpointing"] == "full",
        }
        if tp_across_nodes and tp_crosses_nodes(layout, gpus_per_node):
            entry["tp_across_nodes"] = True
        include.append(entry)
    return {
        "name": f"layouts-{model}-{sku}-{fabric}".lower(),
        "description": "bench model --layouts: the predicted best layouts, best first (docs/layouts.md)",
        "workload": {"model": workers_model, "seq_len": seq, "precision": "bf16", "warmup_steps": 5, "steps": 20,
                     "repeats": 3},
        # the layouts as an axis, so each include entry extends its own layout's cell (an entry matching every cell
        # would overwrite the one before it)
        "axes": {"gpu": [sku], "framework": ["pytorch"], "mpi": [mpi], "ib": [fabric == "ib"],
                 "gpus": sorted({e["gpus"] for e in include}) or [1],
                 "layout": [e["layout"] for e in include] or ["dp_replicate=1"]},
        "include": include,
    }
