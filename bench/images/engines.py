"""Container engines (podman, docker): the one place that knows how each is called to build an image and to run a
container, including what this kind of machine needs (measured on the development machines, Debian 12, 2026-11-25):

- podman's default OCI runtime, crun, refuses a host whose cgroups are in hybrid mode (v1 controllers plus a v2
  `unified` mount): "cgroups in hybrid mode not supported". runc runs there, with the cgroupfs manager (no systemd
  session to ask). So podman takes runc wherever runc is installed and the host is not pure cgroup v2.
- podman's default ulimits (nofile 1048576) exceed a sandbox's hard limits, and the container then fails to start;
  every container gets this process's hard nofile limit and a bounded nproc instead.
- podman keeps `SHELL` (the images use bash with pipefail) only in the docker image format, not in OCI's.
"""
from __future__ import annotations

import resource
import shutil
from dataclasses import dataclass
from pathlib import Path

from bench.core.errors import BenchInputError

NPROC_LIMIT = 4096  # processes per container user: a cell's workers, their threads and the MPI daemons fit easily


@dataclass(frozen=True)
class Engine:
    name: str
    path: str

    def global_args(self) -> list[str]:
        """Options before the subcommand."""
        if self.name != "podman":
            return []
        args = []
        if shutil.which("runc") and not _pure_cgroup_v2():
            args += ["--runtime", "runc", "--cgroup-manager", "cgroupfs"]
        return args

    def limits(self) -> list[str]:
        """--ulimit options that this process's hard limits allow (docker's daemon has limits of its own)."""
        if self.name != "podman":
            return []
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        nproc = NPROC_LIMIT if nproc == resource.RLIM_INFINITY else min(nproc, NPROC_LIMIT)
        out = []
        if nofile != resource.RLIM_INFINITY:
            out += ["--ulimit", f"nofile={nofile}:{nofile}"]
        return out + ["--ulimit", f"nproc={nproc}:{nproc}"]

    def command(self, sub: str, *args: str) -> list[str]:
        """argv for `<engine> <sub> ...` with the global options; run/build also get the limits."""
        extra = self.limits() if sub in ("run", "build", "create") else []
        if sub == "build" and self.name == "podman":
            extra = ["--format", "docker", *extra]  # keeps SHELL (bash -o pipefail)
        return [self.path, *self.global_args(), sub, *extra, *args]

    def mounts_dirs_at_build(self) -> bool:
        """podman build takes --volume (a host directory read-only during RUN); docker build does not."""
        return self.name == "podman"


ENGINES = ("podman", "docker")


def _pure_cgroup_v2() -> bool:
    return Path("/sys/fs/cgroup/cgroup.controllers").exists()


def find_engine(name: str | None = None) -> Engine:
    """The named engine, or the first installed of ENGINES; one line (exit 2) when there is none."""
    if name is not None and name not in ENGINES:
        raise BenchInputError(f"unknown container engine {name!r}; known: {', '.join(ENGINES)}")
    for candidate in (name,) if name else ENGINES:
        path = shutil.which(candidate)
        if path:
            return Engine(candidate, path)
    wanted = name or " or ".join(ENGINES)
    raise BenchInputError(f"no container engine: {wanted} not found on PATH (apt-get install podman runc)")
