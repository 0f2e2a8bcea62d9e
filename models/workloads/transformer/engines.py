"""The three engines that train the transformer data-parallel, and the one training step they share.

- horovod: Horovod's DistributedOptimizer averages each gradient as the backward pass produces it (its own fusion
  cycle), under whichever MPI flavour or Gloo launched the ranks; the weights are broadcast from rank 0 first.
- native: PyTorch's DistributedDataParallel, which all-reduces gradients in ~25 MB buckets as the backward pass
  goes (the ResNet-50 workload's `native` engine, by the same name).
- fsdp2: PyTorch's fully_shard (torch.distributed.fsdp) on every block and on the root: each rank holds 1/N of the
  parameters, all-gathers a block's before its forward and again before its backward, and reduce-scatters its
  gradients; the optimizer steps on the shard. Under bf16 its mixed-precision policy computes in bf16 and reduces
  in fp32 (torchtitan's default), in place of autocast.

Every engine averages gradients over ranks and takes the same AdamW step, so two ranks end a step with the
parameters one process gets on their batches concatenated (tests/test_transformer_engines.py, for each engine).
Gradient accumulation: each micro-batch's loss is divided by the number of micro-batches, and the gradients are
synchronised only after the last (DDP's no_sync, FSDP2's set_requires_gradient_sync, Horovod's
backward_passes_per_step).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

from models.probes import engine_probe
from models.registry.workloads import TRANSFORMER_WORKLOAD

ENGINES = TRANSFORMER_WORKLOAD["engines"]


@dataclass
class Trainer:
    """A model wrapped for its engine, its optimizer, and what the record says about how they ran."""

    model: Any  # what forward runs on (DDP's wrapper, or the fully_shard'ed module)
    module: Any  # the Decoder itself
    optimizer: Any
    engine: str
    grad_accum: int
    autocast: Callable[[], Any]
    no_sync: Callable[[], Any]  # the context for micro-batches before the last
    sync_after: Callable[[], Any] = lambda: None  # FSDP2: re-enable gradient sync for the last micro-batch
    facts: dict[str, Any] = field(default_factory=dict)

    scaler: Any = None  # fp16: torch.amp.GradScaler
    hvd: Any = None  # Horovod's module when it averages: its wait is timed apart from the update
    ping: Any = None  # the engine probe's pings a step (models/probes/engine_probe.ping), timed as the wait

    def step(self, windows, phases=None) -> Any:
        """One optimizer step over `windows`, (grad_accum, micro_batch, seq + 1) token ids; returns the mean loss
        (a tensor: reading it would synchronise the device). `phases` (models/measure/phases.py) is told where compute
        ends, where Horovod's wait for its allreduce ends, and where the update ends; DDP and FSDP2 wait inside
        backward, so their step has compute and update only."""
        from models.workloads.transformer.model import window_loss

        mark = phases.mark if phases is not None else (lambda phase, sync=False: None)
        self.optimizer.zero_grad()  # set_to_none, torch 2's default (Horovod's wrapper takes no argument)
        total = None
        for i in range(self.grad_accum):
            last = i == self.grad_accum - 1
            if last:
                self.sync_after()
            with contextlib.nullcontext() if last else self.no_sync():
                with self.autocast():
                    loss = window_loss(self.model, windows[i]) / self.grad_accum
                (self.scaler.scale(loss) if self.scaler else loss).backward()
            total = loss.detach() if total is None else total + loss.detach()
        mark("compute", sync=True)
        if self.ping is not None:
            self.ping()
            mark("comm_wait", sync=True)
        if self.hvd is not None:
            self.optimizer.synchronize()
            mark("comm_wait", sync=True)
            if self.scaler:
                self.scaler.unscale_(self.optimizer)
            with self.optimizer.skip_synchronize():
                self._update()
        else:
            self._update()
        mark("update", sync=True)
        return total

    def _update(self) -> None:
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def full_parameters(self) -> dict[str, Any]:
        """Every parameter in full on every rank (FSDP2's shards gathered), by name, detached on the CPU."""
        out = {}
        for name, p in self.module.named_parameters():
            t = p.full_tensor() if hasattr(p, "full_tensor") else p
            out[name] = t.detach().float().cpu().clone()
        return out


def adamw(torch, params, *, lr: float, impl: str, device_type: str):
    """AdamW with the kernel asked for; returns (optimizer, the kernel that runs)."""
    kernel = impl
    if impl == "default":
        kernel = "fused" if device_type == "cuda" else "foreach"
    options = {"fused": kernel == "fused", "foreach": kernel == "foreach"}
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.1, **options), kernel


def autocast_for(torch, precision: str, device_type: str, engine: str) -> Callable[[], Any]:
    if precision == "fp32" or engine == "fsdp2":  # FSDP2 casts by its mixed-precision policy
        return contextlib.nullcontext
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    return lambda: torch.autocast(device_type=device_type, dtype=dtype)


def wrap(torch, module, engine: str, *, hvd=None, device=None, precision: str = "fp32", grad_accum: int = 1,
         lr: float = 3e-4, optimizer_impl: str = "default", world_size: int = 1) -> Trainer:
    """The module ready for `engine`, with its AdamW; ranks must already have joined (hvd.init, or the process
    group for native and fsdp2). engine 'none' trains one process with no averaging."""
    device_type = device.type if device is not None else "cpu"
    probe = engine != "none" and engine_probe.active()
    if probe and engine != "fsdp2":
        # The engine probe: every rank its own whole model and AdamW, the engine up, pings and no gradients a step
        # (models/probes/engine_probe.py).
        optimizer, kernel = adamw(torch, module.parameters(), lr=lr, impl=optimizer_impl, device_type=device_type)
        return Trainer(module, module, optimizer, engine, grad_accum, autocast_for(torch, precision, device_type,
                                                                                  "native"),
                       no_sync=contextlib.nullcontext, facts={"optimizer_impl": kernel},
                       scaler=scaler_for(torch, precision, device_type),
                       ping=engine_probe.ping(torch, device, hvd if engine == "horovod" else None, module))
    cast = autocast_for(torch, precision, device_type, engine)
    facts: dict[str, Any] = {}
    if engine == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(device_type, (world_size,))
        dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)
        for block in module.blocks:
            fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=True)
        # The root keeps embedding, final norm and head; not resharded after forward: the backward pass needs them
        # first, so gathering them again would be wasted traffic (what fully_shard does for the root by default).
        fully_shard(module, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
        optimizer, kernel = adamw(torch, module.parameters(), lr=lr, impl=optimizer_impl, device_type=device_type)
        facts["fsdp"] = {"reshard_after_forward": {"blocks": True, "root": False}, "units": len(module.blocks) + 1,
                         "param_dtype": precision if dtype else "fp32", "reduce_dtype": "fp32"}
        if probe:
            # FSDP2's engine probe: sharded as the cell, its parameters gathered in forward and backward as there,
            # but gradient sync off for good: no reduce-scatter (the gradients' traffic; registry
            # `gradient_traffic`), one small collective a step instead
            module.set_requires_gradient_sync(False)
            return Trainer(module, module, optimizer, engine, grad_accum, cast, no_sync=contextlib.nullcontext,
                           facts={**facts, "optimizer_impl": kernel}, ping=engine_probe.ping(torch, device))
        return Trainer(module, module, optimizer, engine, grad_accum, cast,
                       no_sync=lambda: _fsdp_no_sync(module),
                       sync_after=lambda: module.set_requires_gradient_sync(True),
                       facts={**facts, "optimizer_impl": kernel})
    if engine == "native":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(module, device_ids=[device.index] if device_type == "cuda" else None)
        optimizer, kernel = adamw(torch, module.parameters(), lr=lr, impl=optimizer_impl, device_type=device_type)
        facts["ddp"] = {"bucket_cap_mb": 25}  # DDP's default, which bench does not change
        return Trainer(model, module, optimizer, engine, grad_accum, cast, no_sync=model.no_sync,
                       facts={**facts, "optimizer_impl": kernel}, scaler=scaler_for(torch, precision, device_type))
    optimizer, kernel = adamw(torch, module.parameters(), lr=lr, impl=optimizer_impl, device_type=device_type)
    if engine == "horovod" and hvd is not None:
        hvd.broadcast_parameters(module.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=module.named_parameters(), op=hvd.Average,
                                             backward_passes_per_step=grad_accum)
        # No hvd.broadcast_optimizer_state: every rank's AdamW starts empty and equal, and Horovod fills an empty
        # state by taking a step on zero gradients, which under weight decay shrinks every weight once (seen: the
        # two-rank test ended 0.03 away from one process).
    return Trainer(module, module, optimizer, engine, grad_accum, cast, no_sync=contextlib.nullcontext,
                   facts={"optimizer_impl": kernel}, scaler=scaler_for(torch, precision, device_type),
                   hvd=hvd if engine == "horovod" else None)


def scaler_for(torch, precision: str, device_type: str):
    """fp16's loss scaler (bf16 and fp32 need none)."""
    return torch.amp.GradScaler(device_type) if precision == "fp16" else None


@contextlib.contextmanager
def _fsdp_no_sync(module):
    module.set_requires_gradient_sync(False)
    yield
