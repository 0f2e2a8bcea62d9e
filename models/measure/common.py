"""What every workload shares: its flags, the measured-window loop, and how a window becomes a record.

All three frameworks go through `measure_windows` (or, for Keras' model.fit, `WindowLoop` driven by a callback), so
they time the same way and write records of the same shape. Imports no framework: each workload passes in its
own step, device synchronisation and collective operations (`Comm`).
"""
from __future__ import annotations

import argparse
import math
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from models.measure.allocator import hold_freed_memory
from models.measure.fail import fail
from models.measure.faults import StepFaults
from models.measure.meter import EmptyWindowError, WindowMeter, combine
from models.measure.phases import PhaseClock
from models.measure.record import write_record
from models.probes import engine_probe, host_load
from models.registry.engines import ENGINES
from models.registry.workloads import COMPILE_MODES, LOADERS, OPTIMIZER_IMPLS


def parse_args(description: str, argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--warmup-steps", type=int, default=10, help="run before the first window, not measured")
    p.add_argument("--steps", type=int, default=50, help="steps per measured window")
    p.add_argument("--repeats", type=int, default=3, help="measured windows")
    p.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True,
                   help="NHWC layout (PyTorch memory format; TensorFlow data_format)")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads per worker; 0 = cores / local workers")
    # Every engine the matrix takes (models/registry/engines.py): one a workload does not run is refused by its rules,
    # with the plan's text, not by argparse.
    p.add_argument("--engine", choices=tuple(ENGINES), default="horovod",
                   help="who averages gradients: Horovod, or the framework's own (PyTorch DDP)")
    p.add_argument("--data", choices=("synthetic", "imagenet"), default="synthetic")
    p.add_argument("--data-dir", default=None, help="ImageNet root (train/<wnid>/*.JPEG and/or tfrecord/train-*)")
    p.add_argument("--data-layout", choices=("jpeg", "tfrecord"), default="jpeg")
    p.add_argument("--loader-workers", type=int, default=0, help="input pipeline workers; 0 = automatic")
    # The step settings (models/workloads/resnet50/step_settings.py; vocabularies in models/registry/workloads.py). A
    # workload refuses the values it does not implement (WORKLOAD_RULES), with the plan's text.
    p.add_argument("--loader", choices=LOADERS, default="auto",
                   help="who decodes real data's JPEGs: auto (the fastest there is), pil, nvjpeg, dali")
    p.add_argument("--compile", choices=COMPILE_MODES, default="off", help="torch.compile mode, or off")
    p.add_argument("--optimizer-impl", choices=OPTIMIZER_IMPLS, default="default",
                   help="torch.optim.SGD's kernel (default: the workload's own, fused)")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=False,
                   help="capture the training step in CUDA graphs (GPU)")
    p.add_argument("--hold-freed-memory", action=argparse.BooleanOptionalAction, default=True,
                   help="keep freed memory in the process (glibc mallopt) rather than page-faulting it in every step")
    p.add_argument("--cell-id", default=None)
    p.add_argument("--run-id", default=None)
    p.add_argument("--out", default=None, help="append records (JSON lines) here; default: stdout")
    args = p.parse_args(argv)
    hold_freed_memory(args.hold_freed_memory)  # before the framework allocates anything
    for name in ("batch_size", "image_size", "steps", "repeats", "num_classes"):
        if getattr(args, name) <= 0:
            fail(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.warmup_steps < 0:
        fail("--warmup-steps must be >= 0")
    if args.data == "imagenet":
        if not args.data_dir:
            fail("--data imagenet needs --data-dir")
        if not os.path.isdir(args.data_dir):
            fail(f"dataset directory {args.data_dir} does not exist")
    return args


def threads_for(args: argparse.Namespace, local_size: int) -> int:
    return args.threads or max(1, (os.cpu_count() or 1) // local_size)


def record_base(args: argparse.Namespace, framework: str, version: str, **fields: Any) -> dict[str, Any]:
    """The fields every workload's records start with, then the workload's own (in the order given)."""
    return {"framework": framework, "workload": f"resnet50_{framework}", "workload_version": version,
            "batch_per_worker": args.batch_size, "image_size": args.image_size, "precision": args.precision,
            "channels_last": args.channels_last, **fields}


def report_dropped(rank: int, bad: int, seen: int) -> None:
    """After training on real data: how many images this rank skipped because they did not decode."""
    if bad:
        print(f"bench worker: rank {rank} skipped {bad} undecodable images of {seen}", flush=True)


_LOCAL_RANK_VARS = ("HOROVOD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                    "SLURM_LOCALID", "LOCAL_RANK")
_LOCAL_SIZE_VARS = ("HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE",
                    "LOCAL_WORLD_SIZE")


# How many processes the launcher started in all: horovodrun, Open MPI, Hydra (MPICH, Intel MPI), Slurm's srun.
_WORLD_SIZE_VARS = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")


def import_horovod(module: str):
    """Horovod's binding `module` (horovod.torch, horovod.tensorflow), or None for a worker started alone, which runs
    as one process without it. A worker that a launcher started beside others and that cannot import it stops with
    which module, which environment, why and the fix: running on alone would measure one process and call it the
    cell (it used to show only as "1 workers ran, the cell asked for 2")."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        size = next((int(os.environ[v]) for v in _WORLD_SIZE_VARS if os.environ.get(v, "").isdigit()), 1)
        if size > 1:
            why = " ".join(str(e).split())[:200]
            # the cause and the fix first: the cell's error keeps the head of a long line
            fail(f"{module} cannot be imported in the environment {sys.prefix}: its Horovod was built without this "
                 f"binding, or does not load; `make run` builds it (scripts/install.sh). ImportError: {why}")
        print("bench worker: horovod is not installed; running as a single process", flush=True)
        return None


def local_rank_and_size_from_env() -> tuple[int, int]:
    """What the launcher told this process, for set-up that must happen before Horovod initialises
    (TensorFlow fixes its thread pools and visible GPUs at first use)."""
    rank = next((int(os.environ[v]) for v in _LOCAL_RANK_VARS if os.environ.get(v, "").isdigit()), 0)
    size = next((int(os.environ[v]) for v in _LOCAL_SIZE_VARS if os.environ.get(v, "").isdigit()), 1)
    return rank, size


@dataclass
class Comm:
    """The collectives a measured window needs, from whichever Horovod binding (or none) runs the workload."""

    rank: int
    size: int
    local_size: int
    barrier: Callable[[], None]
    allgather_object: Callable[[Any], list]
    broadcast_object: Callable[[Any], Any]


def single_process_comm() -> Comm:
    """World size 1 without Horovod: same meter, same records (e.g. on a GPU image that has no Horovod). A compute
    probe's copy waits at each barrier for its sibling copies (models/measure/copies.py), so their windows coincide."""
    from models.measure.copies import barrier_from_env

    return Comm(0, 1, 1, barrier_from_env() or (lambda: None), lambda obj: [obj], lambda obj: obj)


@dataclass
class SampleRate:
    """What a workload's sample is, as its records and lines say it. The meter counts samples; `fields` names its
    figures for the record, `line` says the rate, and `unusable` refuses a window whose ranks' summaries show it
    did not really train (None: usable)."""

    fields: Callable[[dict[str, Any]], dict[str, Any]]
    line: Callable[[dict[str, Any]], str]
    unusable: Callable[[list[dict[str, Any]]], str | None] = lambda summaries: None


# The image workloads: a sample is an image (the record names the rate generically, samples_per_sec, as every
# workload's does).
IMAGES = SampleRate(fields=lambda measured: measured, line=lambda m: f"{m['samples_per_sec']:.1f} img/s")


class WindowLoop:
    """Opens and closes measured windows on every rank and turns each into one record on rank 0."""

    def __init__(self, args: argparse.Namespace, comm: Comm, sync: Callable[[], None], base_record: dict[str, Any],
                 instruments: Any = None, rate: "SampleRate | None" = None):
        self.args, self.comm, self.sync, self.base = args, comm, sync, base_record
        self.instruments = instruments  # e.g. models/gpu/window.GpuWindow: timed beside the meter, same window
        self.rate = rate or IMAGES
        self.host = socket.gethostname()
        self.meter: WindowMeter | None = None
        self.load_before = None
        self.failed = False

    def open(self) -> None:
        self.sync()
        # what else ran beside this rank (models/probes/host_load.py): not timed
        self.load_before = host_load.snapshot()
        self.comm.barrier()
        self.meter = WindowMeter()
        self.meter.begin()
        if self.instruments:
            self.instruments.window_open()

    def step_done(self, samples: int) -> None:
        self.sync()
        self.meter.step(samples)

    def close(self, repeat: int, loss: float, extra: dict[str, Any] | None = None) -> bool:
        """Ends the window; returns False on every rank if rank 0 found it unusable (then stop)."""
        self.meter.busy_end()
        self.comm.barrier()
        self.meter.end()
        beside = host_load.outside(self.load_before, host_load.snapshot())
        if beside is not None:
            extra = {**(extra or {}), "outside": beside}
        if self.instruments:
            extra = {**(extra or {}), **self.instruments.window_close(self.meter)}
        summaries = self.comm.allgather_object({**self.meter.rank_summary(self.comm.rank, self.host),
                                                "loss": loss, **(extra or {})})
        ok = True
        if self.comm.rank == 0:
            ok = self._report(repeat, summaries)
        ok = bool(self.comm.broadcast_object(ok))
        self.failed = self.failed or not ok
        return ok

    def _report(self, repeat: int, summaries: list[dict]) -> bool:
        try:
            measured = combine(summaries)
        except EmptyWindowError as e:
            print(f"bench worker: repeat {repeat}: {e}", file=sys.stderr, flush=True)
            return False
        losses = [s["loss"] for s in summaries]
        if not all(math.isfinite(x) for x in losses):
            print(f"bench worker: repeat {repeat}: non-finite loss {losses}", file=sys.stderr, flush=True)
            return False
        why = self.rate.unusable(summaries)
        if why:
            print(f"bench worker: repeat {repeat}: {why}", file=sys.stderr, flush=True)
            return False
        measured = self.rate.fields(measured)
        input_wait = [s.get("input_wait_s") for s in summaries]
        record = {**self.base, "kind": "measurement", "cell_id": self.args.cell_id, "run_id": self.args.run_id,
                  "repeat": repeat, "status": "ok", "world_size": self.comm.size, "local_size": self.comm.local_size,
                  "warmup_steps": self.args.warmup_steps, "measured_steps": self.args.steps,
                  "loss": losses[0], **measured}
        if any(w is not None for w in input_wait):
            record["input_wait_s"] = max(w or 0.0 for w in input_wait)
        if self.instruments:
            record.update(self.instruments.record_fields(summaries, measured["samples"]))
        write_record(record, self.args.out)
        print(f"bench worker: repeat {repeat}: {self.rate.line(measured)} over {self.comm.size} "
              f"workers, window {measured['window_s']:.2f} s, slowest rank {measured['slowest_rank']}", flush=True)
        return True


def measure_windows(args: argparse.Namespace, comm: Comm, train_step: Callable[[Any], Any],
                    loss_value: Callable[[Any], float], sync: Callable[[], None], base_record: dict[str, Any],
                    next_batch: Callable[[], Any] | None = None,
                    batch_samples: Callable[[Any], int] | None = None, phases: PhaseClock | None = None,
                    instruments: Any = None, rate: SampleRate | None = None) -> int:
    """Warm-up steps, then `repeats` barrier-bounded windows of `steps` steps. Returns the process exit code.

    With real data, `next_batch` fetches each step's input; the time spent waiting for it is recorded
    (input_wait_s), and the samples counted are the ones each batch really held. Each rank's step time is split into
    phases (models/measure/phases.py): input and other here, compute/comm_wait/update where `train_step` marks them on
    `phases` (the same clock). `instruments` (GPU workers: models/gpu/window.py) are told of each window and step and
    add their fields to each record. `rate` says what a sample is (default: an image)."""
    fetch = next_batch or (lambda: None)
    clock = phases or PhaseClock()
    # test hooks (models/measure/faults.py): inert unless set, and planted in the cell, never in the engine probe run
    # first
    fault = StepFaults([]) if engine_probe.active() else StepFaults.from_env(comm.rank, args.cell_id)
    for _ in range(args.warmup_steps):
        fault.tick()
        train_step(fetch())
    loop = WindowLoop(args, comm, sync, base_record, instruments, rate)
    before, after = ((instruments.before_step, instruments.after_step) if instruments
                     else (lambda: None, lambda: None))
    for repeat in range(args.repeats):
        loop.open()
        clock.reset()
        loss, waited = None, 0.0
        for _ in range(args.steps):
            clock.open_step()
            t = time.perf_counter()
            batch = fetch()
            waited += time.perf_counter() - t
            clock.mark("input")
            fault.tick()
            before()
            loss = train_step(batch)
            after()
            loop.step_done(batch_samples(batch) if batch_samples and batch is not None else args.batch_size)
            clock.close_step()
        phases_s = clock.summary()
        extra = {**({"phases_s": phases_s} if phases_s else {}), **({"input_wait_s": waited} if next_batch else {})}
        if not loop.close(repeat, loss_value(loss), extra):
            break
    return 1 if loop.failed else 0
