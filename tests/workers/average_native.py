"""Averaging check for the native engine (DistributedDataParallel), started by torchrun or mpirun.

Rank r's gradient for a scalar weight starting at 0 is (r + 1); DDP must leave -mean(r + 1) after one SGD step
with lr = 1. Writes `rank weight launcher hostname` to argv[1].
"""
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from models.workloads import torch_native  # noqa: E402

comm, _, _ = torch_native.init(torch)
model = torch.nn.Linear(1, 1, bias=False)
torch.nn.init.zeros_(model.weight)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=1.0)
ddp(torch.full((1, 1), float(comm.rank + 1))).sum().backward()
opt.step()
launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "mpi"
with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(f"{comm.rank} {model.weight.item()!r} {launcher} {socket.gethostname()}\n")
torch_native.shutdown()
# Past the C++ static destructors: Gloo's thread teardown can abort a process whose result is already written
# ("terminate called without an active exception", seen in CI), which fails the launch for nothing.
torch_native.leave(0)
