"""Cell identity and the planned form of a cell."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from bench.catalog import GpuSku, catalog
from models.registry import WORKLOADS

AXIS_KEYS = ("gpu", "framework", "mpi", "ib", "gpus")


def workload_version(framework: str) -> str:
    spec = WORKLOADS.get(framework)
    return spec["version"] if spec else "none"


def cell_id(cell: dict[str, Any]) -> str:
    """Short stable hash of the normalised cell (every key, in sorted order, defaults filled in) and its workload's
    version. Same cell → same id on every backend and every day; the id keys resume and history.

    The canonical text is `key=value` pairs joined by `;`: every value is a validated literal, number, bool or null,
    so the text is unambiguous (and ~5x cheaper than JSON when planning 100,000 cells).
    """
    text = ";".join([f"v={workload_version(cell['framework'])}", *(f"{k}={cell[k]}" for k in sorted(cell))])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(slots=True)
class PlannedCell:
    cell: dict[str, Any]
    cell_id: str
    status: str  # planned | skipped
    reason: str | None = None
    nodes: int = 1

    @property
    def sku(self) -> GpuSku:
        return catalog()[self.cell["gpu"]]

    @property
    def runnable(self) -> bool:
        return self.status == "planned"

    def label(self) -> str:
        c = self.cell
        framework = c["framework"] + ("+ddp" if c["engine"] == "native" else "")
        data = "" if c["data"] == "synthetic" else f"/{c['data']}-{c['data_layout']}"
        return f"{c['gpu']}/{framework}/{c['mpi']}/ib={'on' if c['ib'] else 'off'}/{c['gpus']}w{data}"
