"""Open MPI's mpirun."""
from __future__ import annotations

from bench.launch.fabric import ucx_env
from bench.launch.spec import LaunchSpec, Rendered

NAME = "openmpi"
TOOL = "mpirun"  # the program that starts the processes


def fabric_args(spec: LaunchSpec) -> list[str]:
    """InfiniBand through UCX's pml; without it, ob1 with shared memory in a node and TCP between nodes."""
    if spec.ib:
        return ["--mca", "pml", "ucx", "--mca", "osc", "ucx"]
    args = ["--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp"]
    if spec.iface:
        args += ["--mca", "btl_tcp_if_include", spec.iface, "--mca", "oob_tcp_if_include", spec.iface]
    return args


def fabric_env(spec: LaunchSpec) -> dict[str, str]:
    return ucx_env(spec) if spec.ib else {}


def render(spec: LaunchSpec, mpirun: str = TOOL) -> Rendered:
    argv = [mpirun, "-np", str(spec.workers), "-H", ",".join(f"{h}:{n}" for h, n in spec.hosts),
            # Each worker sets its own thread count; Open MPI's default core binding would pile threads on one core.
            "--bind-to", "none", "--map-by", "slot"]
    if spec.as_root:
        argv.append("--allow-run-as-root")
    argv += fabric_args(spec)
    env = {**fabric_env(spec), **spec.env}
    for name in sorted(env):
        argv += ["-x", name]  # -x forwards the variable (from mpirun's own environment) to every rank, remote too
    return Rendered(tuple(argv) + spec.program, env)
