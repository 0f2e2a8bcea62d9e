"""The parts of a record (bench/records/schema.py): each rank's rate and phases, what ran beside it on its node, the
step times, a collective sweep's rows, and a GPU worker's facts, power and CUDA-event check; with the checks a rate
must pass wherever it appears."""
from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from models.measure.phases import PHASES
from models.registry.collectives import COLLECTIVES

MAX_SAMPLES_PER_SEC = 10_000_000  # far above any machine; larger is a bug, not a measurement


def finite_positive_rate(v: float | None, name: str) -> float | None:
    if v is None:
        return v
    if not math.isfinite(v) or v <= 0 or v > MAX_SAMPLES_PER_SEC:
        raise ValueError(f"{name} must be a finite positive rate below {MAX_SAMPLES_PER_SEC:,}, got {v!r}")
    return v


def generic_rate_names(data: Any) -> Any:
    """Records written before the workload was an axis, and the image workers' today, name the rate images_per_sec:
    the same value (samples / window_s, a sample being an image) under the generic name."""
    if isinstance(data, dict) and any(k.startswith("images_per_sec") for k in data):
        data = {k.replace("images_per_sec", "samples_per_sec", 1) if k.startswith("images_per_sec") else k: v
                for k, v in data.items()}
    return data


class OutsideProcess(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    pid: int = Field(ge=0)
    cpu_s_per_s: float = Field(ge=0)
    cpus: list[int] | None = None  # the CPUs it may run on


class Outside(BaseModel):
    """What else used the rank's node during the window (models/probes/host_load.py), per second of wall time."""

    model_config = ConfigDict(extra="forbid")

    # processes outside the cell, all together (the machine's busy time less the cell's)
    cpu_s_per_s: float = Field(ge=0)
    cell_cpu_s_per_s: float = Field(ge=0)
    cores: int = Field(ge=1)  # CPUs this rank may use
    machine_cores: int | None = Field(None, ge=1)
    steal_s_per_s: float | None = Field(None, ge=0)
    throttles: int | None = Field(None, ge=0)
    mhz: float | None = Field(None, gt=0)
    top: list[OutsideProcess] = []
    rank_cpus: list[int] = []
    # The machine's id (/etc/machine-id): ranks that name the same one share its cores, though their nodes (network
    # namespaces of the emulated cluster, with boot ids of their own) have host names of their own
    machine: str | None = Field(None, max_length=64)


class RankRate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _names(cls, data):
        return generic_rate_names(data)

    rank: int = Field(ge=0)
    host: str
    samples: int = Field(ge=0)
    steps: int = Field(ge=0)
    window_s: float = Field(gt=0)
    busy_s: float = Field(ge=0)
    samples_per_sec: float | None
    # Seconds of the window this rank spent in each phase of its steps (models/measure/phases.py: input, compute,
    # comm_wait, update, other), summed over its steps; absent in records written before the workers timed phases.
    phases_s: dict[str, float] | None = None
    outside: Outside | None = None  # what else used the node meanwhile (absent in records written before 2026-12)

    @field_validator("samples_per_sec")
    @classmethod
    def _rate(cls, v):
        return finite_positive_rate(v, "per-rank samples_per_sec")

    @field_validator("phases_s")
    @classmethod
    def _phases(cls, v):
        for name, seconds in (v or {}).items():
            if name not in PHASES:
                raise ValueError(f"unknown phase {name!r} (known: {', '.join(PHASES)})")
            if not math.isfinite(seconds) or seconds < 0:
                raise ValueError(f"phase {name}: {seconds!r} is not a duration")
        return v


class StepTimes(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mean: float
    median: float
    min: float
    max: float
    p90: float


class CollectiveRow(BaseModel):
    """One message size of a collective sweep (models/workloads/collectives/sweep_worker.py): the slowest rank's time
    per iteration, and nccl-tests' bandwidths at the median time."""

    model_config = ConfigDict(extra="forbid")

    op: Literal[tuple(COLLECTIVES)]
    bytes: int = Field(gt=0)
    iterations: int = Field(gt=0)
    time_median_s: float = Field(gt=0)
    time_p10_s: float = Field(gt=0)
    time_p90_s: float = Field(gt=0)
    time_min_s: float = Field(gt=0)
    time_max_s: float = Field(gt=0)
    algbw_bytes_per_s: float = Field(ge=0)
    busbw_bytes_per_s: float = Field(ge=0)
    # The busiest rank's engine CPU seconds per iteration (its process's CPU time less the calling thread's, which
    # only waits), median; null in sweeps recorded before it was measured.
    cpu_time_median_s: float | None = Field(None, ge=0)
    # Compute and collective on shared cores (CPU allreduce sweeps, the largest size and a few smaller ones; null
    # elsewhere): the probe kernel's rate while the engine idles (the largest size only) and while this size's
    # allreduce is in flight, as fractions of its rate alone (slowest rank), and the allreduce's time under that
    # load (models/workloads/collectives/contention.py).
    idle_compute_ratio: float | None = Field(None, gt=0)
    contended_compute_ratio: float | None = Field(None, ge=0)
    contended_time_median_s: float | None = Field(None, gt=0)
    # That allreduce's time beside the probe over its time alone, in pairs seconds apart (median over the pairs,
    # slowest rank); null in sweeps recorded before store migration 9, which divide by the sweep's own time instead.
    contended_stretch: float | None = Field(None, gt=0)
    # Beside a replay of one training step's gradient stream (the largest size's row of CPU allreduce sweeps over
    # two ranks or more; null elsewhere and before store migration 12): the probe's rate over a backward pass's worth
    # of calls while ResNet-50's 161 gradients are submitted at their ready points, as a fraction of its rate alone
    # (each replay's slowest rank, median over the replays), and how long the stream's last allreduce ended after
    # those calls.
    replay_compute_ratio: float | None = Field(None, gt=0)
    replay_tail_s: float | None = Field(None, ge=0)


class GpuRan(BaseModel):
    """What ran on a GPU worker (models/gpu/facts.py); `sku` is the catalogue entry whose nvidia-smi name it matches,
    added by bench (None: no entry matches)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    sku: str | None = None
    uuid: str | None = None
    compute_capability: str | None = None
    driver: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    nccl: str | None = None
    clocks_sm_mhz: float | None = None
    clocks_mem_mhz: float | None = None
    clocks_max_sm_mhz: float | None = None
    clocks_max_mem_mhz: float | None = None
    power_limit_w: float | None = None
    cudnn_benchmark: bool | None = None
    tf32: bool | None = None
    amp_dtype: str | None = None
    grad_scaler: bool | None = None
    channels_last_input: bool | None = None
    channels_last_params: bool | None = None


class PowerRan(BaseModel):
    """Sampled GPU power over the measured window (models/gpu/power.py): null joules with a note when not sampled."""

    model_config = ConfigDict(extra="forbid")

    source: str | None  # nvml | nvidia-smi | None (nothing to sample with)
    gpus: int = Field(ge=1)
    samples: int = Field(ge=0)  # the fewest readings any GPU had inside the window
    joules: float | None = Field(None, ge=0)
    joules_per_image: float | None = Field(None, ge=0)
    mean_watts_per_gpu: float | None = Field(None, ge=0)
    sm_clock_mhz: float | None = Field(None, gt=0)  # the median SM clock over the window, the slowest GPU's
    note: str | None = None


class CudaEventCheck(BaseModel):
    """The wall-clock meter against CUDA events for the same steps (models/gpu/cuda_timing.py), the worst rank's."""

    model_config = ConfigDict(extra="forbid")

    verdict: Literal["agree", "host_bound", "inconsistent"]
    wall_median_s: float = Field(gt=0)
    event_median_s: float = Field(gt=0)
    ratio: float = Field(gt=0)
    tolerance: float = Field(gt=0)
    steps: int = Field(gt=0)
    rank: int = Field(ge=0)


class PeakMemory(BaseModel):
    """Each rank's peak memory over the measured windows (models/workloads/transformer/pytorch_worker.py PeakMemory):
    the CUDA allocator's peak on a GPU, the process's peak resident set on a CPU."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    bytes_per_rank: list[int | None]
