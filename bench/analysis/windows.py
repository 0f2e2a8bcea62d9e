"""A cell's measured windows out of the store's per-rank rows: those of the run a table shows, and those of each
earlier run (pure: rows in, dicts out)."""
from __future__ import annotations


def earlier_windows(ranks: list[dict], ok) -> dict[str, list[list[list[dict]]]]:
    """cell_id → the windows of each run of the cell before the one the table shows (run ids start with their UTC
    start time, so they sort in time): what was measured for its parts before."""
    if ok.empty or not ranks:
        return {}
    shown = dict(zip(ok["cell_id"], ok["run_id"]))
    runs: dict[str, dict[str, list[list[dict]]]] = {}
    for r in ranks:
        current = shown.get(r["cell_id"])
        if current is not None and str(r["run_id"]) < str(current):
            runs.setdefault(r["cell_id"], {}).setdefault(r["run_id"], []).append(r["per_rank"])
    return {cell: [w for _, w in sorted(by_run.items())] for cell, by_run in runs.items()}


def windows_of(ranks: list[dict], ok) -> dict[str, list[list[dict]]]:
    """cell_id → the per_rank lists of its windows in the run the table shows (the latest complete one)."""
    if ok.empty or not ranks:
        return {}
    shown = set(zip(ok["cell_id"], ok["run_id"]))
    out: dict[str, list[list[dict]]] = {}
    for r in ranks:
        if (r["cell_id"], r["run_id"]) in shown:
            out.setdefault(r["cell_id"], []).append(r["per_rank"])
    return out
