"""The engines that average gradients, by the matrix's `engine` value: who starts them and what traffic a step of
each moves. Read by the plan, the launch, the what-if model and the expected value; light, no framework imported."""
from __future__ import annotations

# The engines that average gradients, and who starts them: Horovod's own ranks, or a torch.distributed process group
# (DDP: `native`; FSDP2) that torchrun or an MPI launcher's rank variables start. `label`: how tables name it.
# `traffic`: the bytes each worker moves per step, over a ring allreduce of the gradients (2(n-1)/n of them): DDP and
# Horovod allreduce the gradients (1x); FSDP2 all-gathers the parameters in forward and again in backward and
# reduce-scatters the gradients, (n-1)/n each: 3(n-1)/n, 1.5x (the what-if model's first-order count).
# `forward_traffic`: the part of `traffic` each block's forward pass waits for, FSDP2's forward all-gathers (0.5x:
# one gather of the parameters); the rest moves during backward, where gradients become ready.
# `gradient_traffic`: the part of `traffic` that is the gradients' (what the engine probe,
# models/probes/engine_probe.py, leaves out and the expected value adds back): all of it for DDP and Horovod; FSDP2's
# reduce-scatter, 0.5x (its probe keeps the parameters' gathers: sharded as in the cell, gradient sync off).
# `sweep`: whose collective sweep (models/workloads/collectives/sweep_worker.py --engine) measures the path that traffic
# takes: FSDP2's gathers and reduce-scatters go over the same torch.distributed process group as DDP's allreduce.
ENGINES = {
    "horovod": {"label": "Horovod", "torch_distributed": False, "tag": "", "traffic": 1.0, "forward_traffic": 0.0,
                "gradient_traffic": 1.0, "sweep": "horovod"},
    "native": {"label": "DDP", "torch_distributed": True, "tag": "ddp", "traffic": 1.0, "forward_traffic": 0.0,
               "gradient_traffic": 1.0, "sweep": "native"},
    "fsdp2": {"label": "FSDP2", "torch_distributed": True, "tag": "fsdp2", "traffic": 1.5, "forward_traffic": 0.5,
              "gradient_traffic": 0.5, "sweep": "native"},
}
TORCH_DISTRIBUTED_ENGINES = tuple(name for name, e in ENGINES.items() if e["torch_distributed"])
