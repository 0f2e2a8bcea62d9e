"""torchrun (torch.distributed.run): the launcher of PyTorch's native engine (DDP) on one node."""
from __future__ import annotations

from bench.launch.spec import LaunchSpec, Rendered

NAME = "torchrun"


def render(spec: LaunchSpec, python: str = "python") -> Rendered:
    if len(spec.hosts) != 1:
        raise ValueError("torchrun is rendered for one node here; multi-node runs go through a scheduler backend")
    program = list(spec.program)
    if program and program[0].endswith(("python", "python3")):
        program = program[1:]  # torchrun takes the script, and runs it with its own interpreter
    argv = [python, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", str(spec.workers), *program]
    return Rendered(tuple(argv), dict(spec.env))
