"""The abstract launch: what to start, where, with which environment. Flavour modules render it to argv + env."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LaunchSpec:
    workers: int
    hosts: tuple[tuple[str, int], ...]  # (hostname, slots)
    program: tuple[str, ...]  # the worker argv (python + workload + flags)
    env: dict[str, str] = field(default_factory=dict)  # set for every worker
    ib: bool = False
    as_root: bool = False
    # The fabric's details where a flavour needs them: old RDMA SKUs without SR-IOV, and the TCP interface name.
    sriov: bool = True
    iface: str | None = None

    @property
    def workers_per_node(self) -> int:
        return max(slots for _, slots in self.hosts)


@dataclass(frozen=True)
class Rendered:
    argv: tuple[str, ...]
    env: dict[str, str]  # what the launcher process needs on top of the caller's environment
