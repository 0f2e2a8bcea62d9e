"""The figures of layout cells (transformer cells whose `layout` key is set, docs/layouts.md "Running layouts"), per
cell over the ok records of its latest complete run, measured beside what bench/layouts predicts:

- the pipeline bubble: stage 0's (the record's `bubble_measured`, idle ÷ busy of the first stage) and the mean over
  the stages (`bubble_measured_mean`), each the median over the cell's windows, beside Megatron-LM's (p − 1)/(v·m);
- the time per step in each mesh dimension's collectives (`collective_s_per_step`: the mean over the ranks), the
  median over the windows, and the cell's median step time (the share it is of a step);
- the peak memory per rank: the largest rank's over every window (`peak_memory`, the CUDA allocator's peak on a GPU,
  the process's peak resident set on a CPU), beside bench/layouts/memory.py's rank_memory for the cell's shape,
  layout, sequence and micro-batch (weights, gradients, optimizer state, activations and the loss of the worst stage,
  at bf16 compute: no process, library or allocator overhead).

The store's columns do not hold these: the report and `bench status` read the JSON of the layout records only
(bench/report/layout_records.py) into one column, LAYOUT_JSON, which this module parses. Pure: frames in, figures
out."""
from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from bench.analysis.layout_prediction import core_share
from bench.analysis.missing import is_missing

LAYOUT_JSON = "layout_json"  # the records' column: a layout record's `layout` and `peak_memory`, compact JSON
_KEY = ["run_id", "cell_id", "job", "repeat"]
MESH_ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "tp", "ep")  # the worker's mesh, outermost first


def in_mesh_order(dims: Iterable[str]) -> tuple[str, ...]:
    """Mesh dimensions in the worker's order, outermost first (any other name after them, by name)."""
    return tuple(sorted(set(dims), key=lambda d: (MESH_ORDER.index(d) if d in MESH_ORDER else len(MESH_ORDER), d)))


def layout_part(record_json: str | None) -> str | None:
    """The part of a record's JSON the figures read (its `layout` and `peak_memory`), as compact JSON; None for a
    record without a layout (or without JSON)."""
    if not isinstance(record_json, str) or not record_json:
        return None
    record = json.loads(record_json)
    if not isinstance(record.get("layout"), Mapping):
        return None
    ranks = [{"host": r.get("host"), "machine": (r.get("outside") or {}).get("machine"),
              "cpus": (r.get("outside") or {}).get("rank_cpus")} for r in record.get("per_rank") or []]
    return json.dumps({"layout": record["layout"], "peak_memory": record.get("peak_memory"), "ranks": ranks},
                      sort_keys=True)


def layout_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """run_id, cell_id, job, repeat and LAYOUT_JSON of store rows that carry record_json (rows without a layout
    are left out)."""
    out = [{"run_id": r["run_id"], "cell_id": r["cell_id"], "job": r.get("job") or 0, "repeat": r["repeat"],
            LAYOUT_JSON: part} for r in rows if (part := layout_part(r.get("record_json"))) is not None]
    return pd.DataFrame(out, columns=[*_KEY, LAYOUT_JSON])


def with_layouts(records: pd.DataFrame, layouts: pd.DataFrame) -> pd.DataFrame:
    """records with LAYOUT_JSON (None where a record has no layout part), matched on run, cell, job and repeat."""
    out = records.drop(columns=[LAYOUT_JSON], errors="ignore")
    if out.empty or layouts.empty:
        return out.assign(**{LAYOUT_JSON: pd.Series(None, index=out.index, dtype=object)})
    left = pd.DataFrame({"run_id": out["run_id"].to_numpy(), "cell_id": out["cell_id"].to_numpy(),
                         "job": out["job"].fillna(0).astype(int).to_numpy() if "job" in out else 0,
                         "repeat": out["repeat"].astype(int).to_numpy()})
    right = layouts.astype({"job": int, "repeat": int}).drop_duplicates(_KEY, keep="last")
    found = left.merge(right, on=_KEY, how="left")  # unique keys on the right: one row per record, in order
    return out.assign(**{LAYOUT_JSON: [None if is_missing(v) else v for v in found[LAYOUT_JSON]]})


@dataclass(frozen=True)
class MemoryPrediction:
    """bench/layouts/memory.py's rank_memory for a cell (bytes of the worst stage's rank), or why there is none."""

    total: float | None = None
    states: float | None = None
    activations: float | None = None
    loss: float | None = None
    why: str | None = None


@dataclass(frozen=True)
class LayoutFigures:
    cell_id: str
    layout: str  # the cell's `layout` key, as the matrix names it
    dimensions: tuple[str, ...]  # the mesh's dimensions, outermost first (tp, pp, dp_shard, ...)
    schedule: str  # none when pp = 1
    microbatches: int
    virtual_stages: int
    windows: int  # the ok records the figures are over
    bubble_stage0: float | None  # idle ÷ busy of the first stage, the median over windows (None: no pipeline)
    bubble_mean: float | None  # the mean over stages, the median over windows
    bubble_predicted: float | None  # (p − 1)/(v·m); None without a pipeline
    collective_s: dict[str, float] = field(default_factory=dict)  # dimension → s per step (median over windows)
    step_s: float | None = None  # the median step time (the median over windows of each window's median)
    peak_memory_bytes: float | None = None  # the largest rank's peak over every window
    peak_memory_kind: str | None = None  # peak_rss (a CPU process) or the allocator's (a GPU)
    predicted_memory: MemoryPrediction = MemoryPrediction(why="not predicted")
    # Each rank's share of a core where ranks outnumber the cores of the machine they share (1.0: enough cores, or a
    # GPU each); None where the records cannot say, with why (bench/analysis/layout_prediction.py core_share).
    core_share: float | None = None
    core_share_why: str | None = None

    @property
    def pipelined(self) -> bool:
        return self.bubble_predicted is not None

    def as_json(self) -> dict[str, Any]:
        """The figures as `bench status --format json` gives them (docs/ci/status-result.schema.json's `layout`)."""
        p = self.predicted_memory
        return {"layout": self.layout, "dimensions": list(self.dimensions), "schedule": self.schedule,
                "microbatches": self.microbatches, "virtual_stages": self.virtual_stages, "windows": self.windows,
                "bubble_stage0": self.bubble_stage0, "bubble_mean": self.bubble_mean,
                "bubble_predicted": self.bubble_predicted, "collective_s_per_step": dict(self.collective_s),
                "step_s": self.step_s, "peak_memory_bytes": self.peak_memory_bytes,
                "peak_memory_kind": self.peak_memory_kind, "predicted_memory_bytes": p.total,
                "predicted_memory_why": p.why}


def _median(values: list[float]) -> float | None:
    values = [float(v) for v in values if not is_missing(v)]
    return statistics.median(values) if values else None


def predicted_memory(cell: Mapping[str, Any]) -> MemoryPrediction:
    """rank_memory for a cell (its model's shape, layout, seq_len, batch_per_gpu and activation checkpointing),
    with the micro-batch the worker trains: batch_per_gpu sequences, split into the layout's m under a pipeline."""
    from bench.layouts.layout import LayoutError, parse_layout
    from bench.layouts.memory import cell_rank_memory
    from bench.layouts.shapes import shape_named

    try:
        shape = shape_named(str(cell.get("model")))
        layout, _ = parse_layout(str(cell["layout"]), world=int(cell["gpus"]))
        seq = int(cell["seq_len"]) if not is_missing(cell.get("seq_len")) else shape.seq
        checkpointing = not is_missing(cell.get("activation_checkpointing")) and bool(cell["activation_checkpointing"])
        m = cell_rank_memory(shape, layout, seq=seq, batch_per_gpu=int(cell["batch_per_gpu"]),
                             checkpointing=checkpointing)
    except (LayoutError, ValueError) as e:
        return MemoryPrediction(why=str(e))
    return MemoryPrediction(total=m.total, states=m.states, activations=m.activations, loss=m.loss)


def cell_layouts(ok: pd.DataFrame) -> dict[str, LayoutFigures]:
    """cell_id → LayoutFigures of every cell in `ok` (the ok records of each cell's latest complete run) whose
    `layout` is set, in `ok`'s order; a record without its LAYOUT_JSON counts towards none of the figures."""
    if ok.empty or "layout" not in ok:
        return {}
    cells = ok[ok["layout"].notna()]
    out: dict[str, LayoutFigures] = {}
    for cell_id, rows in cells.groupby("cell_id", sort=False):
        out[str(cell_id)] = figures_of(rows)
    return out


def parsed(text: str, world: int):
    """The cell's Layout from its key (bench/layouts/layout.py), None where it does not parse."""
    from bench.layouts.layout import LayoutError, parse_layout

    try:
        return parse_layout(text, world=world)[0]
    except LayoutError:
        return None


def figures_of(rows: pd.DataFrame) -> LayoutFigures:
    """One cell's figures from its records (one row per window)."""
    first = rows.iloc[0].to_dict()
    parts = [json.loads(j) for j in (rows[LAYOUT_JSON] if LAYOUT_JSON in rows else []) if isinstance(j, str)]
    layouts = [p["layout"] for p in parts]
    lay = layouts[0] if layouts else {}
    degrees = lay.get("degrees") or {}
    mesh = lay.get("mesh") or {}
    timed = {d for one in layouts for d in (one.get("collective_s_per_step") or {})}
    dims = in_mesh_order({*mesh, *timed})
    collective = {d: v for d in dims
                  if (v := _median([(one.get("collective_s_per_step") or {}).get(d) for one in layouts])) is not None}
    text = parsed(str(first["layout"]), int(first["gpus"]))
    pp = int(degrees.get("pp") or mesh.get("pp") or (text.pp if text is not None else 1))
    peaks = [float(b) for p in parts for b in ((p.get("peak_memory") or {}).get("bytes_per_rank") or [])
             if not is_missing(b)]
    kinds = [(p.get("peak_memory") or {}).get("kind") for p in parts]
    step = _median(list(rows["step_time_median_s"])) if "step_time_median_s" in rows else None
    share, share_why = core_share(next((p["ranks"] for p in parts if p.get("ranks")), []), _gpu(first.get("gpu")))
    predicted = _median([one.get("bubble_predicted") for one in layouts])
    if predicted is None and text is not None:  # no record said it: the layout's own (p − 1)/(v·m)
        predicted = text.bubble
    return LayoutFigures(
        cell_id=str(first["cell_id"]), layout=str(first["layout"]), dimensions=dims,
        schedule=str(lay.get("schedule") or (text.schedule if text is not None else "none")),
        microbatches=int(lay.get("microbatches") or (text.microbatches if text is not None else 1)),
        virtual_stages=int(lay.get("virtual_stages") or (text.virtual_stages if text is not None else 1)),
        windows=len(parts),
        bubble_stage0=_median([one.get("bubble_measured") for one in layouts]) if pp > 1 else None,
        bubble_mean=_median([one.get("bubble_measured_mean") for one in layouts]) if pp > 1 else None,
        bubble_predicted=predicted if pp > 1 else None, collective_s=collective,
        step_s=step, peak_memory_bytes=max(peaks) if peaks else None,
        peak_memory_kind=next((k for k in kinds if isinstance(k, str)), None),
        predicted_memory=predicted_memory(first), core_share=share, core_share_why=share_why)


def _gpu(value) -> str | None:
    return None if is_missing(value) else str(value)
