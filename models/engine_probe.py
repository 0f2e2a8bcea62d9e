"""The engine probe, worker side: the cell's own program under its own launcher and engine, with the engine up (Horovod's
background loop, MPI's progress threads, DDP's or FSDP2's Gloo process group) and one small collective a step, but
no gradient traffic: each rank updates its own model. What the cell's ranks compute beside the engine, apart from
what the gradients' allreduce costs (bench/backends/local/engine_probe.py runs it and keeps the figure;
bench/analysis/expected.py builds the expected value on it).

Asked for by the environment (ENV=1), which every launcher forwards to every rank, so the probe is the cell's own
launch command. Imports nothing of bench.
"""
from __future__ import annotations

import os
from typing import Any, Callable

ENV = "BENCH_ENGINE_PROBE"


def active() -> bool:
    return os.environ.get(ENV) == "1"


def ping(torch, device, hvd: Any = None) -> Callable[[], None]:
    """One small collective, the step's only traffic: through Horovod when it is the engine (its background loop
    negotiates it like any tensor), else through torch.distributed's default process group."""
    t = torch.zeros(1, device=device)
    if hvd is not None:
        return lambda: hvd.allreduce(t, name="bench_engine_probe")
    import torch.distributed as dist

    return lambda: dist.all_reduce(t)


ALLREDUCE_TIMES = 3  # timed after one untimed


def time_gradient_allreduce(torch, device, params: int, comm, out: str | None, hvd: Any = None) -> None:
    """After the probe's windows: the engine's allreduce of one step's gradients, all in one buffer (fp32, the
    gradients' dtype), timed ALLREDUCE_TIMES times on every rank; rank 0 writes the median as a record of kind
    `engine_probe` (not a measurement: the store never sees it) for the expected value's communication part."""
    import statistics
    import time

    from models.record import write_record

    buf = torch.ones(params, dtype=torch.float32, device=device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    if hvd is not None:
        reduce = lambda: hvd.allreduce(buf, name="bench_engine_probe_gradients")  # noqa: E731
    else:
        import torch.distributed as dist

        reduce = lambda: dist.all_reduce(buf)  # noqa: E731
    times = []
    for i in range(ALLREDUCE_TIMES + 1):
        comm.barrier()
        sync()
        t = time.perf_counter()
        reduce()
        sync()
        if i:
            times.append(time.perf_counter() - t)
    slowest = comm.allgather_object(statistics.median(times))
    if comm.rank == 0:
        write_record({"kind": "engine_probe", "allreduce_s": max(slowest), "bytes": 4 * params,
                      "times": ALLREDUCE_TIMES}, out)
