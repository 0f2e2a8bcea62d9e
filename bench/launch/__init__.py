"""MPI flavours, one module each (bench/launch/flavour.py says what a flavour owns), and torchrun, the native
engine's launcher. `LAUNCHERS` is the registry: the only list of flavour names (the matrix's `mpi` values)."""
from bench.launch import gloo, intelmpi, mpich, openmpi, torchrun
from bench.launch.flavour import Flavour
from bench.launch.spec import LaunchSpec, NodeLaunch, Rendered, Ssh

# Keyed by the matrix's `mpi` value, in the order reports and `bench doctor` list them; the first is the reference
# the report compares the others with. torchrun starts the native engine's processes (not an MPI flavour).
FLAVOURS: tuple[Flavour, ...] = (openmpi.FLAVOUR, intelmpi.FLAVOUR, mpich.FLAVOUR, gloo.FLAVOUR)
LAUNCHERS: dict[str, Flavour] = {f.name: f for f in FLAVOURS}
TORCHRUN = torchrun


def analysis_facts():
    """What bench.analysis needs of the registered flavours (it sits below this layer and cannot ask them): the
    callers of the expected value build it here and hand it down."""
    from bench.analysis.flavours import FlavourFacts

    flavours = list(LAUNCHERS.values())
    return FlavourFacts(threads={f.name: f.progress_threads for f in flavours},
                        stand_in_order=tuple(f.name for f in sorted(flavours, key=lambda f: f.stand_in_rank)))


def flavour_named(name: str) -> Flavour:
    try:
        return LAUNCHERS[name]
    except KeyError:
        raise ValueError(f"mpi={name!r}: expected one of {', '.join(LAUNCHERS)}") from None


__all__ = ["FLAVOURS", "LAUNCHERS", "TORCHRUN", "Flavour", "LaunchSpec", "NodeLaunch", "Rendered", "Ssh",
           "analysis_facts", "flavour_named"]
