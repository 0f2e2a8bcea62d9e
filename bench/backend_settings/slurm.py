"""The matrix's `backend.slurm` section: where and how cells are submitted to a Slurm cluster."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bench.backend_settings.container import ContainerSettings

# Partition and account names go into #SBATCH lines, which sbatch parses itself (not bash): plain names only, so a
# value can never end the line and smuggle shell into the script.
_SLURM_NAME = r"^[A-Za-z0-9_.+-]+$"


class SlurmConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    partition: str | None = Field(None, pattern=_SLURM_NAME)
    account: str | None = Field(None, pattern=_SLURM_NAME)
    # How workers are started inside the allocation: the cell's MPI launcher (mpirun/mpiexec/horovodrun), or srun
    # with a PMI plugin. Gloo cells always use horovodrun.
    launch: Literal["launcher", "srun"] = "launcher"
    srun_mpi: Literal["pmix", "pmi2"] = "pmix"
    # CPU cores per task; null = all of the node's cores split among its workers.
    cpus_per_task: int | None = Field(None, gt=0, le=1024)
    # Cluster CPU nodes' core count, for the reach rule of cpu cells and the default cpus_per_task.
    # null = ask the cluster (`sinfo`, smallest node of the partition); no limit if it does not answer.
    cores_per_node: int | None = Field(None, gt=0, le=4096)
    # GPUs per node in the partition, for the reach rule of GPU cells (0 = a CPU-only partition).
    # null = ask the cluster (`sinfo` GRES gpu count, smallest node); no limit if it does not answer.
    gpus_per_node: int | None = Field(None, ge=0, le=64)
    max_nodes: int = Field(64, gt=0, le=100_000)
    # The interface between nodes (a name, the same on every node, e.g. ib0 or eth1) for multi-node cells: every layer
    # (Open MPI's btl/oob, Hydra's -iface, Gloo, NCCL, UCX) is pinned to it. A CIDR only where every layer of a cell
    # takes one. null = each layer's own choice.
    iface: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:/-]{1,64}$")
    # Whole nodes per job: a throughput benchmark must not share its nodes with other jobs.
    exclusive: bool = True
    # Directory shared by the submit host and the compute nodes (records and logs are written there);
    # null = the results directory, which then must itself be shared.
    shared_dir: str | None = None
    # Run every worker inside this image (bench/backends/shared/container.py): engine pyxis (srun --container-image;
    # needs `launch: srun`, so cells whose ranks srun cannot start are skipped saying so) or apptainer (`apptainer exec
    # IMAGE` as each rank's program, under the cell's launcher or srun). null = the nodes' own Python.
    container: ContainerSettings | None = None

    @model_validator(mode="after")
    def _container_engine(self) -> "SlurmConfig":
        if self.container is not None and self.container.engine not in ("pyxis", "apptainer"):
            raise ValueError(f"container.engine {self.container.engine} is not Slurm's: use pyxis or apptainer")
        return self
