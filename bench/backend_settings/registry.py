"""The backend names: `BACKENDS` is the only list of them. The matrix's `backend.name` vocabulary and its
per-backend sections (`backend.<name>`) derive from it, and so do the names analysis counts as measured sources.

It sits below the backends (their code is named here as text, imported only when a backend is chosen by
bench.backends.make_backend), so the matrix schema and analysis can read the names without loading any backend.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class BackendEntry:
    impl: str  # "module:Class" of the backend
    config: str | None = None  # "module:Class" of its own matrix section, `backend.<name>`; None = it has none


BACKENDS: dict[str, BackendEntry] = {
    "local": BackendEntry("bench.backends.local.backend:LocalBackend"),
    "slurm": BackendEntry("bench.backends.slurm:SlurmBackend", "bench.backend_settings.slurm:SlurmConfig"),
    "azureml": BackendEntry("bench.backends.azureml.backend:AzureMLBackend",
                            "bench.backend_settings.azureml:AzureMLConfig"),
    "hosts": BackendEntry("bench.backends.hosts.backend:HostsBackend", "bench.backend_settings.hosts:HostsConfig"),
    "kubernetes": BackendEntry("bench.backends.kubernetes.backend:KubernetesBackend",
                               "bench.backend_settings.kubernetes:KubernetesConfig"),
}


def load(ref: str):
    """The object a "module:Name" reference names."""
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)
