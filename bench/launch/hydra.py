"""The Hydra process manager's command line, shared by MPICH's and Intel MPI's mpiexec (same core options; each
flavour names its own way of handing ssh its options)."""
from __future__ import annotations

from bench.launch.fabric import iface_name
from bench.launch.spec import LaunchSpec


def hydra_argv(spec: LaunchSpec, mpiexec: str, env: dict[str, str], launcher: list[str] = ()) -> list[str]:
    """`launcher`: the flavour's options for reaching other hosts (ssh and its arguments)."""
    argv = [mpiexec]
    if iface := iface_name(spec, "Hydra's -iface"):
        argv += ["-iface", iface]  # Hydra's own connections (and its proxies') on the chosen interface
    argv += [*launcher, "-n", str(spec.workers), "-ppn", str(spec.workers_per_node),
             "-hosts", ",".join(h for h, _ in spec.hosts)]
    for name in sorted(env):
        argv += ["-genv", name, env[name]]  # name and value as two argv elements: no shell ever parses them
    return argv
