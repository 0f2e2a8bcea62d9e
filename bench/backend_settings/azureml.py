"""The matrix's `backend.azureml` section: which workspace, clusters and image cells are submitted to.

The workspace is named here or in a config file / env (AZUREML_SUBSCRIPTION_ID, AZUREML_RESOURCE_GROUP,
AZUREML_WORKSPACE); credentials never are: DefaultAzureCredential finds them at submit time. Data is reached by
identity (the job's or the compute's) or through a datastore the workspace holds (SAS kept there), never by a key in
this file: the backend rejects any value here that looks like a storage account key or an inline SAS signature.
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
    # Registered environment ("name:version", "name@latest", "azureml:...") or an image URI with its registry
    # ("myacr.azurecr.io/bench-pt:cuda12"); null = the image for the cell (bench.images.recipes), under image_registry.
    environment: str | None = None
    image_registry: str | None = None
    experiment: str = "bench"
    # Where data=imagenet cells read from, mounted read-only: "azureml://datastores/<name>/paths/<dir>" or an
    # https blob URL the job's identity can read. Null = imagenet cells are skipped on this backend.
    imagenet_uri: str | None = None
    # Extra environment variables for every job (e.g. NCCL_TOPO_FILE for an image that ships one); they override
    # bench's fabric settings. Names that look secret are rejected.
    env: dict[str, str] = Field(default_factory=dict)
