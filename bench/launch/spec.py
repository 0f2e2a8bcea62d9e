"""The abstract launch: what to start, where, with which environment. Flavour modules render it to argv + env."""
from __future__ import annotations

from dataclasses import dataclass, field

LOCAL_HOSTS = ("localhost", "127.0.0.1")


@dataclass(frozen=True)
class Ssh:
    """How a launcher reaches the other hosts: ssh's own settings, rendered by each flavour in its own options.
    Values are passed to ssh as separate words; some launchers join them into one option string, so none may hold
    whitespace (checked here, so every flavour can rely on it)."""
    config_file: str | None = None  # ssh -F
    port: int | None = None  # ssh -p
    identity_file: str | None = None  # ssh -i
    user: str | None = None  # ssh -l

    def __post_init__(self):
        for name in ("config_file", "identity_file", "user"):
            value = getattr(self, name)
            if value is not None and (not value or any(c.isspace() for c in value)):
                raise ValueError(f"ssh {name} {value!r}: must be non-empty and hold no whitespace")
        if self.port is not None and not 0 < self.port < 65536:
            raise ValueError(f"ssh port {self.port}: must be between 1 and 65535")

    def args(self) -> list[str]:
        """The ssh options as words, in ssh's own syntax (what a launcher's 'ssh arguments' option takes)."""
        out: list[str] = []
        for flag, value in (("-F", self.config_file), ("-p", self.port), ("-i", self.identity_file),
                            ("-l", self.user)):
            if value is not None:
                out += [flag, str(value)]
        return out


@dataclass(frozen=True)
class LaunchSpec:
    workers: int
    hosts: tuple[tuple[str, int], ...]  # (hostname, slots)
    program: tuple[str, ...]  # the worker argv (python + workload + flags)
    env: dict[str, str] = field(default_factory=dict)  # set for every worker
    ib: bool = False
    as_root: bool = False
    # The fabric's details where a flavour needs them: old RDMA SKUs without SR-IOV, and the interface between
    # nodes (a name, the same on every node; Open MPI also takes a CIDR such as 10.0.0.0/24).
    sriov: bool = True
    iface: str | None = None
    ssh: Ssh | None = None  # multi-host launches: how the launcher reaches the other hosts

    @property
    def workers_per_node(self) -> int:
        return max(slots for _, slots in self.hosts)

    @property
    def one_local_host(self) -> bool:
        """Every worker on this machine, reached without ssh: the only case where loopback is the right network."""
        return len(self.hosts) == 1 and self.hosts[0][0] in LOCAL_HOSTS

    @property
    def multi_host(self) -> bool:
        return len(self.hosts) > 1


@dataclass(frozen=True)
class Rendered:
    argv: tuple[str, ...]
    env: dict[str, str]  # what the launcher process needs on top of the caller's environment


@dataclass(frozen=True)
class NodeLaunch:
    """One node's share of a launch whose launcher runs once per node (torchrun): start `rendered` on `host`."""
    host: str
    rendered: Rendered
