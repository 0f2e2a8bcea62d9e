"""The matrix's `backend.slurm` section: where and how cells are submitted to a Slurm cluster."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SlurmConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    partition: str | None = None
    account: str | None = None
    # How workers are started inside the allocation: the cell's MPI launcher (mpirun/mpiexec/horovodrun), or srun
    # with a PMI plugin.
    launch: Literal["launcher", "srun"] = "launcher"
    srun_mpi: Literal["pmix", "pmi2"] = "pmix"
    # CPU cores per task; null = all of the node's cores split among its workers.
    cpus_per_task: int | None = Field(None, gt=0, le=1024)
    # Cluster CPU nodes' core count, for the reach rule of cpu cells (null = no limit known).
    cores_per_node: int | None = Field(None, gt=0, le=4096)
    max_nodes: int = Field(64, gt=0, le=100_000)
    # Directory shared by the submit host and the compute nodes (records and logs are written there).
    shared_dir: str | None = None
