"""A Record as the store's rows: one `records` row, and one `collectives` row per message size of a sweep."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from bench.cells.keys import CELL_KEYS
from bench.cells.units import unit_of_cell

if TYPE_CHECKING:
    from bench.records.schema import Record


def record_row(record: Record) -> dict[str, Any]:
    cell = record.cell
    slowest = next((r for r in record.per_rank if r.rank == record.slowest_rank), None)
    rates = [r.samples_per_sec for r in record.per_rank if r.samples_per_sec]
    row: dict[str, Any] = {"run_id": record.run_id, "cell_id": record.cell_id, "job": record.job,
                           "repeat": record.repeat,
                           "status": record.status, "error": record.error}
    for key in CELL_KEYS:
        value = cell.get(key)
        row[key] = int(value) if isinstance(value, bool) else value
    unit = unit_of_cell(cell)
    peaks = [b for b in record.peak_memory.bytes_per_rank if b is not None] if record.peak_memory else []
    row.update({
        "sample_unit": unit and unit.sample, "rate_unit": unit and unit.rate,
        "units_per_sample": record.tokens_per_sample or (unit and unit.per_sample),
        "flops_per_sample": record.flops_per_sample, "peak_memory_bytes": max(peaks) if peaks else None,
        "nodes": record.nodes, "samples_per_sec": record.samples_per_sec,
        "samples_per_sec_per_gpu": record.samples_per_sec_per_gpu, "samples": record.samples,
        "window_s": record.window_s,
        "step_time_median_s": record.step_time_s.median if record.step_time_s else None,
        "slowest_rank": record.slowest_rank,
        "slowest_rank_samples_per_sec": slowest.samples_per_sec if slowest else None,
        "world_size": record.world_size, "start_unix": record.start_unix, "end_unix": record.end_unix,
        "requested_transport": record.requested_transport, "effective_transport": record.effective_transport,
        "transport_verdict": record.transport_verdict, "transport_evidence": record.transport_evidence,
        "workload_version": record.workload_version,
        "rank_spread": (max(rates) - min(rates)) / max(rates) if rates else None,
        "input_wait_s": record.input_wait_s,
        # What ran of the step settings (the cell's columns above hold what was asked).
        "effective_loader": record.loader, "effective_optimizer_impl": record.optimizer_impl,
        "effective_cuda_graphs": record.cuda_graphs,
        "record_json": record.to_json(), "written_unix": time.time(),
    })
    return row


def size_rows(record: Record) -> list[dict[str, Any]]:
    cell = record.cell
    stack = {"gpu": cell.get("gpu"), "framework": cell.get("framework"), "mpi": cell.get("mpi"),
             "ib": int(cell["ib"]) if isinstance(cell.get("ib"), bool) else cell.get("ib"),
             "engine": cell.get("engine"), "world_size": record.world_size, "nodes": record.nodes}
    return [{"run_id": record.run_id, "cell_id": record.cell_id, "job": record.job, "repeat": record.repeat,
             **row.model_dump(), **stack} for row in record.collective]
