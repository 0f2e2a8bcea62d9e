"""The `container:` setting of the hosts and Slurm backends: every worker of a cell runs inside a bench image on
its node, the way sites run Horovod in containers.

How (the "hybrid" model of MPI in containers, which Apptainer's and Sarus' documentation describe): the launcher
(mpirun, horovodrun, mpiexec) runs outside, as without containers, and the program it starts for each rank is the
worker inside the image. The container shares the node's network, IPC, PID and host-name namespaces, so the rank
reaches its launcher's daemon (Open MPI's PMIx socket under /tmp, Gloo's rendezvous over TCP), other ranks' shared
memory, and names its node in its record. Chosen over a long-lived container per node with an sshd inside (Horovod's
Docker recipe) because nothing has to be started, kept and cleaned up per node beyond the cell's own processes (the
cell's token sweeps them as before), and because it is what Slurm sites do (pyxis, Apptainer). The price: the
launcher's MPI must speak to the image's (same Open MPI / MPICH release; both are Debian 12's here).

Engines: podman or docker (hosts backend, `podman run` per rank through a small wrapper that passes the launcher's
variables by name), apptainer (`apptainer exec`, which keeps the node's namespaces and environment by default),
pyxis (Slurm's `srun --container-image`, only where srun starts the ranks).
"""
from __future__ import annotations

import shlex
from pathlib import Path

from bench.backend_settings.container import ContainerSettings
from bench.images.engines import Engine

# Variables a launcher hands its ranks (Open MPI/PMIx, Hydra/PMI, Intel MPI and its libfabric, UCX, Horovod's Gloo
# rendezvous, torch's rendezvous, NCCL) and bench's own (the cell token, the debug switches): passed into the
# container by name. The node's PATH, LD_LIBRARY_PATH and PYTHONPATH are not: the image has its own.
PASSED_PREFIXES = ("OMPI", "PMIX", "OPAL", "PMI", "HYDRA", "HYDI", "I_MPI", "FI", "UCX", "HOROVOD", "NCCL", "GLOO",
                   "BENCH", "MASTER", "TORCH", "TF", "KMP")
PASSED_NAMES = ("OMP_NUM_THREADS", "PYTHONUNBUFFERED", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                "GROUP_RANK", "CUDA_VISIBLE_DEVICES")
NOT_PASSED = {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}


def wrapper_text(settings: ContainerSettings, mounts: list[str], names: list[str] = ()) -> str:
    """A POSIX shell script that runs its arguments inside the image on this node (podman or docker), with the
    launcher's variables (by prefix) and `names` passed in, the shared folders mounted at the same path, as the
    caller's user."""
    engine = Engine(settings.engine, settings.engine)  # the name on each node's PATH
    prefixes = "|".join(PASSED_PREFIXES)
    fixed = sorted((set(PASSED_NAMES) | set(names)) - NOT_PASSED)
    run = engine.command("run", "--rm", "--network", "host", "--ipc", "host", "--pid", "host", "--uts", "host",
                         *(a for m in mounts for a in ("-v", f"{m}:{m}")), "-v", "/tmp:/tmp")
    return "\n".join([
        "#!/bin/sh",
        "# bench: one worker inside the cell's image on this node (bench/backends/shared/container.py).",
        "set -eu",
        f"names=$(env | sed -n -E 's/^(({prefixes})_[A-Za-z0-9_]*)=.*/\\1/p')",
        "envs=\"\"",
        f"for n in $names {' '.join(fixed)}; do",
        "  if env | grep -q \"^$n=\"; then envs=\"$envs -e $n\"; fi",
        "done",
        "# $envs: plain variable names (no value on the command line: the engine reads it from here)",
        f"exec {shlex.join(run)} --user \"$(id -u):$(id -g)\" -w \"$PWD\" $envs {shlex.quote(settings.image)} \"$@\"",
        "",
    ])


def write_wrapper(path: Path, settings: ContainerSettings, mounts: list[str], names: list[str] = ()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(wrapper_text(settings, mounts, names))
    path.chmod(0o755)
    return path


def apptainer_prefix(settings: ContainerSettings, mounts: list[str]) -> tuple[str, ...]:
    """`apptainer exec` keeps the node's network, PID and IPC namespaces and passes the environment through."""
    return ("apptainer", "exec", *(a for m in mounts for a in ("--bind", m)), settings.image)


def pyxis_options(settings: ContainerSettings, mounts: list[str], workdir: str) -> tuple[str, ...]:
    """srun's pyxis options: the image, the shared folders at the same path, the job's directory as cwd."""
    return (f"--container-image={settings.image}", f"--container-mounts={','.join(f'{m}:{m}' for m in mounts)}",
            f"--container-workdir={workdir}")
