"""Launchers, one module per MPI flavour; each renders a LaunchSpec into the exact argv and env."""
from bench.launch import gloo, openmpi
from bench.launch.spec import LaunchSpec, Rendered

LAUNCHERS = {m.NAME: m for m in (openmpi, gloo)}

__all__ = ["LAUNCHERS", "LaunchSpec", "Rendered"]
