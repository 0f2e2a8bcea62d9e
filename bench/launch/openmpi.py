"""Open MPI's mpirun."""
from __future__ import annotations

from bench.launch.spec import LaunchSpec, Rendered

NAME = "openmpi"
TOOL = "mpirun"  # the program that starts the processes


def render(spec: LaunchSpec, mpirun: str = TOOL) -> Rendered:
    argv = [mpirun, "-np", str(spec.workers), "-H", ",".join(f"{h}:{n}" for h, n in spec.hosts),
            # Each worker sets its own thread count; Open MPI's default core binding would pile threads on one core.
            "--bind-to", "none", "--map-by", "slot"]
    if spec.as_root:
        argv.append("--allow-run-as-root")
    if not spec.ib:
        # No InfiniBand: shared memory within a node, TCP between nodes.
        argv += ["--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp"]
    for name in sorted(spec.env):
        argv += ["-x", name]  # -x forwards the variable to remote nodes too
    return Rendered(tuple(argv) + spec.program, dict(spec.env))
