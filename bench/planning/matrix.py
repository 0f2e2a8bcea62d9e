"""Matrix file: schema (pydantic), validation with file:line errors, and expansion into cells.

Expansion follows GitHub Actions' matrix semantics: the product of `axes`, minus every cell matching an `exclude`
entry, then each `include` entry either extends the base cells it is compatible with (it may not change an original
axis value) or, when it matches none, is added as a new cell.
"""
from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from bench.backend_settings.section import BackendSettings as Backend
from bench.cells.keys import AXIS_KEYS, CELL_KEYS, WORKLOAD_DEFAULTS, WORKLOAD_KEYS
from bench.core.errors import BenchInputError
from bench.core.redact import redact_text
from bench.core.yamlsrc import Located, load_yaml_file, load_yaml_text
from bench.facts.catalog import catalog
from bench.launch import LAUNCHERS
from models.registry.collectives import COLLECTIVES
from models.registry.workloads import COMPILE_MODES, LOADERS, MODEL_WORKLOADS, OPTIMIZER_IMPLS, WORKLOADS, known_model
from models.workloads.transformer.shapes import CONFIGS as TRANSFORMER_CONFIGS
from models.workloads.transformer.shapes import shape_id

MAX_CELLS = 1_000_000

# Names come from the registries (workloads, MPI flavours; backends: bench.backend_settings), never written here
# a second time.
Framework = Literal[tuple(WORKLOADS)]
MpiFlavour = Literal[tuple(LAUNCHERS)]
Precision = Literal["fp32", "fp16", "bf16"]
DataKind = Literal["synthetic", "imagenet"]


class Workload(BaseModel):
    """Defaults for every cell; any of these keys may also be an axis."""

    model_config = ConfigDict(extra="forbid", strict=True)

    # What a cell measures: ResNet-50 training, a transformer language model's (a configuration of
    # models/workloads/transformer/shapes.py, or a shape id naming its numbers: docs/transformer.md), or a collective
    # sweep (docs/collectives.md).
    model: str = "resnet50"
    # Who averages the gradients: Horovod, the framework's own engine (PyTorch DDP), or FSDP2 (transformers only).
    engine: Literal["horovod", "native", "fsdp2"] = "horovod"
    data: DataKind = "synthetic"
    # Real data only: the ImageNet layout read (JPEG folder tree or TFRecord shards), and input workers per worker
    # (0 = automatic).
    data_layout: Literal["jpeg", "tfrecord"] = "jpeg"
    loader_workers: int = Field(0, ge=0, le=64)
    batch_per_gpu: int = Field(64, gt=0, le=65536)
    image_size: int = Field(224, ge=32, le=2048)
    precision: Precision = "fp32"
    warmup_steps: int = Field(10, ge=0, le=100_000)
    steps: int = Field(50, gt=0, le=1_000_000)
    repeats: int = Field(3, gt=0, le=1000)
    # Separate launches of the same cell: the unit for confidence intervals and regression verdicts.
    jobs: int = Field(1, gt=0, le=100)
    channels_last: bool = True
    # Intra-op threads per worker; null = cores on the node / workers on the node.
    threads: int | None = Field(None, gt=0, le=1024)
    # Workers on each node; null = as many as one VM of the SKU has GPUs (a cpu cell: all on one node). Sets the
    # cell's node count: gpus / workers_per_node.
    workers_per_node: int | None = Field(None, gt=0, le=1024)
    # Collective cells: the largest message of the sweep in bytes (float32 elements, so a multiple of 4); the sweep
    # is 4 KiB x 4^k below it, then it. null = ResNet-50's fp32 gradients. Training cells ignore it.
    max_message_bytes: int | None = Field(None, ge=4096, le=1 << 34, multiple_of=4)
    # The training step's settings (docs/gpu.md, "Step settings"; vocabularies from models/registry/workloads.py).
    # Real-data cells only: who decodes the JPEGs (auto: the fastest there is, resolved and recorded by the worker: DALI
    # or nvJPEG on a GPU, Pillow on a CPU; synthetic cells ignore it).
    loader: Literal[LOADERS] = "auto"
    # torch.compile of the model, in this mode (off: eager, as before the key).
    compile: Literal[COMPILE_MODES] = "off"
    # torch.optim.SGD's kernel for the update (default: the workload's own, the fused kernel for PyTorch).
    optimizer_impl: Literal[OPTIMIZER_IMPLS] = "default"
    # Capture the training step in CUDA graphs (GPU cells; how much of the step depends on the engine: docs/gpu.md).
    cuda_graphs: bool = False
    # Transformer cells (image cells ignore them): tokens per sequence (null: the configuration's context), the
    # micro-batches of batch_per_gpu sequences each optimizer step accumulates, and recomputing each block's
    # activations in the backward pass.
    seq_len: int | None = Field(None, ge=8, le=1 << 20)
    grad_accum: int = Field(1, ge=1, le=4096)
    activation_checkpointing: bool = False
    # Transformer cells: the parallel layout in bench/layouts' text form (`dp_shard=2,tp=2,pp=2,schedule=1f1b,m=4`;
    # docs/layouts.md); null: the engine's own data parallelism, as before the key.
    layout: str | None = None
    # A layout cell whose tp group crosses nodes runs only when it asks: to measure a bad fabric (docs/layouts.md).
    tp_across_nodes: bool = False

    @field_validator("layout")
    @classmethod
    def _layout(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from bench.layouts.layout import LayoutError, parse_layout

        try:
            parse_layout(v)
        except LayoutError as e:
            raise ValueError(str(e).split(": ", 1)[-1]) from None  # the key and the value are said around it
        return v

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        if known_model(v):
            return v
        raise ValueError(f"unknown model {v!r} (known: resnet50, {', '.join(TRANSFORMER_CONFIGS)}, a transformer "
                         f"shape id such as {shape_id(TRANSFORMER_CONFIGS['tiny'])}, "
                         f"{', '.join([*COLLECTIVES, *MODEL_WORKLOADS])})")


class MatrixFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1)
    description: str | None = None
    workload: Workload = Workload()
    axes: dict[str, list[Any]]
    exclude: list[dict[str, Any]] = []
    include: list[dict[str, Any]] = []
    backend: Backend = Backend()


def _gpu_key(value: str) -> str:
    if value not in catalog():
        raise ValueError(f"unknown gpu '{value}' (known: {', '.join(catalog())})")
    return value


# One validator per cell key: axis values, include/exclude values and defaults all go through these.
CORE_AXES: dict[str, TypeAdapter] = {
    "gpu": TypeAdapter(str, config=ConfigDict(strict=True)),
    "framework": TypeAdapter(Framework, config=ConfigDict(strict=True)),
    "mpi": TypeAdapter(MpiFlavour, config=ConfigDict(strict=True)),
    "ib": TypeAdapter(bool, config=ConfigDict(strict=True)),
    "gpus": TypeAdapter(int, config=ConfigDict(strict=True)),
}
CORE_DEFAULTS: dict[str, Any] = {"framework": "pytorch", "mpi": "openmpi", "ib": False, "gpus": 1}


def check_cell_keys(axes: tuple[str, ...], workload: tuple[str, ...], defaults: dict[str, Any] | None = None) -> None:
    """bench/cells/keys.py names the keys (and the workload defaults) for code that must not import this module; the
    schema here is what they mean. A key or default changed here and not there stops bench at import, naming both."""
    if axes != AXIS_KEYS or workload != WORKLOAD_KEYS:
        raise RuntimeError(f"bench/cells/keys.py is out of step with bench/planning/matrix.py: AXIS_KEYS must be "
                           f"{axes} and WORKLOAD_KEYS {workload}")
    if defaults is not None and defaults != WORKLOAD_DEFAULTS:
        raise RuntimeError("bench/cells/keys.py is out of step with bench/planning/matrix.py: WORKLOAD_DEFAULTS "
                           f"must be {defaults}")


check_cell_keys(tuple(CORE_AXES), tuple(Workload.model_fields),
                {k: f.default for k, f in Workload.model_fields.items()})


def _check_value(key: str, value: Any) -> Any:
    """Validate one cell value; raises ValueError with a short reason."""
    if key in CORE_AXES:
        try:
            value = CORE_AXES[key].validate_python(value)
        except ValidationError as e:
            raise ValueError(_short(e)) from None
        if key == "gpu":
            _gpu_key(value)
        if key == "gpus" and not 1 <= value <= 100_000:
            raise ValueError(f"gpus must be between 1 and 100000, got {value}")
        return value
    try:
        Workload.model_validate({key: value})
    except ValidationError as e:
        raise ValueError(_short(e)) from None
    return value


def _short(e: ValidationError) -> str:
    err = e.errors()[0]
    msg = err["msg"].replace("Input should be", "must be")
    return redact_text(f"{msg}, got {err.get('input')!r}")  # a bad value may be a secret pasted in the wrong place


class Matrix:
    """A validated matrix file; `cells()` expands it."""

    def __init__(self, spec: MatrixFile, source: Located):
        self.spec = spec
        self.source = source

    @property
    def name(self) -> str:
        return self.spec.name

    def cells(self) -> list[dict[str, Any]]:
        return expand(self.spec, self.source)


def load_matrix(path: str | Path) -> Matrix:
    return _validate(load_yaml_file(path))


def load_matrix_text(text: str, path: str = "<string>") -> Matrix:
    return _validate(load_yaml_text(text, path))


def _validate(src: Located) -> Matrix:
    if not isinstance(src.data, dict):
        raise BenchInputError("the matrix must be a YAML mapping", src.where(()))
    try:
        spec = MatrixFile.model_validate(src.data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        key = ".".join(str(p) for p in loc) or "(top level)"
        if err["type"] == "extra_forbidden":
            known = {(): MatrixFile, ("workload",): Workload, ("backend",): Backend}.get(loc[:-1])
            hint = f" (known: {', '.join(known.model_fields)})" if known else ""
            raise BenchInputError(f"unknown key '{loc[-1]}'{hint}", src.where(loc)) from None
        if err["type"] == "missing":
            raise BenchInputError(f"missing required key '{key}'", src.where(loc[:-1])) from None
        raise BenchInputError(f"{key}: {_short(e)}", src.where(loc)) from None

    axes = spec.axes
    if not axes and not spec.include:
        raise BenchInputError("axes: no axes and no include entries, so no cells", src.where(("axes",)))
    for axis, values in axes.items():
        where = src.where(("axes", axis))
        if axis not in CELL_KEYS:
            raise BenchInputError(f"axes: unknown axis '{axis}' (known: {', '.join(CELL_KEYS)})", where)
        if not values:
            raise BenchInputError(f"axes.{axis}: empty axis (give at least one value)", where)
        seen = []
        for i, value in enumerate(values):
            try:
                _check_value(axis, value)
            except ValueError as e:
                raise BenchInputError(f"axes.{axis}[{i}]: {e}", src.where(("axes", axis, i))) from None
            if any(value == s and type(value) is type(s) for s in seen):
                raise BenchInputError(f"axes.{axis}[{i}]: duplicate value {value!r}", src.where(("axes", axis, i)))
            seen.append(value)

    size = math.prod(len(v) for v in axes.values()) if axes else 0
    if size > MAX_CELLS:
        raise BenchInputError(f"axes: the product has {size:,} cells, more than the limit of {MAX_CELLS:,}",
                              src.where(("axes",)))

    for section in ("exclude", "include"):
        for i, entry in enumerate(getattr(spec, section)):
            if not entry:
                raise BenchInputError(f"{section}[{i}]: empty entry", src.where((section, i)))
            for key, value in entry.items():
                loc = (section, i, key)
                if section == "exclude" and key not in axes:
                    raise BenchInputError(f"exclude[{i}]: '{key}' is not an axis of this matrix "
                                          f"(axes: {', '.join(axes)})", src.where(loc))
                if key not in CELL_KEYS:
                    raise BenchInputError(f"include[{i}]: unknown key '{key}' (known: {', '.join(CELL_KEYS)})",
                                          src.where(loc))
                try:
                    _check_value(key, value)
                except ValueError as e:
                    raise BenchInputError(f"{section}[{i}].{key}: {e}", src.where(loc)) from None

    if axes and "gpu" not in axes:
        raise BenchInputError("axes: missing required axis 'gpu' (a catalogue key, or cpu)", src.where(("axes",)))
    if not axes:
        for i, entry in enumerate(spec.include):
            if "gpu" not in entry:
                raise BenchInputError(f"include[{i}]: a cell must name its gpu (no 'gpu' axis to take it from)",
                                      src.where(("include", i)))
    return Matrix(spec, src)


def _same(a: Any, b: Any) -> bool:
    # YAML's 1 and true are different values here: `ib: 1` must not match `ib: true`.
    return a == b and type(a) is type(b)


def expand(spec: MatrixFile, source: Located | None = None) -> list[dict[str, Any]]:
    """Axes product → exclude → include (GitHub Actions semantics) → defaults filled in, in a stable order."""
    axes = spec.axes
    names = list(axes)
    combos: list[dict[str, Any]] = [dict(zip(names, values)) for values in itertools.product(*axes.values())] \
        if axes else []
    for entry in spec.exclude:
        items = list(entry.items())
        combos = [c for c in combos if not all(_same(c[k], v) for k, v in items)]

    base_count = len(combos)
    axis_names = set(names)
    for i, entry in enumerate(spec.include):
        matched = False
        for combo in itertools.islice(combos, base_count):  # new cells from earlier includes are not extended
            if all(_same(combo[k], v) for k, v in entry.items() if k in axis_names):
                combo.update(entry)
                matched = True
        if not matched:
            if "gpu" not in entry:
                where = source.where(("include", i)) if source else None
                raise BenchInputError(f"include[{i}]: matches no cell of the axes, and the new cell it would add "
                                      f"names no gpu", where)
            combos.append(dict(entry))

    given = {**CORE_DEFAULTS, **spec.workload.model_dump()}
    defaults = {k: given.get(k) for k in CELL_KEYS}  # in CELL_KEYS order; update() keeps that order
    cells = []
    seen: set[tuple] = set()
    for combo in combos:
        cell = defaults.copy()
        cell.update(combo)
        key = tuple(cell.values())
        if key in seen:  # the same cell reached twice (e.g. an include restating a base cell) is one cell
            continue
        seen.add(key)
        cells.append(cell)
    return cells
