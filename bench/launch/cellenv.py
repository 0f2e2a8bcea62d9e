"""The environment every worker of a cell gets, whichever backend starts it: threads, the flavour's runtime
(library path), the debug switches that make each layer name its transport, and NCCL's fabric settings on GPUs."""
from __future__ import annotations

from bench.launch.evidence import debug_env
from bench.launch.fabric import nccl_env
from bench.launch.runtimes import Runtime
from bench.launch.spec import LaunchSpec
from bench.planning.cell import PlannedCell


def cell_env(planned: PlannedCell, threads: int, runtime: Runtime, iface: str | None = None) -> dict[str, str]:
    gpu = not planned.sku.is_cpu
    env = {"OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1", **runtime.env,
           **debug_env(planned.cell["mpi"], gpu, planned.cell["engine"])}
    if gpu:
        fabric = LaunchSpec(workers=planned.cell["gpus"], hosts=(), program=(), ib=planned.cell["ib"], iface=iface)
        env.update(nccl_env(fabric))
    return env
