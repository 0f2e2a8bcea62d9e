"""Planning: every expanded cell gets an id, a node count and a status (planned, or skipped with a reason)."""
from __future__ import annotations

from typing import Any, Protocol

from bench.facts.catalog import catalog
from bench.planning.cell import PlannedCell, cell_id, cell_nodes
from bench.planning.feasibility import build_reason, hardware_reason
from bench.planning.layout_rules import layout_reason


class Reach(Protocol):
    def reach_reason(self, cell: dict[str, Any], nodes: int) -> str | None: ...


def plan_cells(cells: list[dict[str, Any]], backend: Reach | None) -> list[PlannedCell]:
    skus = catalog()
    # Many cells share the fields the rules look at; memoise on those.
    memo: dict[tuple, str | None] = {}
    planned = []
    for cell in cells:
        sku = skus[cell["gpu"]]
        nodes = cell_nodes(cell, sku)
        # Every field a rule (or the backend's reach) reads.
        key = (cell["gpu"], cell.get("model"), cell["framework"], cell["engine"], cell["mpi"], cell["ib"], cell["gpus"],
               cell["precision"], cell["data"], cell["data_layout"], cell["warmup_steps"], cell["workers_per_node"],
               cell["channels_last"], cell.get("loader"), cell.get("compile"), cell.get("optimizer_impl"),
               cell.get("cuda_graphs"), cell.get("seq_len"))
        if key in memo:
            reason = memo[key]
        else:
            reason = hardware_reason(cell, sku) or build_reason(cell)
            if reason is None and backend is not None:
                reason = backend.reach_reason(cell, nodes)
            memo[key] = reason
        if reason is None and cell.get("layout") is not None:  # reads the batch and the layout: not memoised
            reason = layout_reason(cell, sku, nodes)
        planned.append(PlannedCell(cell=cell, cell_id=cell_id(cell), status="skipped" if reason else "planned",
                                   reason=reason, nodes=nodes))
    return planned


def select_cells(planned: list[PlannedCell], text: str | None, where: str = "--where") -> list[PlannedCell]:
    """The planned cells a selection (bench/cells/selection.py's syntax) names, in plan order; all of them for none.
    A selection that names no cell of the matrix is bad input: one line, before anything runs."""
    if text is None or not text.strip():
        return planned
    import pandas as pd

    from bench.cells.selection import select

    frame = pd.DataFrame([{"cell_id": p.cell_id, **p.cell, "nodes": p.nodes} for p in planned])
    picked = select(frame, text, f"the matrix's {len(planned)} cells", where)
    return [planned[i] for i in picked.index]
