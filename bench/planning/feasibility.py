"""Why a cell cannot run: hardware rules (from the catalogue) and what this build implements.

What a workload implements, and what its worker refuses, is declared once in models/registry/ (workloads.py, and
rules.py's WORKLOAD_RULES): the worker refuses those settings with the same text, so a cell skipped here is one the
worker would refuse.

Each rule returns a one-line reason or None. Backend reach (can *this* backend get there?) is the backend's own rule.
Unknown names (a framework or MPI flavour no registry has) never reach these rules: the matrix's validation takes its
vocabulary from the same registries (bench/planning/matrix.py) and rejects them with the file and line.
"""
from __future__ import annotations

from typing import Any

from bench.facts.catalog import GpuSku, catalog
from bench.launch import LAUNCHERS, flavour_named
from models.registry.collectives import COLLECTIVES
from models.registry.engines import TORCH_DISTRIBUTED_ENGINES
from models.registry.rules import workload_refusal
from models.registry.workloads import training_state_bytes


def hardware_reason(cell: dict[str, Any], sku: GpuSku) -> str | None:
    precision = cell["precision"]
    where = "cpu" if sku.is_cpu else f"{sku.key} ({sku.gpu_model})"
    if precision == "fp16" and not sku.fp16:
        why = "CPUs have no fast fp16 path; use bf16" if sku.is_cpu else "no tensor cores or fast fp16"
        return f"fp16 on {where}: {why}"
    if precision == "bf16" and not sku.bf16:
        return f"bf16 on {where}: needs Ampere (compute capability 8.0) or newer, this is {sku.compute_capability}"
    state = training_state_bytes(cell)
    if state is not None and not sku.is_cpu and sku.memory_gb and state > sku.memory_gb * 1e9:
        how = f"per GPU sharded over {cell['gpus']}" if cell["engine"] == "fsdp2" else "on every GPU (unsharded)"
        return (f"model={cell['model']} with engine={cell['engine']} on {sku.key} ({sku.memory_gb:g} GB): its "
                f"weights, gradients and AdamW state alone take {state / 1e9:,.1f} GB {how}; use "
                f"engine=fsdp2 over more GPUs, or a smaller model")
    workers, per_vm, per_node = cell["gpus"], sku.gpus_per_vm, cell.get("workers_per_node")
    if per_node is not None:
        if not sku.is_cpu and per_node > per_vm:
            return f"workers_per_node={per_node} on {sku.key}: a {sku.vm_size} has {per_vm} GPUs"
        if workers % per_node:
            return f"gpus={workers} with workers_per_node={per_node}: not a whole number of nodes"
    nodes = sku.nodes_for(workers, per_node)
    if nodes > 1 and workers % per_vm and per_node is None:
        return f"gpus={workers} spans {nodes} VMs of {per_vm} GPUs ({sku.vm_size}) unevenly; use a multiple of {per_vm}"
    if cell["ib"]:
        if not sku.ib:
            return f"ib=true on {sku.key}: {sku.vm_size} has no InfiniBand"
        if nodes == 1:
            return f"ib=true on one {sku.vm_size}: a single-node cell sends nothing over the fabric (use ib=false)"
        if not sku.sriov and not flavour_named(cell["mpi"]).ib_without_sriov:
            able = ", ".join(f.title for f in LAUNCHERS.values() if f.ib_without_sriov)
            return (f"ib=true with {cell['mpi']} on {sku.vm_size}: InfiniBand without SR-IOV is reachable "
                    f"only by {able}")
    return None


def build_reason(cell: dict[str, Any]) -> str | None:
    framework = cell["framework"]
    collective = COLLECTIVES.get(cell.get("model"))
    if collective is not None:
        if framework not in collective["frameworks"]:
            return (f"model={cell['model']}: the collective sweep runs through {', '.join(collective['frameworks'])} "
                    f"only (framework={framework})")
        engines = collective.get("engines")
        if engines is not None and cell["engine"] not in engines:
            return (f"model={cell['model']}: runs through engine {', '.join(engines)} only "
                    f"({collective['engines_why']}), not engine={cell['engine']}")
        if cell["engine"] in TORCH_DISTRIBUTED_ENGINES and flavour_named(cell["mpi"]).native is None:
            able = " or ".join(f"{'torchrun' if f.native == 'torchrun' else f.tool} (mpi: {name})"
                               for name, f in LAUNCHERS.items() if f.native)
            return f"engine=native with mpi={cell['mpi']}: torch.distributed is started by {able}"
        return None
    device = "cpu" if catalog()[cell["gpu"]].is_cpu else "gpu"
    refusal = workload_refusal(framework, cell, device)  # the worker's own rules: it would refuse with this text
    if refusal is not None:
        return refusal
    if cell["engine"] in TORCH_DISTRIBUTED_ENGINES and flavour_named(cell["mpi"]).native is None:
        able = " or ".join(f"{'torchrun' if f.native == 'torchrun' else f.tool} (mpi: {name})"
                           for name, f in LAUNCHERS.items() if f.native)
        what = "DDP" if cell["engine"] == "native" else "FSDP2"
        return f"engine={cell['engine']} with mpi={cell['mpi']}: {what} is started by {able}"
    return None
