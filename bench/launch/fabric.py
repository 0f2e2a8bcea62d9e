"""The `ib` axis and the inter-node interface for the layers every flavour shares: NCCL (GPU gradients), UCX (under
Open MPI's and MPICH's `ucx` transports) and PyTorch's own Gloo sockets (the native engine). Each MPI flavour's own
settings live in its flavour module (`fabric_env`)."""
from __future__ import annotations

import ipaddress

from bench.launch.spec import LaunchSpec


def is_cidr(iface: str) -> bool:
    """True for a network such as 10.0.0.0/24 (Open MPI's if_include takes one); False for an interface name."""
    if "/" not in iface:
        return False
    try:
        ipaddress.ip_network(iface, strict=False)
    except ValueError:
        return False
    return True


def iface_name(spec: LaunchSpec, layer: str) -> str | None:
    """The interface for a layer that takes only a device name; a CIDR cannot be given to it."""
    if spec.iface is not None and is_cidr(spec.iface):
        raise ValueError(f"iface {spec.iface!r} is a network (CIDR); {layer} needs an interface name such as eth0")
    return spec.iface


def nccl_env(spec: LaunchSpec) -> dict[str, str]:
    """NCCL: InfiniBand verbs or plain sockets between nodes. The socket interface also carries NCCL's bootstrap."""
    env = {"NCCL_IB_DISABLE": "0" if spec.ib else "1"}
    if iface := iface_name(spec, "NCCL_SOCKET_IFNAME"):
        env["NCCL_SOCKET_IFNAME"] = iface
    if not spec.ib:
        env["NCCL_NET_GDR_LEVEL"] = "LOC"  # no GPUDirect RDMA without the IB NIC: stage through host memory
    return env


def ucx_env(spec: LaunchSpec) -> dict[str, str]:
    """UCX transports: RC verbs over InfiniBand, or TCP, plus shared memory and loopback within a node."""
    env = {"UCX_TLS": "rc,sm,self" if spec.ib else "tcp,sm,self"}
    if spec.iface and not spec.ib:
        env["UCX_NET_DEVICES"] = iface_name(spec, "UCX_NET_DEVICES")
    return env


def native_env(spec: LaunchSpec) -> dict[str, str]:
    """PyTorch's Gloo process group (the native engine's CPU gradients and its rendezvous sockets) across hosts.
    Set only when the launch spans hosts: on one machine PyTorch picks the loopback by itself."""
    if spec.multi_host and spec.iface:
        return {"GLOO_SOCKET_IFNAME": iface_name(spec, "GLOO_SOCKET_IFNAME")}
    return {}
