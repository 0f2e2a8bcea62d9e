"""Which environment runs a cell's workers. Horovod links one MPI ABI when it is built, so there is one environment
per ABI (below); each flavour names its ABI (`Flavour.abi`) and, when its runtime sits in a prefix of its own inside
that environment, that prefix (`Flavour.runtime_prefix`: Intel MPI's, whose libmpi.so.12 stands in for MPICH's)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.launch import flavour_named

# The environments, as scripts/install.sh makes them: <repo>/.venv (the Open MPI ABI: Open MPI from the system, so
# nothing to add to the library path) and, next to it, <repo>/.venv-mpich (the MPICH ABI, whose runtimes are wheels
# in that environment); BENCH_MPICH_VENV points elsewhere.
MAIN_ABI = "openmpi"
ABIS = ("openmpi", "mpich")
MPICH_VENV_VAR = "BENCH_MPICH_VENV"
# Set by every bench image (docker/Dockerfile.j2, `ENV BENCH_MPI=...`; install.sh reads it too): the image has one
# environment, the main one, built for this ABI; flavours of the other ABI are not in the image.
IMAGE_ABI_VAR = "BENCH_MPI"


def image_abi() -> str | None:
    """The one ABI of the image this runs in; None outside an image (both environments, as install.sh makes them)."""
    return os.environ.get(IMAGE_ABI_VAR) or None


def not_in_image(mpi: str) -> bool:
    """True inside an image built for the other ABI (its cells run in another image: bench.images)."""
    abi = image_abi()
    return abi is not None and flavour_named(mpi).abi != abi


@dataclass(frozen=True)
class Runtime:
    python: str
    bin_dirs: tuple[str, ...]  # searched first for the launcher and put first on the workers' PATH
    env: dict[str, str]  # what the launcher and workers need on top of the caller's environment

    def tool(self, name: str) -> str | None:
        for d in self.bin_dirs:
            if (Path(d) / name).exists():
                return str(Path(d) / name)
        return None


def venv_for(mpi: str, python: str = sys.executable) -> Path:
    """The environment (its prefix) that runs cells of this MPI flavour."""
    main = Path(python).parent.parent
    if flavour_named(mpi).abi == (image_abi() or MAIN_ABI):
        return main
    return Path(os.environ.get(MPICH_VENV_VAR) or main.parent / ".venv-mpich")


def runtime_for(mpi: str, python: str = sys.executable) -> Runtime:
    flavour = flavour_named(mpi)
    if flavour.abi not in ABIS:
        raise ValueError(f"flavour {mpi}: abi {flavour.abi!r} has no environment (known: {', '.join(ABIS)})")
    if flavour.abi == MAIN_ABI:
        return Runtime(python, (str(Path(python).parent),), {})
    return _in_venv(mpi, venv_for(mpi, python), os.environ.get("LD_LIBRARY_PATH"))


def image_runtime(mpi: str, python: str) -> Runtime:
    """The runtime inside the cell's own bench image (bench.images.recipes): one environment, `python`'s, built for
    the flavour's ABI (docker/Dockerfile.j2), its runtime wheels in it. For launch lines rendered here and run in a
    pod (the Kubernetes backend), where neither this machine's environments nor its library path apply."""
    flavour = flavour_named(mpi)
    if flavour.abi == MAIN_ABI:
        return Runtime(python, (str(Path(python).parent),), {})
    return _in_venv(mpi, Path(python).parent.parent, None)


def _in_venv(mpi: str, venv: Path, library_path: str | None) -> Runtime:
    flavour = flavour_named(mpi)
    bins = (str(venv / "bin"),)
    # libmpi.so.12 by search path, not by the build's RUNPATH (a cached Horovod build may come from another checkout):
    # the environment's own, or the flavour's from its prefix.
    libs = [str(venv / "lib")]
    if flavour.runtime_prefix:
        prefix = venv / flavour.runtime_prefix
        bins = (str(prefix / "bin"),) + bins
        libs = [str(prefix / "lib")]
    if library_path:
        libs.append(library_path)
    return Runtime(str(venv / "bin" / "python"), bins, {"LD_LIBRARY_PATH": os.pathsep.join(libs)})
