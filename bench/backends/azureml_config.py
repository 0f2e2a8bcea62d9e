"""The matrix's `backend.azureml` section: which workspace, clusters and image cells are submitted to.

The workspace is named here or in a config file / env (AZUREML_SUBSCRIPTION_ID, AZUREML_RESOURCE_GROUP,
AZUREML_WORKSPACE); credentials never are: DefaultAzureCredential finds them at submit time.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class AzureMLConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    subscription_id: str | None = None
    resource_group: str | None = None
    workspace: str | None = None
    # A workspace config.json (as the Azure portal downloads it); used when the three fields above are not set.
    config_file: str | None = None
    # Compute cluster per catalogue GPU key; missing keys fall back to "bench-<key lowercased>".
    clusters: dict[str, str] = Field(default_factory=dict)
    # Registered environment or image URI; null = the image rendered from docker/ for the cell's framework/MPI/CUDA.
    environment: str | None = None
    image_registry: str | None = None
    experiment: str = "bench"
