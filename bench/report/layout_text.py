"""How a layout cell's figures read (bench/analysis/layout_cells.py: LayoutFigures, or its as_json() in a status row):
peak memory beside the model's, the pipeline bubble beside (p − 1)/m, each mesh dimension's collective time per step.
The report's layouts section and `bench status -v` both print them with these functions; they compute nothing."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.analysis.missing import MISSING, is_missing

NO_PIPELINE = "no pipeline"


def memory_text(nbytes: float | None) -> str:
    """Bytes as GiB from 1 GiB up, else MiB; a dash when missing."""
    if nbytes is None or is_missing(nbytes):
        return MISSING
    return f"{nbytes / 2**30:,.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:,.1f} MiB"


def share_text(s: float | None, step: float | None) -> str:
    """A time per step in ms, with its share of the median step where there is one; a dash when missing."""
    if s is None or is_missing(s):
        return MISSING
    share = f" ({100 * s / step:.0f}% of a step)" if step and not is_missing(step) else ""
    return f"{s * 1e3:,.1f} ms{share}"


def bubble_text(v: float | None, pipelined: bool = True) -> str:
    """A bubble (idle over busy) as a percentage; NO_PIPELINE where the layout has none, a dash where a pipeline's
    was not recorded."""
    if not pipelined:
        return NO_PIPELINE
    return MISSING if v is None or is_missing(v) else f"{100 * v:.0f}%"


def status_line(cell_id: str, label: str, figures: Mapping[str, Any]) -> str:
    """`bench status -v`'s sentence for a layout cell, from its row's `layout` (LayoutFigures.as_json())."""
    f = figures
    predicted = memory_text(f.get("predicted_memory_bytes")) if f.get("predicted_memory_bytes") is not None \
        else (f.get("predicted_memory_why") or MISSING)
    kind = f" {f['peak_memory_kind']}" if f.get("peak_memory_kind") else ""
    parts = [f"peak memory per rank {memory_text(f.get('peak_memory_bytes'))}{kind} (the model: {predicted})"]
    if f.get("bubble_predicted") is not None:
        parts.append(f"bubble {bubble_text(f.get('bubble_stage0'))} at stage 0, {bubble_text(f.get('bubble_mean'))}"
                     f" over the stages ((p−1)/m: {bubble_text(f.get('bubble_predicted'))})")
    else:
        parts.append(NO_PIPELINE)
    collectives = f.get("collective_s_per_step") or {}
    parts.append("collectives per step: " + (", ".join(f"{d} {share_text(s, f.get('step_s'))}"
                                                       for d, s in collectives.items()) or "none timed"))
    return f"  {cell_id}  {label}: " + "; ".join(parts) + f" (over {f.get('windows', 0)} windows)"
