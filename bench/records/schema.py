"""The versioned record schema: what a worker reports for one measured repeat, plus what bench adds around it.

Workers (models/) write plain JSON; this model is the gate every record passes before it reaches the store. An ok
record must be internally consistent: its global rate is recomputed from its own per-rank data. Its parts (a rank's
rate, a collective row, what ran on a GPU, ...) are bench/records/parts.py's.
"""
from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bench.core.errors import BenchInputError
from bench.records.parts import (CollectiveRow, CudaEventCheck, GpuRan, PeakMemory, PowerRan, RankRate, StepTimes,
                                 finite_positive_rate, generic_rate_names)
from models.registry.collectives import COLLECTIVES
from models.registry.workloads import COMPILE_MODES, CUDA_GRAPH_SCOPES, LOADERS, OPTIMIZER_IMPLS

SCHEMA_VERSION = 1
Status = Literal["ok", "failed", "timeout", "skipped", "interrupted"]
COLLECTIVE_MODELS = tuple(COLLECTIVES)  # cell `model` values whose records carry `collective` rows, not images/sec


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _names(cls, data):
        return generic_rate_names(data)

    schema_: int = Field(SCHEMA_VERSION, alias="schema")
    kind: Literal["measurement"] = "measurement"
    run_id: str
    cell_id: str
    job: int = Field(0, ge=0)
    repeat: int = Field(ge=0)
    status: Status
    error: str | None = None
    cell: dict[str, Any]
    nodes: int = Field(1, ge=1)

    # The measured window (ok records).
    warmup_steps: int | None = Field(None, ge=0)
    measured_steps: int | None = Field(None, gt=0)
    samples: int | None = Field(None, gt=0)
    window_s: float | None = Field(None, gt=0)
    start_unix: float | None = None
    end_unix: float | None = None
    samples_per_sec: float | None = None
    samples_per_sec_per_gpu: float | None = None
    per_rank: list[RankRate] = []
    slowest_rank: int | None = None
    step_time_s: StepTimes | None = None
    loss: float | None = None

    # What ran.
    framework: str | None = None
    workload: str | None = None
    workload_version: str | None = None
    world_size: int | None = Field(None, ge=1)
    local_size: int | None = Field(None, ge=1)
    batch_per_worker: int | None = Field(None, gt=0)
    image_size: int | None = None
    precision: str | None = None
    channels_last: bool | None = None
    threads_per_worker: int | None = None
    device: str | None = None
    engine: str | None = None
    data_format: str | None = None
    input_wait_s: float | None = Field(None, ge=0)
    data: str | None = None
    data_layout: str | None = None
    loader_workers: int | None = None
    # What ran of the step settings (the cell holds what was asked; null from other frameworks and older workers):
    # the JPEG loader `loader: auto` resolved to (real data only), torch.compile's mode (off: eager), the SGD kernel
    # the update ran, and what CUDA graphs captured (null: none).
    loader: Literal[LOADERS[1:]] | None = None
    compile: Literal[COMPILE_MODES] | None = None
    optimizer_impl: Literal[OPTIMIZER_IMPLS[1:]] | None = None
    cuda_graphs: Literal[CUDA_GRAPH_SCOPES] | None = None
    env_probe: dict[str, Any] = {}
    command: list[str] = []
    launch_env: dict[str, str] = {}
    requested_transport: str | None = None
    effective_transport: str = "unknown"
    # match | mismatch | unknown (the log did not show the path that matters), and the log line that decided.
    transport_verdict: str | None = None
    transport_evidence: str | None = None
    log_tail: str | None = None
    # Collective cells (model: allreduce, allgather, broadcast): one row per message size; their image rates stay null.
    collective: list[CollectiveRow] = []
    # GPU workers: what ran on the GPU, energy over the window, the CUDA-event cross-check (null on a CPU).
    gpu: GpuRan | None = None
    power: PowerRan | None = None
    cuda_events: CudaEventCheck | None = None
    # Transformer cells (models/workloads/transformer/pytorch_worker.py; null for images): what a sample is and how many
    # tokens it holds, the rate in tokens, FLOPs per sample by the stated convention, the configuration that ran, the
    # step's settings as the worker resolved them, the first step's loss (the window's must have fallen below it), each
    # rank's peak memory, and the engine's own facts (FSDP2's resharding, DDP's buckets).
    sample_unit: str | None = None  # image, sequence, or a registered workload's (models/registry/workloads.py)
    tokens_per_sample: int | None = Field(None, gt=0)
    tokens_per_sec: float | None = None
    tokens_per_sec_per_gpu: float | None = None
    flops_per_sample: float | None = Field(None, gt=0)
    flops_convention: str | None = None
    model: str | None = None
    shape: dict[str, Any] | None = None
    params: int | None = Field(None, gt=0)
    micro_batch: int | None = Field(None, gt=0)
    grad_accum: int | None = Field(None, gt=0)
    seq_len: int | None = Field(None, gt=0)
    sdpa_kernel: str | None = None
    compile_scope: str | None = None  # what torch.compile covered: each block, and the head with its loss
    activation_checkpointing: bool | None = None
    optimizer: str | None = None
    lr: float | None = None
    loss_initial: float | None = None
    peak_memory: PeakMemory | None = None
    fsdp: dict[str, Any] | None = None
    ddp: dict[str, Any] | None = None
    # A layout cell's (docs/layouts.md): its degrees and mesh, the pipeline bubble measured per rank beside
    # (p − 1)/m, each mesh dimension's collective seconds per step (models/workloads/transformer/layout_run.py)
    layout: dict[str, Any] | None = None

    @field_validator("samples_per_sec", "samples_per_sec_per_gpu")
    @classmethod
    def _rates(cls, v, info):
        return finite_positive_rate(v, info.field_name)

    @model_validator(mode="after")
    def _consistent(self) -> "Record":
        if self.schema_ > SCHEMA_VERSION:
            raise ValueError(f"record schema {self.schema_} is newer than this bench ({SCHEMA_VERSION})")
        if self.status != "ok":
            if not self.error:
                raise ValueError(f"a {self.status} record must say why (error)")
            return self
        if self.cell.get("model") in COLLECTIVE_MODELS:
            return self._consistent_collective()
        if self.collective:
            raise ValueError("a training record carries collective rows")
        for name in ("samples", "window_s", "samples_per_sec", "measured_steps"):
            if getattr(self, name) is None:
                raise ValueError(f"an ok record needs {name}")
        if not self.per_rank:
            raise ValueError("an ok record needs per_rank rates")
        rank_samples = sum(r.samples for r in self.per_rank)
        if rank_samples != self.samples:
            raise ValueError(f"samples {self.samples} != sum of per-rank samples {rank_samples}")
        expect = self.samples / self.window_s
        if not math.isclose(self.samples_per_sec, expect, rel_tol=1e-6):
            raise ValueError(f"samples_per_sec {self.samples_per_sec} != samples / window_s = {expect}")
        if self.tokens_per_sec is not None:
            if not self.tokens_per_sample:
                raise ValueError("tokens_per_sec without tokens_per_sample")
            tokens = self.samples_per_sec * self.tokens_per_sample
            if not math.isclose(self.tokens_per_sec, tokens, rel_tol=1e-6):
                raise ValueError(f"tokens_per_sec {self.tokens_per_sec} != samples_per_sec x tokens_per_sample = "
                                 f"{tokens}")
        if self.world_size is not None and self.world_size != len(self.per_rank):
            raise ValueError(f"world_size {self.world_size} but {len(self.per_rank)} ranks reported")
        if self.window_s + 1e-9 < max(r.window_s for r in self.per_rank):
            raise ValueError("window_s is shorter than a rank's own window")
        return self

    def _consistent_collective(self) -> "Record":
        if not self.collective:
            raise ValueError("an ok collective record needs collective rows")
        if self.samples_per_sec is not None or self.per_rank:
            raise ValueError("a collective record has no image rates")
        n = self.world_size or 1
        model = self.cell.get("model")
        for row in self.collective:
            if row.op != model:
                raise ValueError(f"collective {row.bytes} bytes: a {row.op} row in a model={model} cell's record")
            algbw = row.bytes / row.time_median_s
            if not math.isclose(row.algbw_bytes_per_s, algbw, rel_tol=1e-6):
                raise ValueError(f"collective {row.bytes} bytes: algbw {row.algbw_bytes_per_s} != bytes / time {algbw}")
            spec = COLLECTIVES[row.op]
            busbw = algbw * spec["bus_factor"](n)
            if not math.isclose(row.busbw_bytes_per_s, busbw, rel_tol=1e-6, abs_tol=1e-9):
                raise ValueError(f"collective {row.bytes} bytes: busbw {row.busbw_bytes_per_s} != algbw x "
                                 f"{spec['bus_formula']} = {busbw} ({row.op}, n = {n})")
            if not row.time_min_s <= row.time_median_s <= row.time_max_s:
                raise ValueError(f"collective {row.bytes} bytes: median time outside [min, max]")
        return self

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True, allow_nan=False)


def parse_record(data: dict[str, Any] | str, where: str = "record") -> Record:
    """Validate one record (dict or JSON text); any problem is a BenchInputError naming `where`."""
    if isinstance(data, str):
        try:
            data = json.loads(data, parse_constant=_reject_constant)
        except (json.JSONDecodeError, ValueError) as e:
            raise BenchInputError(f"not a valid JSON record: {e}", where) from None
    if not isinstance(data, dict):
        raise BenchInputError("a record must be a JSON object", where)
    try:
        return Record.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "record"
        msg = err["msg"].removeprefix("Value error, ")
        raise BenchInputError(f"{loc}: {msg}", where) from None


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number a record may hold")
