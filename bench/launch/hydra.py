"""The Hydra process manager's command line, shared by MPICH's and Intel MPI's mpiexec (same options)."""
from __future__ import annotations

from bench.launch.spec import LaunchSpec


def hydra_argv(spec: LaunchSpec, mpiexec: str, env: dict[str, str]) -> list[str]:
    argv = [mpiexec, "-n", str(spec.workers), "-ppn", str(spec.workers_per_node),
            "-hosts", ",".join(h for h, _ in spec.hosts)]
    for name in sorted(env):
        argv += ["-genv", name, env[name]]  # name and value as two argv elements: no shell ever parses them
    return argv
