"""Launchers, one module per MPI flavour; each renders a LaunchSpec into the exact argv and env."""
from bench.launch import gloo, intelmpi, mpich, openmpi, torchrun
from bench.launch.spec import LaunchSpec, Rendered

# Keyed by the matrix's `mpi` value; torchrun starts the native engine's processes (not an MPI flavour).
LAUNCHERS = {m.NAME: m for m in (openmpi, intelmpi, mpich, gloo)}
TORCHRUN = torchrun

__all__ = ["LAUNCHERS", "TORCHRUN", "LaunchSpec", "Rendered"]
