"""Which environment runs a cell's workers. Horovod links one MPI ABI when it is built, so there is one environment
per ABI: Open MPI's (also used for Gloo and torchrun), and MPICH's, shared by MPICH and Intel MPI (same libmpi.so.12;
Intel's is put first on the library path for intelmpi cells)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

ABI = {"openmpi": "openmpi", "gloo": "openmpi", "mpich": "mpich", "intelmpi": "mpich"}
# Next to the main environment: <repo>/.venv (Open MPI ABI) and <repo>/.venv-mpich (MPICH ABI), as scripts/install.sh
# makes them; BENCH_MPICH_VENV points elsewhere.
MPICH_VENV_VAR = "BENCH_MPICH_VENV"
IMPI_PREFIX = Path("opt") / "impi"  # inside the MPICH-ABI venv (scripts/install.sh)


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
    if ABI[mpi] == "openmpi":
        return main
    return Path(os.environ.get(MPICH_VENV_VAR) or main.parent / ".venv-mpich")


def runtime_for(mpi: str, python: str = sys.executable) -> Runtime:
    venv = venv_for(mpi, python)
    if ABI[mpi] == "openmpi":
        return Runtime(python, (str(Path(python).parent),), {})
    bins = (str(venv / "bin"),)
    # libmpi.so.12 by search path, not by the build's RUNPATH (a cached Horovod build may come from another checkout):
    # MPICH's from the venv, or Intel MPI's from its prefix for intelmpi cells.
    libs = [str(venv / "lib")]
    if mpi == "intelmpi":
        impi = venv / IMPI_PREFIX
        bins = (str(impi / "bin"),) + bins
        libs = [str(impi / "lib")]
    if os.environ.get("LD_LIBRARY_PATH"):
        libs.append(os.environ["LD_LIBRARY_PATH"])
    return Runtime(str(venv / "bin" / "python"), bins, {"LD_LIBRARY_PATH": os.pathsep.join(libs)})

