"""Smallest real Horovod job: init, one allreduce, and rank 0 prints what ran as one JSON line.

`bench doctor` starts it under each MPI flavour's launcher to tell which flavours work on this machine."""
import json
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))  # run from anywhere

import horovod.torch as hvd  # noqa: E402
import torch  # noqa: E402

from models.probes.envprobe import mpi_library_version  # noqa: E402

hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
if hvd.rank() == 0:
    expected = hvd.size() * (hvd.size() + 1) / 2
    print(json.dumps({"size": hvd.size(), "sum_ok": total == expected, "mpi_enabled": bool(hvd.mpi_enabled()),
                      "mpi_library": (mpi_library_version() or "").splitlines()[0][:120] or None}), flush=True)
hvd.shutdown()
