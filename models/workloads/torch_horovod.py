"""Horovod's ranks as the measured-window loop's `Comm`, for the PyTorch workers (ResNet-50's and the transformer's):
a barrier is a one-element allreduce, objects travel through Horovod's own object collectives."""
from __future__ import annotations

from models.measure.common import Comm


def horovod_comm(hvd, torch) -> Comm:
    barrier_tensor = torch.zeros(1)
    return Comm(hvd.rank(), hvd.size(), hvd.local_size(),
                barrier=lambda: hvd.allreduce(barrier_tensor, name="bench.barrier"),
                allgather_object=hvd.allgather_object,
                broadcast_object=lambda obj: hvd.broadcast_object(obj, root_rank=0))
