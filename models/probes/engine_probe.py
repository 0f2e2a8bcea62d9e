"""The engine probe, worker side: the cell's own program under its own launcher and engine, with the engine up
(Horovod's background loop, MPI's progress threads, DDP's or FSDP2's Gloo process group) and a few floats of
traffic a step (`ping`), but no gradient traffic: each rank updates its own model (FSDP2's stays sharded, gradient
sync off). What the cell's ranks compute beside the engine, apart from what the gradients' collectives cost, which
it times afterwards (alone; FSDP2's as its steps with sync on less off; bench/backends/local/engine_probe.py runs
it and keeps the figures; bench/analysis/expected.py builds the expected value on them).

Asked for by the environment, which every launcher forwards to every rank, so the probe is the cell's own launch
command: ENV=1, a launch that is the probe alone (measured again after a cell); FIRST_ENV, the probe first and then
the cell in the same processes (`first_then`), which saves a launch (interpreter, imports, the launcher's and the
engine's start: 2-8 s a probe here, benchmarks/first_run_refs.sh) and measures the engine in the very launch the
cell runs in. Imports nothing of bench.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any, Callable

ENV = "BENCH_ENGINE_PROBE"
# "WARMUP,STEPS,REPEATS,PATH": the probe's windows first, written to PATH, then the cell as asked
FIRST_ENV = "BENCH_ENGINE_PROBE_FIRST"
PHASE_KIND = "engine_probe_phase"  # the record that closes a probe run first: its start, end and exit code
_in_phase = False  # first_then's probe part is running


def active() -> bool:
    """Whether this process is computing as the engine probe (no gradient traffic) right now."""
    return _in_phase or os.environ.get(ENV) == "1"


def first_spec() -> tuple[int, int, int, str] | None:
    """FIRST_ENV's windows and file (None: not asked for, or malformed: then the cell runs alone)."""
    parts = os.environ.get(FIRST_ENV, "").split(",", 3)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[:3]) or not parts[3]:
        return None
    warmup, steps, repeats = (int(p) for p in parts[:3])
    return warmup, steps, repeats, parts[3]


def first_then(args: argparse.Namespace, rank: int, run: Callable[[argparse.Namespace], int]) -> int:
    """`run(args)`, the cell, after `run` as the engine probe where FIRST_ENV asks for it: the same process, engine
    and launch; the probe's windows, timings and a PHASE_KIND record go to FIRST_ENV's file, never to the cell's.
    `run` builds its model and steps afresh each time (the probe's plain optimizer, the cell's averaging one)."""
    global _in_phase
    spec = first_spec()
    if spec is not None and not active():
        warmup, steps, repeats, path = spec
        probe = argparse.Namespace(**{**vars(args), "warmup_steps": warmup, "steps": steps, "repeats": repeats,
                                      "out": path, "cell_id": f"engine-probe-{args.cell_id}"})
        started = time.time()
        _in_phase = True
        try:
            code = run(probe)
        finally:
            _in_phase = False
        if rank == 0:
            from models.measure.record import write_record

            write_record({"kind": PHASE_KIND, "started_unix": started, "ended_unix": time.time(), "code": code},
                         path)
    return run(args)


def ping(torch, device, hvd: Any = None, model: Any = None) -> Callable[[], None]:
    """The step's only traffic, no gradient bytes. Through Horovod: a 1-element tensor for each gradient the cell's
    step submits (each trainable parameter of `model`; one without a model), all submitted, then waited for, so the
    background loop negotiates as many tensors a step as in the cell. With one ping a step, Horovod's loop over
    MPICH had nothing to do between steps and spun in MPI in some launches (its thread 0.23-0.27 CPU-s/s in 3 of 4,
    the probe under the cell's own rate a rank); with a ping per gradient it did not spin in any of 6 launches
    (0.03-0.10 CPU-s/s), and Open MPI's and Intel MPI's probes read within 3% of one ping's (docs/diagnose.md, "An
    engine probe in two modes"). Else one small collective through torch.distributed's default process group (DDP
    and FSDP2 have no per-tensor negotiation)."""
    if hvd is not None:
        tensors = sum(1 for p in model.parameters() if p.requires_grad) if model is not None else 1
        pings = [torch.zeros(1, device=device) for _ in range(max(1, tensors))]

        def negotiated() -> None:
            handles = [hvd.allreduce_async(t, name=f"bench_engine_probe.{i}") for i, t in enumerate(pings)]
            for h in handles:
                hvd.synchronize(h)

        return negotiated
    import torch.distributed as dist

    t = torch.zeros(1, device=device)
    return lambda: dist.all_reduce(t)


ALLREDUCE_TIMES = 5  # timed after one untimed (3 read 0.081-0.196 s for one Open MPI setting in three probes)
# A difference of two steps is noisier than a collective timed alone: 5 pairs read 0.008-0.024 s in six probes of
# the tiny transformer here (0.06 s steps); the pairs cost 2 steps each.
SYNC_PAIRS = 15
SYNC_STEPS = "steps with gradient sync on less off"  # the record's `how` for report_sync_cost's figure
DDP_BUCKET_BYTES = 25 * 2 ** 20  # DDP's default bucket_cap_mb, which bench does not change


def report_timings(comm, out: str | None, nbytes: int, collectives: Callable[[], Any],
                   sync: Callable[[], None] = lambda: None) -> None:
    """Times one step's gradient `collectives` ALLREDUCE_TIMES times (after one untimed), each after a barrier and
    ended by `sync`; rank 0 writes the slowest rank's median as a record of kind `engine_probe` (not a measurement:
    the store never sees it): `allreduce_s`, what the expected value adds to the probe's step. Timed alone, not
    beside a step: on shared cores the ranks compute on every core, so the collectives' work takes turns with
    compute instead of hiding behind it (on this project's 2-core VM, timed beside a step started with the step's
    forward pass, they added 0.06-0.14 s where the cells' steps were 0.1-0.2 s longer than the probe's;
    docs/diagnose.md)."""
    import statistics
    import time

    from models.measure.record import write_record

    def timed() -> float:
        comm.barrier()
        sync()
        t = time.perf_counter()
        collectives()
        sync()
        return time.perf_counter() - t

    alone = [timed() for _ in range(ALLREDUCE_TIMES + 1)][1:]
    figures = comm.allgather_object(statistics.median(alone))
    if comm.rank == 0:
        write_record({"kind": "engine_probe", "allreduce_s": max(figures), "bytes": nbytes,
                      "times": ALLREDUCE_TIMES}, out)


def report_sync_cost(comm, out: str | None, nbytes: int, step: Callable[[bool], None],
                     sync: Callable[[], None] = lambda: None) -> None:
    """FSDP2's report_timings: what its gradient sync adds to a step as FSDP2 pays for it, the step with gradient
    sync on less the step with it off (`step(on)`), SYNC_PAIRS pairs after one untimed pair, the two interleaved.
    Besides the reduce-scatters, sync on copies each unit's gradients into the collective's buffer,
    divides them, and gives the shards gradients that AdamW then updates; timed as bare reduce-scatters, the tiny
    transformer's FSDP2 cell ran 8-12% under its expected value in 5 first runs of 6, and 21% under in one
    (docs/diagnose.md). Rank 0 writes the slowest rank's median difference as `allreduce_s`, as report_timings does."""
    import statistics
    import time

    from models.measure.record import write_record

    def timed(on: bool) -> float:
        comm.barrier()
        sync()
        t = time.perf_counter()
        step(on)
        sync()
        return time.perf_counter() - t

    pairs = [(timed(True), timed(False)) for _ in range(SYNC_PAIRS + 1)][1:]
    figures = comm.allgather_object(max(0.0, statistics.median(a - b for a, b in pairs)))
    if comm.rank == 0:
        write_record({"kind": "engine_probe", "allreduce_s": max(figures), "bytes": nbytes,
                      "times": SYNC_PAIRS, "how": SYNC_STEPS}, out)


def buckets_of(sizes: list[int], cap_bytes: int = DDP_BUCKET_BYTES) -> list[int]:
    """DDP's buckets of fp32 gradients: filled in backward's order (the parameters reversed), up to cap_bytes."""
    out, size = [], 0
    for n in reversed(sizes):
        if not out or size + 4 * n > cap_bytes:
            out.append(0)
            size = 0
        out[-1] += n
        size += 4 * n
    return out


def time_gradient_allreduce(torch, device, sizes: list[int], comm, out: str | None, hvd: Any = None,
                            how: str = "per-tensor") -> None:
    """PyTorch's report_timings: one step's gradients (fp32) as the engine sends them — `per-tensor`: through
    Horovod, one tensor per parameter, each negotiated and fused by its background loop as DistributedOptimizer's
    hooks submit them; `buckets`: DDP's 25 MiB buckets, each filled from the gradients, allreduced over
    torch.distributed's default group and copied back (FSDP2's: report_sync_cost)."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    if hvd is not None:
        bufs = [torch.ones(n, dtype=torch.float32, device=device) for n in sizes]

        def collectives():
            handles = [hvd.allreduce_async(b, name=f"bench_engine_probe_{i}") for i, b in enumerate(bufs)]
            for h in handles:
                hvd.synchronize(h)
    else:
        import torch.distributed as dist

        world = dist.get_world_size()
        # DDP copies each bucket's gradients into the bucket, divides by the world size, allreduces it and copies
        # the result back into the gradients: the copies are its cost on the cores as much as the allreduce
        bufs = [torch.ones(n, dtype=torch.float32, device=device) for n in buckets_of(sizes)]
        grads = [torch.ones_like(b) for b in bufs]

        def collectives():
            works = []
            for b, g in zip(bufs, grads):
                b.copy_(g).div_(world)
                works.append(dist.all_reduce(b, async_op=True))
            for b, g, w in zip(bufs, grads, works):
                w.wait()
                g.copy_(b)

    report_timings(comm, out, 4 * sum(sizes), collectives, sync)
