"""The `ib` axis for the layers every flavour shares: NCCL (GPU gradients) and UCX (under Open MPI's and MPICH's
`ucx` transports). Each MPI flavour's own settings live in its launcher module (`fabric_env`)."""
from __future__ import annotations

from bench.launch.spec import LaunchSpec


def nccl_env(spec: LaunchSpec) -> dict[str, str]:
    """NCCL: InfiniBand verbs or plain sockets between nodes. The socket interface also carries NCCL's bootstrap."""
    env = {"NCCL_IB_DISABLE": "0" if spec.ib else "1"}
    if spec.iface:
        env["NCCL_SOCKET_IFNAME"] = spec.iface
    if not spec.ib:
        env["NCCL_NET_GDR_LEVEL"] = "LOC"  # no GPUDirect RDMA without the IB NIC: stage through host memory
    return env


def ucx_env(spec: LaunchSpec) -> dict[str, str]:
    """UCX transports: RC verbs over InfiniBand, or TCP, plus shared memory and loopback within a node."""
    env = {"UCX_TLS": "rc,sm,self" if spec.ib else "tcp,sm,self"}
    if spec.iface and not spec.ib:
        env["UCX_NET_DEVICES"] = spec.iface
    return env
