"""The collective sweeps (docs/collectives.md): their worker, version and bus bandwidth factor."""
from __future__ import annotations

# Cell kinds beside ResNet-50 training (the cell key `model`): a collective sweep, run by the same engine and launcher
# a training cell of the same settings uses. Not a framework: its cells name the framework whose binding runs it.
# One worker program runs every op (`--op`). `bus_factor` is nccl-tests' bus bandwidth factor (its
# doc/PERFORMANCE.md), busbw = algbw x factor over n ranks: the share of the message each link carries in the ring
# algorithm, so busbw compares with a link's rate whatever n is. The one table of them: the worker and the record's
# validation both read it.
# The point-to-point ops' reason to run through torch.distributed only: the plan's and the worker's line.
NO_POINT_TO_POINT = "Horovod has no point-to-point send and receive"
COLLECTIVES = {
    "allreduce": {
        "script": "workloads/collectives/sweep_worker.py",
        "version": "1",
        "frameworks": ("pytorch",),  # horovod.torch or torch.distributed move the tensors
        "bus_factor": lambda n: 2 * (n - 1) / n,  # reduce-scatter then allgather: 2(n-1)/n of the message per link
        "bus_formula": "2(n-1)/n",
    },
    "allgather": {
        "script": "workloads/collectives/sweep_worker.py",
        "version": "1",
        "frameworks": ("pytorch",),
        "bus_factor": lambda n: (n - 1) / n,  # each rank receives the n-1 slices it does not hold
        "bus_formula": "(n-1)/n",
    },
    # Each rank's input is the whole message (n slices); it receives its slice of the sum: FSDP's gradient traffic.
    "reduce_scatter": {
        "script": "workloads/collectives/sweep_worker.py",
        "version": "1",
        "frameworks": ("pytorch",),
        "bus_factor": lambda n: (n - 1) / n,  # each rank sends the n-1 slices it does not keep
        "bus_formula": "(n-1)/n",
    },
    "broadcast": {
        "script": "workloads/collectives/sweep_worker.py",
        "version": "1",
        "frameworks": ("pytorch",),
        "bus_factor": lambda n: 1.0,  # every link carries the whole message once
        "bus_formula": "1",
    },
    # A pipeline's traffic: each rank sends the message to the next rank and receives the previous one's (a ring
    # shift, nccl-tests' sendrecv), point to point. Horovod has no send or receive: torch.distributed's only.
    "sendrecv": {
        "script": "workloads/collectives/sweep_worker.py",
        "version": "1",
        "frameworks": ("pytorch",),
        "engines": ("native",),
        "engines_why": NO_POINT_TO_POINT,
        "bus_factor": lambda n: 1.0,  # each link carries the whole message once, one way
        "bus_formula": "1",
    },
    # The same ring shift as a pipeline schedule posts it: torch.distributed.pipelining's 1F1B fuses a stage's send
    # with its next receive in one batch_isend_irecv, the send first (`fwd_sends + bwd_recvs`, `bwd_sends +
    # fwd_recvs` in torch 2.13's schedules.py), and waits for both. A pipeline layout's `pp` traffic is priced from
    # this op where it was measured (bench/layouts/steptime.py).
    "pipeline_p2p": {
        "script": "workloads/collectives/sweep_worker.py",
        "version": "1",
        "frameworks": ("pytorch",),
        "engines": ("native",),
        "engines_why": NO_POINT_TO_POINT,
        "bus_factor": lambda n: 1.0,  # as sendrecv: each link carries the whole message once, one way
        "bus_formula": "1",
    },
}

# ResNet-50's fp32 gradients, 25,557,032 parameters x 4 bytes: what one training step reduces, and the default
# largest message of a collective sweep.
RESNET50_GRADIENT_BYTES = 25_557_032 * 4
