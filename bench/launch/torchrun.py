"""torchrun (torch.distributed.run): the launcher of PyTorch's native engine (DDP). One node: one torchrun in
standalone mode. Several nodes: one torchrun per node, all meeting at a c10d rendezvous on the first host."""
from __future__ import annotations

from bench.launch.fabric import native_env
from bench.launch.spec import LaunchSpec, NodeLaunch, Rendered

NAME = "torchrun"
RDZV_PORT = 29400  # torchrun's own default for the c10d rendezvous


def _script(spec: LaunchSpec) -> list[str]:
    program = list(spec.program)
    if program and program[0].endswith(("python", "python3")):
        program = program[1:]  # torchrun takes the script, and runs it with its own interpreter
    return program


def render(spec: LaunchSpec, python: str = "python") -> Rendered:
    if len(spec.hosts) != 1:
        raise ValueError(f"torchrun runs once per node: {len(spec.hosts)} hosts need render_nodes (one launch each)")
    argv = [python, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", str(spec.workers), *_script(spec)]
    return Rendered(tuple(argv), dict(spec.env))


def render_nodes(spec: LaunchSpec, python: str = "python", port: int = RDZV_PORT,
                 rdzv_id: str = "bench") -> tuple[NodeLaunch, ...]:
    """One torchrun per host (each started there, e.g. over ssh, by the backend), meeting at the first host.

    The c10d rendezvous's store runs in the torchrun whose host matches the endpoint, so the endpoint names the first
    host as the others reach it. `--node-rank` is left out: torchrun uses it only with the static rendezvous (its
    --help), c10d numbers the nodes itself. Every node needs the same `rdzv_id`: use one per job."""
    if not spec.hosts:
        raise ValueError("torchrun needs at least one host")
    counts = {slots for _, slots in spec.hosts}
    if len(counts) != 1:
        raise ValueError(f"torchrun starts the same number of workers on every node, got {sorted(counts)}")
    env = {**native_env(spec), **spec.env}  # NCCL's interface, on GPU cells, comes with the cell's env (cellenv)
    first = spec.hosts[0][0]
    argv = (python, "-m", "torch.distributed.run", "--nnodes", str(len(spec.hosts)),
            "--nproc-per-node", str(counts.pop()), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{first}:{port}",
            "--rdzv-id", rdzv_id, *_script(spec))
    return tuple(NodeLaunch(host, Rendered(argv, dict(env))) for host, _ in spec.hosts)
