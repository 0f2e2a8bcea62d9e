"""The transformer trained under a parallel layout (docs/layouts.md, "Running layouts"): torchtitan's degrees on a
DeviceMesh, one training step for all of them. This module holds the pipeline stages, the trainer (`LayoutTrainer`)
and `build`; beside it, mesh_layout.py describes the layout, collective_timer.py times the collectives and
tensor_parallel.py reorders the fused rows and parallelizes the blocks.

- tp: tensor parallel with DTensor (`parallelize_module`): q/k/v and SwiGLU's gate/up column-wise, the attention
  output and the MLP's down projection row-wise, the norms sequence-parallel (each rank holds 1/tp of the sequence
  between the blocks; all-gathered before attention and the MLP, reduce-scattered after). The fused q/k/v and
  gate/up matrices have their rows reordered first, so each rank's column shard holds whole heads (its q, k and v)
  and its own gate and up halves; `full_parameters` puts them back. The token embedding and the head stay
  replicated on the tp group (the tiny shapes tie them; their gradients are equal on every tp rank).
- pp: torch.distributed.pipelining, the blocks split evenly over pp × v stages (stage 0 also holds the embedding,
  the last the final norm and the head), under GPipe, 1F1B or interleaved 1F1B with `m` micro-batches. A tied
  embedding and head live on the first and the last stage; their gradients are summed over the two after the
  backward pass (Megatron-LM's embedding group), so the copies stay equal.
- dp_shard: FSDP2 (`fully_shard`) on each block and on the root, over the dp_shard dimension; with dp_replicate too,
  HSDP: a 2-D mesh (replicate × shard), reduce-scatter inside the shard group and all-reduce across replicas.
- cp and ep are not run here (the plan refuses them on CPU; GPU cells with cp are rendered by the planner only).

The worker reads the layout's text form (`dp_shard=2,tp=2,pp=2,schedule=1f1b,m=4`), which the plan has already
validated with bench/layouts (no module here imports bench: mesh_layout.py's `read_layout` only reads the numbers).

Timers: every collective the step issues through a process group of the mesh is timed by the group it runs on
(`CollectiveTimer`), so a step's time splits into each mesh dimension's collectives; each pipeline stage's forward and
backward chunks are timed, and what is left of the step is that stage's idle time, the bubble measured.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from models.workloads.transformer.collective_timer import CollectiveTimer
from models.workloads.transformer.mesh_layout import MeshLayout, layout_facts
from models.workloads.transformer.tensor_parallel import apply_tp, fused_row_orders, order_for, reorder_rows


# --- pipeline stages --------------------------------------------------------------------------------------------------
class Stage:
    """One pipeline stage's module: the embedding (first), its blocks, the final norm and head (last). Built from a
    whole Decoder (every rank builds the same one from the same seed) by keeping only its share."""

    def __new__(cls, torch, decoder, first: int, last: int, *, is_first: bool, is_last: bool):
        from torch import nn

        class StageModule(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = decoder.embed if is_first else None
                self.blocks = nn.ModuleList(decoder.blocks[first:last])
                self.norm = decoder.norm if is_last else None
                self.head = decoder.head if is_last else None

            def forward(self, x):
                if self.embed is not None:
                    t = x.shape[1]
                    x = self.embed(x)
                else:
                    t = x.shape[1] * _seq_split(x)
                rope = decoder._rope(t, x.device)
                for block in self.blocks:
                    x = block(x, rope)
                if self.head is not None:
                    return self.head(self.norm(x))
                return x

        module = StageModule()
        if is_last and not is_first and decoder.shape.tied:
            module.head = torch.nn.Linear(decoder.shape.width, decoder.shape.vocab, bias=False)
            with torch.no_grad():
                module.head.weight.copy_(decoder.embed.weight)
        return module


_SEQ_SPLIT = {"tp": 1}


def _seq_split(x) -> int:
    """How many ranks share a stage input's sequence (sequence parallel hands stages 1/tp of it)."""
    return _SEQ_SPLIT["tp"]


# --- the trainer ------------------------------------------------------------------------------------------------------
@dataclass
class LayoutTrainer:
    """The layout's step over (grad_accum, batch, seq + 1) token windows, and the parameters gathered in full."""

    torch: Any
    layout: MeshLayout
    mesh: Any
    module: Any  # the whole Decoder (pp == 1) or this rank's stage modules' parent
    parts: list  # the modules that own this rank's parameters (the decoder, or its stage modules)
    optimizer: Any
    grad_accum: int
    schedule: Any = None
    stages: list = field(default_factory=list)
    orders: dict = field(default_factory=dict)
    names: list = field(default_factory=list)  # per part: its parameters' names in the whole Decoder
    tied_group: Any = None  # the first and last stage's group for a tied embedding's gradient
    timer: Any = None
    facts: dict[str, Any] = field(default_factory=dict)
    engine: str = "layout"
    stage_busy: list = field(default_factory=list)  # seconds per step each of this rank's stages computed
    last_step_s: float = 0.0
    schedule_s: float = 0.0
    pp_rank: int = 0

    def step(self, windows, phases=None) -> Any:
        torch = self.torch
        mark = phases.mark if phases is not None else (lambda phase, sync=False: None)
        t0 = time.perf_counter()
        self._busy = [0.0 for _ in self.stages]
        self.schedule_s = 0.0  # inside the schedule's steps: the time its stages are busy or idle
        self.optimizer.zero_grad()
        total = None
        for i in range(self.grad_accum):
            sync = i == self.grad_accum - 1
            self._set_sync(sync)
            batch = windows[i]
            inputs, targets = batch[:, :-1], batch[:, 1:]
            with self.timer.functional() if self.timer else contextlib.nullcontext():
                if self.schedule is None:
                    loss = self.module(inputs, targets) / self.grad_accum
                    loss.backward()
                else:
                    losses: list = []
                    first = self.pp_rank == 0
                    t_schedule = time.perf_counter()
                    self.schedule.step(*((inputs,) if first else ()), target=targets, losses=losses)
                    self.schedule_s += time.perf_counter() - t_schedule
                    loss = torch.stack(losses).mean() / self.grad_accum if losses else torch.zeros(())
            total = loss.detach() if total is None else total + loss.detach()
        if self.tied_group is not None:
            self._sum_tied()
        mark("compute", sync=True)
        self._scale_for_accumulation()
        self.optimizer.step()
        mark("update", sync=True)
        self.last_step_s = time.perf_counter() - t0
        self.stage_busy = list(self._busy)
        if self.schedule is not None and self.layout.pp > 1:
            # the loss lives on the last stage: every rank returns it, so rank 0's record reads the model's loss
            total = self._loss_from_last(total)
        return total

    def _set_sync(self, on: bool) -> None:
        for part in self.parts:
            if hasattr(part, "set_requires_gradient_sync"):
                part.set_requires_gradient_sync(on)

    def _scale_for_accumulation(self) -> None:
        # a pipeline's micro-batches are averaged by its schedule; its grad_accum steps are averaged here
        if self.schedule is not None and self.grad_accum > 1:
            for part in self.parts:
                for p in part.parameters():
                    if p.grad is not None:
                        p.grad.div_(self.grad_accum)

    def _sum_tied(self) -> None:
        import torch.distributed as dist

        for part in self.parts:
            for name, p in part.named_parameters():
                if name.endswith(("embed.weight", "head.weight")) and p.grad is not None:
                    grad = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                    dist.all_reduce(grad, group=self.tied_group)

    def _loss_from_last(self, total):
        import torch.distributed as dist

        box = total.detach().reshape(1).clone().float()
        last = self.mesh_ranks_last_stage
        dist.broadcast(box, src=last, group=self.pp_group)
        return box[0]

    def full_parameters(self) -> dict[str, Any]:
        """Every parameter of the whole Decoder, by its name there, gathered from every rank (shards and stages),
        detached on the CPU, on every rank; the fused rows back in their order."""
        import torch.distributed as dist

        torch = self.torch
        mine = {}
        for part, names in zip(self.parts, self.names):
            for (_, p), name in zip(part.named_parameters(), names):
                t = p.full_tensor() if hasattr(p, "full_tensor") else p
                mine[name] = t.detach().float().cpu().clone()
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        out: dict[str, Any] = {}
        for got in every:
            for name, t in got.items():
                out.setdefault(name, t)
        if self.orders:
            for name in list(out):
                order = order_for(name, self.orders)
                if order is not None:
                    out[name] = out[name][torch.argsort(order)]
        return out


def build(torch, shape, layout: MeshLayout, *, device, decoder_factory, grad_accum: int, lr: float,
          optimizer_impl: str, precision: str = "fp32", timed: bool = True) -> LayoutTrainer:
    """The layout's model on its mesh, with its AdamW. `decoder_factory()` builds the whole Decoder (same seed on
    every rank). Ranks must already have joined the process group."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from models.workloads.transformer.engines import adamw

    dims = layout.dims()
    names = tuple(dims) or ("dp_shard",)
    mesh = init_device_mesh(device.type, tuple(dims.values()) or (1,), mesh_dim_names=names)
    by_group = {}
    for name in names:
        by_group[mesh[name].get_group().group_name] = name
    timer = CollectiveTimer(torch, by_group).install() if timed else None

    decoder = decoder_factory()
    orders = {}
    if layout.tp > 1:
        orders = fused_row_orders(torch, shape, layout.tp)
        reorder_rows(torch, decoder, orders)
        _SEQ_SPLIT["tp"] = layout.tp

    parts, name_lists, stages, schedule, tied_group, pp_rank, stage_ids = [], [], [], None, None, 0, [0]
    pp_group = None
    last_stage_rank = 0
    if layout.pp > 1:
        pp_mesh = mesh["pp"]
        pp_group = pp_mesh.get_group()
        pp_rank = pp_mesh.get_local_rank()
        chunks = layout.pp * layout.v
        per = shape.layers // chunks
        # Interleaved: rank r holds stages r, r + pp, ... (the looped placement torch's schedules expect)
        stage_ids = [pp_rank + k * layout.pp for k in range(layout.v)]
        full_names = {id(p): n for n, p in decoder.named_parameters()}
        for sid in stage_ids:
            module = Stage(torch, decoder, sid * per, (sid + 1) * per, is_first=sid == 0, is_last=sid == chunks - 1)
            name_lists.append([_whole_name(full_names, n, p, sid, per) for n, p in module.named_parameters()])
            parts.append(module)
        if shape.tied:
            tied_group = _pair_group(dist, mesh, layout)
            if timer is not None and tied_group is not None:
                timer.by_group[tied_group.group_name] = "pp"  # the tied embedding's gradient: pipeline traffic
        last_stage_rank = int(pp_mesh.mesh[-1])
    else:
        parts.append(decoder)
        name_lists.append([n for n, _ in decoder.named_parameters()])

    for part in parts:
        if layout.tp > 1:
            apply_tp(torch, part, mesh["tp"])
        part.to(device)
    dp_dims = tuple(d for d in ("dp_replicate", "dp_shard") if d in dims)
    if dp_dims:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        dp_mesh = mesh[dp_dims] if len(dp_dims) > 1 else mesh[dp_dims[0]]
        dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)
        for part in parts:
            for block in part.blocks:
                fully_shard(block, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=layout.pp == 1)
            fully_shard(part, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=False)

    if layout.pp > 1:
        from torch.distributed import pipelining as pl

        chunks = layout.pp * layout.v
        for part, sid in zip(parts, stage_ids):
            stages.append(pl.PipelineStage(part, sid, chunks, device, group=pp_group))
        loss_fn = _loss_fn(torch)
        kinds = {"gpipe": pl.ScheduleGPipe, "1f1b": pl.Schedule1F1B, "interleaved": pl.ScheduleInterleaved1F1B}
        kind = kinds[layout.schedule]
        schedule = kind(stages if layout.schedule == "interleaved" else stages[0], n_microbatches=layout.m,
                        loss_fn=loss_fn)

    # One AdamW group per mesh the parameters live on (plain tensors apart): foreach kernels take one kind at a time
    groups: dict[Any, list] = {}
    for part in parts:
        for p in part.parameters():
            mesh_of = getattr(p, "device_mesh", None)
            groups.setdefault(None if mesh_of is None else (mesh_of.mesh_dim_names, tuple(p.placements)), []).append(p)
    optimizer, kernel = adamw(torch, [{"params": ps} for ps in groups.values()], lr=lr, impl=optimizer_impl,
                              device_type=device.type)
    trainer = LayoutTrainer(torch, layout, mesh, decoder, parts, optimizer, grad_accum, schedule=schedule,
                            stages=stages, orders=orders, names=name_lists, tied_group=tied_group, timer=timer,
                            pp_rank=pp_rank,
                            facts={"optimizer_impl": kernel, "layout": layout_facts(layout, dims)})
    trainer.pp_group, trainer.mesh_ranks_last_stage = pp_group, last_stage_rank
    trainer.stage_ids = stage_ids if layout.pp > 1 else []
    if stages:
        _time_stages(trainer)
    return trainer


def _whole_name(full_names: dict, name: str, p, sid: int, per: int) -> str:
    """A stage parameter's name in the whole Decoder (blocks renumbered back; a last stage's own head copy is the
    tied embedding's)."""
    if id(p) in full_names:
        return full_names[id(p)]
    if name.startswith("blocks."):
        _, i, rest = name.split(".", 2)
        return f"blocks.{sid * per + int(i)}.{rest}"
    return "embed.weight" if name == "head.weight" else name


def _pair_group(dist, mesh, layout: MeshLayout):
    """The group of each replica's first and last pipeline rank (for a tied embedding's gradient); every rank calls
    new_group for every pair, as torch.distributed requires, and keeps its own."""
    columns = mesh.mesh.reshape(layout.pp, -1)  # pp is the outermost dimension: column j is one replica's pipeline
    mine, me = None, dist.get_rank()
    for j in range(columns.shape[1]):
        pair = [int(columns[0, j]), int(columns[-1, j])]
        group = dist.new_group(pair)
        if me in pair:
            mine = group
    return mine


def _loss_fn(torch):
    import torch.nn.functional as F

    def loss_fn(logits, targets):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))

    return loss_fn


def _time_stages(trainer: LayoutTrainer) -> None:
    """Each stage's forward and backward chunks timed into the trainer's busy seconds for the step."""
    for i, stage in enumerate(trainer.stages):
        for method in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
            original = getattr(stage, method, None)
            if original is None:
                continue

            def timed(*args, _original=original, _i=i, **kwargs):
                t0 = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    trainer._busy[_i] += time.perf_counter() - t0

            setattr(stage, method, timed)



def replica_of(trainer: LayoutTrainer) -> int:
    """This rank's data-parallel replica (0 .. dp − 1): which slice of the global batch it takes."""
    dims, index = trainer.layout.dims(), 0
    for name in ("dp_replicate", "dp_shard"):
        if name in dims:
            index = index * dims[name] + trainer.mesh[name].get_local_rank()
    return index


def model_parallel_rank(trainer: LayoutTrainer) -> int:
    """This rank's place among the ranks that share its replica's batch (tp × pp of them)."""
    dims, index = trainer.layout.dims(), 0
    for name in ("pp", "tp"):
        if name in dims:
            index = index * dims[name] + trainer.mesh[name].get_local_rank()
    return index
