"""Where cells run. `BACKENDS` is the only list of backend names: the matrix's `backend.name` vocabulary and its
per-backend sections (`backend.<name>`) derive from it. Each backend lives in its own module, imported only when
chosen, so a missing optional SDK affects only that backend; its config schema lives in a light module of its own,
which the matrix loads."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchInputError


@dataclass(frozen=True)
class BackendEntry:
    impl: str  # "module:Class" of the backend
    config: str | None = None  # "module:Class" of its own matrix section, `backend.<name>`; None = it has none


BACKENDS: dict[str, BackendEntry] = {
    "local": BackendEntry("bench.backends.local:LocalBackend"),
    "slurm": BackendEntry("bench.backends.slurm:SlurmBackend", "bench.backends.slurm_config:SlurmConfig"),
    "azureml": BackendEntry("bench.backends.azureml:AzureMLBackend", "bench.backends.azureml_config:AzureMLConfig"),
    "hosts": BackendEntry("bench.backends.hosts:HostsBackend", "bench.backends.hosts_config:HostsConfig"),
}


def load(ref: str):
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


def make_backend(name: str, settings, results_dir: Path, timeout_s: float | None = None):
    """`settings` is the matrix's `backend` section (bench.backends.settings.BackendSettings)."""
    if name not in BACKENDS:
        raise BenchInputError(f"unknown backend '{name}' (known: {', '.join(BACKENDS)})")
    return load(BACKENDS[name].impl).from_settings(settings, Path(results_dir), timeout_s)
