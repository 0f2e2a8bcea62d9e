"""Cell identity and the planned form of a cell."""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from bench.cells.label import cell_label
from bench.facts.catalog import GpuSku, catalog
from models.registry.collectives import COLLECTIVES
from models.registry.workloads import workload_spec

AXIS_KEYS = ("gpu", "framework", "mpi", "ib", "gpus")


def cell_nodes(cell: dict[str, Any], sku: GpuSku | None = None) -> int:
    """Nodes the cell spans: gpus / workers_per_node, or as many VMs of its SKU as its workers fill."""
    sku = sku or catalog()[cell["gpu"]]
    return sku.nodes_for(cell["gpus"], cell.get("workers_per_node"))


def workload_version(framework: str, model: str = "resnet50") -> str:
    """The version of the worker that measures the cell: the workload's (models/registry/workloads.py), or a
    collective's."""
    spec = COLLECTIVES.get(model) or workload_spec(model, framework)
    return spec["version"] if spec else "none"


# Id scheme 1: the keys a cell had when the scheme was written down. Frozen: never add to or remove from this set
# (a key added to it later would move every id). Their values always enter the id, exactly as they did before the
# scheme had a name, so ids in stores and baselines from before it stay valid.
ID_SCHEME_1_KEYS = frozenset({
    "gpu", "framework", "mpi", "ib", "gpus", "model", "engine", "data", "data_layout", "loader_workers",
    "batch_per_gpu", "image_size", "precision", "warmup_steps", "steps", "repeats", "jobs", "channels_last",
    "threads",
})

# Keys added after scheme 1, each with the value that reproduces the behaviour from before the key existed, as
# recorded when the key was added. Frozen per key: a recorded value never changes, even if the matrix default
# changes later (a default cell then gets a new id, as it should: it now measures something else). A key not
# listed here is recorded as None.
ID_ADDED_KEY_DEFAULTS: dict[str, Any] = {
    "workers_per_node": None,  # unset: nodes from the catalogue (one node for cpu cells), as before the key
    "max_message_bytes": None,  # unset: a training cell (ignores it), or a collective sweep's default largest size
    # The step settings (issue 33), each at the value that keeps every earlier cell's id:
    # Resolved by the worker and recorded: Pillow on a CPU, as before; on a GPU the GPU decoder now (DALI or nvJPEG),
    # so a GPU real-data cell keeps its id and decodes faster; the record's `loader` says which ran.
    "loader": "auto",
    "compile": "off",  # eager, as before
    "optimizer_impl": "default",  # the workload's own update: PyTorch's fused SGD, as before
    "cuda_graphs": False,  # no capture, as before
    # The transformer's step settings (issue 47); image cells ignore them, so every earlier id stays:
    "seq_len": None,  # the configuration's context
    "grad_accum": 1,  # one micro-batch per step
    "activation_checkpointing": False,
    "layout": None,  # the engine's own data parallelism (issue 66), as before the key
    "tp_across_nodes": False,  # a tp group that crosses nodes refused, as before the key
}


def _is_recorded_default(key: str, value: Any) -> bool:
    default = ID_ADDED_KEY_DEFAULTS.get(key)
    return value == default and type(value) is type(default)  # 1 is not True here, as in the matrix


def cell_id_text(cell: dict[str, Any]) -> str:
    """The canonical text a cell id hashes (id scheme 1).

    `v=<workload version>` then `key=value` for the cell's keys in sorted order, joined by `;`. A key of scheme 1
    (`ID_SCHEME_1_KEYS`) always appears; a key added later appears only when its value differs from its recorded
    default (`ID_ADDED_KEY_DEFAULTS`, None when unlisted). So adding a key whose default reproduces today's
    behaviour moves no id, and setting it to anything else gives a new id. Every value is a validated literal,
    number, bool or null, so the text is unambiguous (and ~5x cheaper than JSON when planning 100,000 cells).

    The scheme's version marker is the absence of one: a future scheme 2 would begin its text with `id=2;`, which
    no scheme 1 text can (scheme 1 texts begin with `v=`).
    """
    keys = sorted(k for k in cell if k in ID_SCHEME_1_KEYS or not _is_recorded_default(k, cell[k]))
    version = workload_version(cell["framework"], cell.get("model", "resnet50"))
    return ";".join([f"v={version}", *(f"{k}={cell[k]}" for k in keys)])


def cell_id(cell: dict[str, Any]) -> str:
    """Short stable hash of the cell's canonical text (`cell_id_text`): same cell → same id on every backend and
    every day; the id keys resume, history and baselines."""
    return hashlib.sha256(cell_id_text(cell).encode()).hexdigest()[:12]


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
    def per_node(self) -> int:
        """Workers on each of the cell's nodes."""
        return math.ceil(self.cell["gpus"] / self.nodes)

    @property
    def runnable(self) -> bool:
        return self.status == "planned"

    def label(self) -> str:
        """The cell's one label (bench/cells/label.py)."""
        return cell_label(self.cell, self.nodes)
