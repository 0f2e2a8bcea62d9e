"""Horovod's own launcher with the Gloo controller (no MPI at all)."""
from __future__ import annotations

from bench.launch.spec import LaunchSpec, Rendered

NAME = "gloo"
TOOL = "horovodrun"  # the program that starts the processes


def render(spec: LaunchSpec, horovodrun: str = TOOL) -> Rendered:
    argv = [horovodrun, "--gloo", "-np", str(spec.workers),
            "-H", ",".join(f"{h}:{n}" for h, n in spec.hosts)]
    if len(spec.hosts) == 1 and spec.hosts[0][0] == "localhost":
        argv += ["--network-interface", "lo"]  # one machine: keep rendezvous and ring on loopback
    # horovodrun forwards its own environment to the workers.
    return Rendered(tuple(argv) + spec.program, dict(spec.env))
