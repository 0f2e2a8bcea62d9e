"""The one label of a cell, for people: every verb and output names a cell with `cell_label` (the run's progress
lines, `plan`, `check`, `ab`, `history`, JUnit test names, JSON, GitHub summaries, the report's tables).

    cpu/pytorch/gloo/ib=off/2w fp32 b16 64px nchw t1 3+8x5
    H100/pytorch+ddp/openmpi/ib=on/16w/2n/imagenet-jpeg bf16 b256 lw8
    H200/pytorch/gloo/ib=off/1w/imagenet-jpeg fp16 b256 nvjpeg compile=reduce-overhead sgd-foreach

The path part is what a cell is (GPU, framework and engine, MPI flavour, fabric, workers, nodes when more than
one, the data when not synthetic; a collective sweep puts its name before the framework); then the precision,
always; then each workload setting whose value differs from the matrix's default (bench.planning.matrix.Workload,
mirrored in bench/cells/keys.py's WORKLOAD_DEFAULTS), one short token each. Every key of a cell has its token, so two
cells with different ids never share a label (tests/test_cell_label.py checks both). A value the store left empty (None
or NaN) counts as the default.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from bench.cells.keys import WORKLOAD_DEFAULTS
from models.registry.engines import ENGINES


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _on(value: Any) -> bool:
    return value is True or value == 1 or str(value).lower() in ("true", "1")


# Workload key → its token when the value differs from the default. The path part covers model, engine, data,
# data_layout (for real data) and the axes; precision is always shown.
TOKENS: dict[str, Callable[[Any], str]] = {
    "batch_per_gpu": lambda v: f"b{int(v)}",
    "image_size": lambda v: f"{int(v)}px",
    "channels_last": lambda v: "nhwc" if _on(v) else "nchw",
    "threads": lambda v: f"t{int(v)}",
    "loader_workers": lambda v: f"lw{int(v)}",
    "jobs": lambda v: f"j{int(v)}",
    "workers_per_node": lambda v: f"{int(v)}/node",
    "max_message_bytes": lambda v: f"max{int(v)}B",
    "loader": lambda v: str(v),  # pil, nvjpeg, dali (auto is the default)
    "compile": lambda v: f"compile={v}",
    "optimizer_impl": lambda v: f"sgd-{v}",
    "cuda_graphs": lambda v: "cudagraphs" if _on(v) else "no-cudagraphs",
    "seq_len": lambda v: f"T{int(v)}",
    "grad_accum": lambda v: f"ga{int(v)}",
    "activation_checkpointing": lambda v: "ckpt" if _on(v) else "no-ckpt",
    "layout": lambda v: f"({v})",  # the parallel layout's text form (bench/layouts); no brackets: rich markup
    "tp_across_nodes": lambda v: "tp-across" if _on(v) else "no-tp-across",
}

# Warm-up, steps and repeats read together as one token, `warmup+steps x repeats`, when any differs.
PROTOCOL_KEYS = ("warmup_steps", "steps", "repeats")


def _differs(key: str, value: Any) -> bool:
    if _missing(value):
        return False
    default = WORKLOAD_DEFAULTS[key]
    if isinstance(default, bool):
        return _on(value) != default
    if default is None:
        return True
    try:
        return float(value) != float(default)
    except (TypeError, ValueError):
        return str(value) != str(default)


def _nodes(cell: Mapping[str, Any], nodes: Any) -> int | None:
    """The nodes a cell spans: as given (the plan, a store row), else from the catalogue (a baseline's row)."""
    if not _missing(nodes):
        return int(nodes)
    from bench.facts.catalog import catalog  # only here: the verbs' parser imports this module and must stay light

    sku = catalog().get(str(cell.get("gpu")))
    if sku is None or _missing(cell.get("gpus")):
        return None
    per_node = cell.get("workers_per_node")
    return sku.nodes_for(int(cell["gpus"]), None if _missing(per_node) else int(per_node))


def framework_words(framework: Any, engine: Any) -> str:
    """A framework as tables name it, with the engine when it is not Horovod: "pytorch (DDP)", "pytorch (FSDP2)"."""
    spec = ENGINES.get(str(engine))
    return f"{framework} ({spec['label']})" if spec and spec["tag"] else str(framework)


def cell_label(cell: Mapping[str, Any], nodes: int | None = None) -> str:
    """The cell's label (the module docstring has the format). `cell`: a cell dict, a store row or a record, with
    at least the axes; `nodes` where the caller knows it, else the row's own `nodes`, else the catalogue's."""
    get = cell.get
    model = get("model")
    model = WORKLOAD_DEFAULTS["model"] if _missing(model) else model
    tag = ENGINES.get(str(get("engine")), {}).get("tag")  # Horovod, the default, goes unnamed
    framework = str(get("framework")) + (f"+{tag}" if tag else "")
    if model != WORKLOAD_DEFAULTS["model"]:
        framework = f"{model}:{framework}"  # a collective sweep, or another workload (a transformer's configuration)
    path = f"{get('gpu')}/{framework}/{get('mpi')}/ib={'on' if _on(get('ib')) else 'off'}/{int(get('gpus'))}w"
    n = _nodes(cell, nodes if nodes is not None else get("nodes"))
    if n is not None and n > 1:
        path += f"/{n}n"
    data = get("data")
    layout = get("data_layout")
    if not _missing(data) and data != WORKLOAD_DEFAULTS["data"]:
        path += f"/{data}-{layout}"
    tokens = [str(get("precision") or WORKLOAD_DEFAULTS["precision"])]
    if (_missing(data) or data == WORKLOAD_DEFAULTS["data"]) and _differs("data_layout", layout):
        tokens.append(f"layout={layout}")  # no data read, but the setting is part of the cell
    tokens += [token(get(key)) for key, token in TOKENS.items() if _differs(key, get(key))]
    if _differs("optimizer_impl", get("optimizer_impl")) and model != WORKLOAD_DEFAULTS["model"]:
        tokens = [t.replace("sgd-", "adamw-", 1) if t.startswith("sgd-") else t for t in tokens]  # AdamW's kernels
    if any(_differs(key, get(key)) for key in PROTOCOL_KEYS):
        warmup, steps, repeats = (get(k) if not _missing(get(k)) else WORKLOAD_DEFAULTS[k] for k in PROTOCOL_KEYS)
        tokens.append(f"{int(warmup)}+{int(steps)}x{int(repeats)}")
    return f"{path} {' '.join(tokens)}"
