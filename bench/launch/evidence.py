"""A cell's transport evidence by its flavour's name (the matrix's `mpi` value): the debug switches its job needs and
the reading of its log. The rules and readers are bench.records.transport's, which is pure and is handed the flavour;
this module is where the flavour registry meets them. A cell's engine counts too: the torch.distributed engines (DDP,
FSDP2, layout cells) move their tensors over torch.distributed's backend, not over the launcher's MPI."""
from __future__ import annotations

from bench.launch import flavour_named
from bench.records.transport import Transport, debug_env_for, parse_log
from models.registry.engines import TORCH_DISTRIBUTED_ENGINES


def debug_env(mpi: str, gpu: bool, engine: str | None = None) -> dict[str, str]:
    """The env vars a cell's job needs so its log names the transport (bench.records.transport.debug_env_for)."""
    return debug_env_for(flavour_named(mpi), gpu, torch_distributed=engine in TORCH_DISTRIBUTED_ENGINES)


def parse_transport(log: str, mpi: str, gpu: bool, nodes: int | None = None, engine: str | None = None) -> Transport:
    """The transport a job of this flavour used, from its combined log (bench.records.transport.parse_log)."""
    return parse_log(log, flavour_named(mpi), gpu, nodes, torch_distributed=engine in TORCH_DISTRIBUTED_ENGINES)
