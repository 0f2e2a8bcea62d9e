"""MPICH's mpiexec (Hydra). The MPICH wheel's default netmod is ch4:ucx, so the fabric is chosen through UCX."""
from __future__ import annotations

from bench.launch.fabric import ucx_env
from bench.launch.hydra import hydra_argv
from bench.launch.spec import LaunchSpec, Rendered

NAME = "mpich"
TOOL = "mpiexec.hydra"


def fabric_env(spec: LaunchSpec) -> dict[str, str]:
    return {"MPIR_CVAR_CH4_NETMOD": "ucx", **ucx_env(spec)}


def render(spec: LaunchSpec, mpiexec: str = TOOL) -> Rendered:
    env = {**fabric_env(spec), **spec.env}
    argv = hydra_argv(spec, mpiexec, env)
    if spec.iface:
        argv[1:1] = ["-iface", spec.iface]  # Hydra's own connections (and its proxies') on the chosen interface
    return Rendered(tuple(argv) + spec.program, env)
