"""Intel MPI's mpiexec.hydra (the impi_rt runtime; MPICH ABI, so it runs the MPICH-ABI Horovod)."""
from __future__ import annotations

from bench.launch.hydra import hydra_argv
from bench.launch.spec import LaunchSpec, Rendered

NAME = "intelmpi"
TOOL = "mpiexec.hydra"


def fabric_env(spec: LaunchSpec) -> dict[str, str]:
    """Shared memory within a node; between nodes libfabric's mlx provider (InfiniBand through UCX) or tcp.

    The old RDMA SKUs without SR-IOV (NC24r, ND24rs, NC24rs_v2) reach their InfiniBand only through Network Direct
    with Intel MPI's DAPL fabric (Intel MPI 2018 and earlier; 2019+ dropped DAPL): rendered as such, to run with an
    image that carries that runtime."""
    if spec.ib and not spec.sriov:
        return {"I_MPI_FABRICS": "shm:dapl", "I_MPI_DAPL_PROVIDER": "ofa-v2-ib0", "I_MPI_DYNAMIC_CONNECTION": "0"}
    env = {"I_MPI_FABRICS": "shm:ofi", "FI_PROVIDER": "mlx" if spec.ib else "tcp"}
    if spec.iface and not spec.ib:
        env["FI_TCP_IFACE"] = spec.iface
    return env


def render(spec: LaunchSpec, mpiexec: str = TOOL) -> Rendered:
    env = {**fabric_env(spec), **spec.env}
    # Intel MPI pins ranks to cores by default; each worker sets its own thread count, so no pinning.
    env.setdefault("I_MPI_PIN", "0")
    return Rendered(tuple(hydra_argv(spec, mpiexec, env)) + spec.program, env)
