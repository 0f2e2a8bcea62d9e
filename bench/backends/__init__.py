"""Where cells run. `make_backend` builds the one a matrix (or `--backend`) names; each lives in its own module and
is imported only when chosen, so a missing optional SDK affects only that backend."""
from __future__ import annotations

import importlib
from pathlib import Path

from bench.errors import BenchInputError

BACKENDS = {"local": "bench.backends.local:LocalBackend",
            "slurm": "bench.backends.slurm:SlurmBackend",
            "azureml": "bench.backends.azureml:AzureMLBackend"}


def make_backend(name: str, settings, results_dir: Path, timeout_s: float | None = None):
    """`settings` is the matrix's `backend` section (bench.matrix.Backend)."""
    if name not in BACKENDS:
        raise BenchInputError(f"unknown backend '{name}' (known: {', '.join(BACKENDS)})")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls).from_settings(settings, Path(results_dir), timeout_s)
