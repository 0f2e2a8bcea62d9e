"""The matrix's `backend.hosts` section: machines reachable over ssh (no scheduler), the interface between them, and
the shared directory the workers write their records to. Also reads an Open MPI hostfile (`host slots=N`)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bench.backend_settings.container import ContainerSettings
from bench.core.errors import BenchInputError

# Host names and ssh values reach launcher command lines and ssh's own option strings: plain words only.
HOST_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$"
_WORD = r"^[^\s'\"\\]+$"


class SshSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    user: str | None = Field(None, pattern=_WORD)  # ssh -l; null = ssh's own default (the config file's, or yours)
    port: int | None = Field(None, gt=0, lt=65536)  # ssh -p
    identity: str | None = Field(None, pattern=_WORD)  # ssh -i: a private key file
    config: str | None = Field(None, pattern=_WORD)  # ssh -F: an ssh_config file
    # How long bench waits for a node to answer its check before it counts as unreachable.
    connect_timeout_s: int = Field(5, gt=0, le=120)


class HostsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    # The machines, in order: a cell of N nodes runs on the first N that have the slots it needs. Either a list of
    # names, or an Open MPI hostfile (`node1 slots=8`, one host a line, `#` comments).
    hosts: list[str] | None = Field(None, min_length=1)
    hostfile: str | None = None
    ssh: SshSettings = SshSettings()
    # The interface the nodes talk over (a name, the same on every node, e.g. eth1): every layer is pinned to it,
    # never the loopback or a management network by accident. A CIDR is accepted only where every layer of a cell
    # takes one; cells with a layer that needs a name are skipped, saying which.
    iface: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:/-]{1,64}$")
    # A directory at the same path on every host and shared between them (NFS, or one file system): each job's
    # records and log land in <workdir>/runs/<run>/<cell>/job<k>/. null = the results directory (then it must be
    # shared). Checked before a cell runs: a node that does not see it fails its cells.
    workdir: str | None = None
    # Run every worker inside this image on its node (podman, docker or apptainer; bench/backends/shared/container.py):
    # the launcher stays outside, each rank is the worker in the image. null = the nodes' own Python.
    container: ContainerSettings | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "HostsConfig":
        if self.hosts is not None and self.hostfile is not None:
            raise ValueError("name the hosts either as a list (hosts) or in a hostfile, not both")
        for host in self.hosts or ():
            if not re.match(HOST_NAME_PATTERN, host):
                raise ValueError(f"host {host!r} is not a plain host name or address")
        if self.hosts and len(set(self.hosts)) != len(self.hosts):
            raise ValueError("a host is listed twice")
        if self.container is not None and self.container.engine == "pyxis":
            raise ValueError("container.engine pyxis is Slurm's (srun --container-image); hosts take podman, docker "
                             "or apptainer")
        return self


@dataclass(frozen=True)
class Host:
    name: str
    slots: int | None  # workers it may hold; None = not said (the node check's cores or GPUs still apply)


def read_hostfile(path: str | Path) -> tuple[Host, ...]:
    """Open MPI's hostfile form: `name [slots=N] [max_slots=N]`, `#` starts a comment. A bad line is an input error
    naming the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise BenchInputError(f"backend.hosts.hostfile: cannot read {path} ({e.strerror or e})") from None
    hosts: list[Host] = []
    seen: set[str] = set()
    for n, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        where = f"{path}:{n}"
        name, options = words[0], words[1:]
        if not re.match(HOST_NAME_PATTERN, name):
            raise BenchInputError(f"hostfile: {name!r} is not a plain host name or address", where)
        if name in seen:
            raise BenchInputError(f"hostfile: host {name} listed twice", where)
        slots = None
        for option in options:
            m = re.fullmatch(r"(slots|max_slots|max-slots)=([1-9][0-9]{0,5})", option)
            if not m:
                raise BenchInputError(f"hostfile: {option!r} is not slots=N (a positive whole number)", where)
            if m.group(1) == "slots":
                slots = int(m.group(2))
        seen.add(name)
        hosts.append(Host(name, slots))
    if not hosts:
        raise BenchInputError(f"hostfile: {path} names no host", str(path))
    return tuple(hosts)


def configured_hosts(config: HostsConfig) -> tuple[Host, ...]:
    if config.hostfile is not None:
        return read_hostfile(config.hostfile)
    if not config.hosts:
        raise BenchInputError("backend.hosts: name the machines (hosts: [node1, node2], or hostfile: path)")
    return tuple(Host(name, None) for name in config.hosts)
