"""The `container:` setting of the hosts and Slurm backends (bench/backends/shared/container.py runs it): which image
every worker of a cell runs in, with which engine, and where the image keeps the worker's Python and models/."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

_WORD = r"^[^\s'\"\\]+$"


class ContainerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    # The image: a name in the nodes' engine storage (bench-pt-tf-openmpi:cpu), a registry reference, or for
    # Apptainer a .sif file or docker:// reference. `bench images list` names the image each cell needs.
    image: str = Field(pattern=_WORD)
    engine: Literal["podman", "docker", "apptainer", "pyxis"] = "podman"
    # Where the image keeps the worker's Python and bench's models/ (docker/Dockerfile.j2's layout).
    python: str = Field("/opt/bench/.venv/bin/python", pattern=_WORD)
    models: str = Field("/opt/bench/models", pattern=_WORD)
