"""A cell's transport evidence by its flavour's name (the matrix's `mpi` value): the debug switches its job needs and
the reading of its log. The rules and readers are bench.transport's, which is pure and is handed the flavour; this
module is where the flavour registry meets them."""
from __future__ import annotations

from bench.launch import LAUNCHERS, flavour_named
from bench.transport import SHARED_DEBUG_ENV, Transport, debug_env_for, parse_log


def debug_env(mpi: str, gpu: bool) -> dict[str, str]:
    """The env vars a cell's job needs so its log names the transport (bench.transport.debug_env_for)."""
    return debug_env_for(flavour_named(mpi), gpu)


def debug_layers() -> dict[str, dict[str, str]]:
    """Every layer's switches: the shared layers' and each registered flavour's own (keyed by its name)."""
    return {**SHARED_DEBUG_ENV, **{name: dict(f.debug) for name, f in LAUNCHERS.items()}}


def parse_transport(log: str, mpi: str, gpu: bool, nodes: int | None = None) -> Transport:
    """The transport a job of this flavour used, from its combined log (bench.transport.parse_log)."""
    return parse_log(log, flavour_named(mpi), gpu, nodes)
