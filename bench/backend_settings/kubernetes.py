"""The matrix's `backend.kubernetes` section: which cluster namespace cells go to as Kubeflow jobs, in which image,
and how their pods are placed (bench/backends/kubernetes/backend.py renders and follows them; docs/backends.md,
"Kubernetes").

Values that end up in a manifest are checked twice: here for their shape (names as Kubernetes writes them), and
when rendered, against the operators' own CRD schemas and Kubernetes' core schema, so a setting that makes an
invalid manifest is refused before anything is submitted.
"""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bench.core.redact import SENSITIVE_NAME

# Kubernetes' own name rules (DNS-1123 label / subdomain), and a label key: an optional DNS prefix, then a name.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
LABEL_KEY = r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
# An image reference as a container runtime takes it: no whitespace or quotes (the grammar itself is the runtime's).
IMAGE_REF = r"^[^\s'\"\\]+$"
QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"


class KubernetesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    # Where jobs are created, and who they run as. `context`: a kubeconfig context (null = the current one, or the
    # in-cluster service account when bench itself runs in a pod).
    namespace: str = Field("default", pattern=DNS_LABEL)
    context: str | None = None
    service_account: str | None = Field(None, pattern=DNS_SUBDOMAIN)
    # The image every pod runs. null = the cell's bench image (`bench images list`; MPIJobs its `-mpijob` layer,
    # which has sshd), under `image_registry`; the digest `bench images push` recorded is used when there is one, so
    # a job runs exactly the image that was pushed.
    image: str | None = Field(None, pattern=IMAGE_REF)
    image_registry: str | None = Field(None, pattern=IMAGE_REF)
    image_pull_secret: str | None = Field(None, pattern=DNS_SUBDOMAIN)
    # GPUs of the cluster's GPU nodes: a cell needing more GPUs on one node than this is skipped. Worker pods of one
    # job never share a node (pod anti-affinity), so a cell's node count is its own (gpus / workers_per_node, or the
    # catalogue's VM size when the matrix names no workers_per_node).
    gpus_per_node: int = Field(8, ge=1, le=64)
    gpu_resource: str = Field("nvidia.com/gpu", pattern=LABEL_KEY)
    # The node label that names the GPU model (NVIDIA GPU feature discovery's), and its values per catalogue key
    # where they differ from the catalogue's `gfd_products`: an H100 cell must not land on another GPU.
    gpu_label: str = Field("nvidia.com/gpu.product", pattern=LABEL_KEY)
    gpu_products: dict[str, list[str]] = Field(default_factory=dict)
    # ib: true cells: the extended resource of the RDMA device plugin (e.g. rdma/rdma_shared_device_a, or
    # nvidia.com/hostdev with SR-IOV), one per worker pod; null = the cluster has none, and ib cells are skipped.
    rdma_resource: str | None = Field(None, pattern=LABEL_KEY)
    # ib cells use the node's network (the RDMA shared-device plugin's usual set-up); false with SR-IOV/Multus.
    ib_host_network: bool = True
    # /dev/shm for every pod (a memory-backed emptyDir): NCCL and the loaders' workers need more than the 64 MiB a
    # container gets by default.
    shm_size: str = Field("16Gi", pattern=QUANTITY)
    # Memory asked for per worker pod (requests = limits); null = no request (the node's).
    worker_memory: str | None = Field(None, pattern=QUANTITY)
    node_selector: dict[str, str] = Field(default_factory=dict)
    # As Kubernetes writes them ({key, operator, value, effect, tolerationSeconds}); checked by the core schema.
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    # How long a pod may wait to be scheduled (no GPU free, a node selector no node has) before its cell fails.
    pending_timeout_s: int = Field(900, gt=0)
    # Extra environment variables for every container (names that look secret are rejected).
    env: dict[str, str] = Field(default_factory=dict)
    # engine: native cells: as a PyTorchJob (kubeflow/trainer v1.9's kubeflow.org/v1). Trainer v2's TrainJob needs a
    # runtime the cluster defines; not rendered yet.
    native_job: Literal["pytorchjob"] = "pytorchjob"

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            if not re.match(LABEL_KEY, key) or not re.match(LABEL_VALUE, val):
                raise ValueError(f"node_selector {key}={val}: not a Kubernetes label")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise ValueError(f"env {key!r}: not an environment variable name")
            if SENSITIVE_NAME.search(key):
                raise ValueError(f"env {key}: looks like a secret; use a Kubernetes Secret, not the matrix")
        return value
