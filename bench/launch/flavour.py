"""What one MPI flavour is to bench. Each flavour module (openmpi, intelmpi, mpich, gloo) defines one subclass of
`Flavour` and one instance of it; `bench.launch.LAUNCHERS` lists them, and everything that differs between flavours is
asked of that instance:

- `render`: the launcher's argv and env for a LaunchSpec (one host or several, with the interface and ssh settings);
- `fabric_env`: its own settings for the `ib` axis (NCCL and UCX are shared layers, bench.launch.fabric);
- `debug` / `layers`: the switches that make its transport visible, and the shared layers whose output counts;
- `parse`: its reading of a job's log into the effective transport (bench.records.transport reads with it);
- `abi` / `runtime_prefix` / `libmpi_in_venv`: which Horovod build and environment runs its cells, and where that
  environment's libmpi sits (bench.launch.runtimes, bench.images.recipes);
- `image`: what a container image installs for it (bench.images.recipes, docker/Dockerfile.j2);
- `controller`: Horovod's controller under it, which `bench doctor`'s probe (bench/execution/doctor.py) must see
  at work;
- `native`, `ib_without_sriov`, `azureml_launch`, `launcher_env`: what planning and Azure ML need from it;
- `progress_threads`, `stand_in_rank`: what the expected value needs (handed down to bench.analysis by its callers
  through `bench.launch.analysis_facts()`, since analysis sits below this layer);
- `mpi_operator_implementation`: the Kubernetes MPI operator's `mpiImplementation` for its MPIJobs;
- `srun_starts_ranks`: whether Slurm's `srun --mpi=pmix` can start its ranks (a pyxis container needs that).

tests/test_registries.py checks every registered flavour has every piece, and names the piece that is missing.
A flavour is data and rendering: it starts nothing itself.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from bench.launch.spec import LaunchSpec, Rendered, Ssh

if TYPE_CHECKING:
    from bench.launch.runtimes import Runtime
    from bench.records.transport import Transport


@dataclass(frozen=True)
class ImageRecipe:
    """What a container image installs for a flavour (rendered by bench/images/recipes.py through docker/Dockerfile.j2).
    Images built with scripts/install.sh get the runtime from there; `wheel` is what the legacy generation, which
    cannot run install.sh, installs itself (the same pin as install.sh: a test keeps them equal)."""
    apt: tuple[str, ...] = ()  # Debian/Ubuntu packages
    wheel: str | None = None  # its runtime as a pinned wheel: into the venv, or into the flavour's runtime_prefix
    runs_on: str | None = None  # no image of its own: its cells run on this (other) flavour's image
    abi_note: str | None = None  # why it builds against `abi`, when that is not its own name (Dockerfile header)


class Flavour:
    name: str  # the matrix's `mpi` value
    title: str  # as people write it, for messages
    tool: str  # the program that starts the processes
    # The MPI ABI its Horovod build links, which picks the environment (a key of bench.launch.runtimes.ABIS).
    abi: str
    # Where, inside that environment, its own runtime sits when it is not the environment's own (Intel MPI's prefix):
    # its bin/ comes first on PATH and its lib/ replaces the environment's on the library path.
    runtime_prefix: str | None = None
    # Whether that environment's libmpi is a wheel's, in the venv's lib/ (the MPICH ABI), where the loader must be
    # told to look (a cached Horovod build's RUNPATH names another venv); the Open MPI ABI's comes from the system.
    libmpi_in_venv: bool = False
    controller: Literal["mpi", "gloo"] = "mpi"  # Horovod's controller under it (what the doctor probe must report)
    # How the native engine (PyTorch DDP) is started in its cells: by torchrun, by this flavour's own launcher (with
    # MASTER_ADDR/PORT), or not at all.
    native: Literal["torchrun", "launcher"] | None = None
    ib_without_sriov: bool = False  # reaches InfiniBand on the old RDMA sizes without SR-IOV
    # Azure ML: "mpi" = Azure ML's MpiDistribution starts the ranks (the image's MPI); "own" = the flavour's launcher
    # runs inside a one-process job, which can only reach that one node.
    azureml_launch: Literal["mpi", "own"] = "mpi"
    # Who runs Horovod's allreduce beside the compute under it ("Open MPI's threads": the library's progress and polling
    # threads), as the expected value's step split names the engine's part.
    progress_threads: str
    # Its place when a multi-worker cell's X(1) comes from a 1-worker cell of another flavour (one worker exchanges
    # nothing, so any flavour's rate stands in): lowest first. MPI flavours before Gloo, a worker started by an MPI
    # launcher being the most like an MPI cell's own.
    stand_in_rank: int
    # The Kubeflow MPI operator's `spec.mpiImplementation` for its MPIJobs ("OpenMPI", "Intel", "MPICH").
    mpi_operator_implementation: str
    # Whether `srun --mpi=pmix` can start its ranks in place of its launcher (False: the launcher must start them).
    srun_starts_ranks: bool = True
    debug: dict[str, str]  # env that makes its own layer name the transport it chose
    # The shared layers under it (bench.records.transport.SHARED_DEBUG_ENV) whose output counts.
    layers: tuple[str, ...] = ()
    image: ImageRecipe

    def __repr__(self) -> str:
        return f"<flavour {self.name}>"

    # --- launching ------------------------------------------------------------------------------------------------
    def render(self, spec: LaunchSpec, tool: str | None = None) -> Rendered:
        """The launcher's argv (ending with the worker program) and the env it needs; `tool` is its path."""
        raise NotImplementedError(f"flavour {self.name}: no render")

    def ssh_problem(self, ssh: Ssh | None) -> str | None:
        """Why its launcher cannot take these ssh settings (one line), or None: for planning, before a render."""
        return None

    def fabric_env(self, spec: LaunchSpec) -> dict[str, str]:
        """Its own settings for the fabric (spec.ib, spec.iface) as environment variables."""
        return {}

    def launcher_env(self, spec: LaunchSpec) -> dict[str, str]:
        """What `render` says with launcher flags, as environment variables: for launch lines bench does not write
        (Azure ML writes the mpirun line itself)."""
        return self.fabric_env(spec)

    # --- reading its log --------------------------------------------------------------------------------------------
    def parse(self, lines: list[str], nodes: int | None) -> Transport:
        """The transport its layer (and `layers`) reported, from log lines with launcher prefixes removed."""
        raise NotImplementedError(f"flavour {self.name}: no log parser")

    # --- this machine -----------------------------------------------------------------------------------------------
    def tool_path(self, runtime: Runtime) -> str | None:
        """The launcher for this runtime: its own bin directories, next to its Python, else PATH."""
        found = runtime.tool(self.tool)
        if found:
            return found
        beside = Path(runtime.python).parent / self.tool
        return str(beside) if beside.exists() else shutil.which(self.tool)
