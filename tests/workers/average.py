"""Two or more ranks, one SGD step through hvd.DistributedOptimizer: every rank must end at the averaged weights.

Rank r sees gradient (r + 1) for a scalar weight starting at 0; with lr = 1 the averaged step leaves
w = -mean(r + 1) on every rank. A sum would give -(1 + 2 + ...), no reduction would give -(r + 1).
Writes `rank weight controller hostname` to the file given as argv[1] (one line per rank).
"""
import socket
import sys

import horovod.torch as hvd
import torch

hvd.init()
w = torch.nn.Parameter(torch.zeros(1))
opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0), named_parameters=[("w", w)], op=hvd.Average)
hvd.broadcast_parameters({"w": w}, root_rank=0)
loss = (w * (hvd.rank() + 1)).sum()
loss.backward()
opt.step()
with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(f"{hvd.rank()} {w.item()!r} {'mpi' if hvd.mpi_enabled() else 'gloo'} {socket.gethostname()}\n")
hvd.shutdown()
