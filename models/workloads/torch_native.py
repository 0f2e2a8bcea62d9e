"""PyTorch's own data parallelism (DistributedDataParallel), for comparing with Horovod under the same meter.

Processes come from torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) or from mpirun (OMPI_COMM_WORLD_*,
with MASTER_ADDR/PORT passed by the launcher). Gloo on CPU, NCCL on GPU.
"""
from __future__ import annotations

import os

from models.gpu.plan import plan_device
from models.measure.common import Comm


def _env_int(*names: str, default: int | None = None) -> int:
    for name in names:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    if default is None:
        raise RuntimeError(f"the native engine needs one of {', '.join(names)} from its launcher (torchrun, mpirun)")
    return default


def init(torch) -> tuple[Comm, int, str]:
    """Starts the process group; returns (comm, local_rank, backend)."""
    import torch.distributed as dist

    rank = _env_int("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
    size = _env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
    local_rank = _env_int("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", default=0)
    local_size = _env_int("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", default=1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        raise RuntimeError("the native engine needs MASTER_PORT from its launcher")
    cuda = torch.cuda.is_available()
    dev = plan_device(cuda=cuda, device_count=torch.cuda.device_count() if cuda else 0, local_rank=local_rank)
    backend = "nccl" if dev.cuda else "gloo"
    if dev.cuda:
        torch.cuda.set_device(dev.index)
    dist.init_process_group(backend, rank=rank, world_size=size)
    device = torch.device("cuda", dev.index) if dev.cuda else torch.device("cpu")
    token = torch.zeros(1, device=device)

    def allgather_object(obj):
        out = [None] * size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(obj):
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    comm = Comm(rank, size, local_size, barrier=lambda: dist.all_reduce(token), allgather_object=allgather_object,
                broadcast_object=broadcast_object)
    return comm, local_rank, backend


def shutdown() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        # Gloo aborts the process ("terminate called without an active exception") when one rank tears its pairs
        # down while a peer is still inside a collective or has not reached shutdown; meet first, then destroy.
        dist.barrier()
        dist.destroy_process_group()


def leave(code: int) -> None:
    """Ends a native-engine worker after `shutdown`, straight to the kernel, past the C++ static destructors.

    Its records are already on disk (written and fsync'd one by one), and the process group is destroyed. What is
    left to run is teardown of Gloo's background threads, which can abort the interpreter's exit ("terminate called
    without an active exception", exit 134: seen once on a loaded 2-core machine in a 2-node DDP cell, after both
    measured repeats had been written) and so turn a measured job into a failed one.
    """
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
