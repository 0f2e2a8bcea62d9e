"""Where cells run. The names and each backend's settings schema are in bench/backend_settings/ (`BACKENDS`, the
only list of names, is re-exported here); each backend lives in its own module, imported only when chosen, so a
missing optional SDK affects only that backend."""
from __future__ import annotations

from pathlib import Path

from bench.backend_settings.registry import BACKENDS, BackendEntry, load
from bench.core.errors import BenchInputError

__all__ = ["BACKENDS", "BackendEntry", "load", "make_backend"]


def make_backend(name: str, settings, results_dir: Path, timeout_s: float | None = None):
    """`settings` is the matrix's `backend` section (bench.backend_settings.section.BackendSettings)."""
    if name not in BACKENDS:
        raise BenchInputError(f"unknown backend '{name}' (known: {', '.join(BACKENDS)})")
    return load(BACKENDS[name].impl).from_settings(settings, Path(results_dir), timeout_s)
