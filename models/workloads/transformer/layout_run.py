"""The transformer worker's side of a layout cell (`--layout`): the trainer on its mesh, whose batch each rank reads,
how many of the replica's sequences each rank counts, and what the record says of the layout as it ran (each
stage's idle time beside (p − 1)/m, each mesh dimension's collective time per step). models/workloads/transformer/
layouts.py builds the mesh (mesh_layout.py reads the layout); this module joins it to the measured-window loop
(models/measure/common.py)."""
from __future__ import annotations

import statistics
from typing import Any

from models.workloads.transformer import layouts
from models.workloads.transformer.collective_timer import CollectiveTimer
from models.workloads.transformer.mesh_layout import layout_facts, read_layout, refusal


def trainer_for(torch, args, shape, device, comm, model_factory, wrap) -> tuple[Any, int, int]:
    """(trainer, the replica whose sequences this rank reads, the sequences this rank counts per step).

    A layout with one data-parallel degree only is the engine itself (DDP for dp_replicate, FSDP2 for dp_shard),
    built by `wrap`; every other one is built on its mesh here. The ranks of one replica (tp × pp) read the same
    sequences; each counts its share of them, so the meter's sum over ranks is the sequences trained."""
    layout = read_layout(args.layout)
    if why := refusal(layout, shape, world=comm.size, cuda=device.type == "cuda", batch=args.batch_size):
        raise ValueError(why)
    per_step = args.batch_size * args.grad_accum
    if set(layout.dims()) <= {"dp_replicate"} or set(layout.dims()) == {"dp_shard"}:
        engine = "native" if layout.dp_replicate > 1 else "fsdp2"
        trainer = wrap(torch, model_factory(), engine, device=device, precision=args.precision,
                       grad_accum=args.grad_accum, lr=args.lr, optimizer_impl=args.optimizer_impl,
                       world_size=comm.size)
        trainer.facts["layout"] = layout_facts(layout, layout.dims())
        # Its one dimension's collectives timed as a mesh layout's are: FSDP2's gathers and reduce-scatters go through
        # torch.distributed's Python calls; DDP's bucketed all-reduces, launched by its C++ reducer, through a hook.
        dim = next(iter(layout.dims()), "dp_shard")
        trainer.timer = CollectiveTimer(torch, {}, world=dim).install()
        if engine == "native":
            trainer.timer.time_ddp(trainer.model, dim)
        return trainer, comm.rank, per_step
    trainer = layouts.build(torch, shape, layout, device=device, decoder_factory=model_factory,
                            grad_accum=args.grad_accum, lr=args.lr, optimizer_impl=args.optimizer_impl,
                            precision=args.precision)
    trainer.engine = args.engine
    group = layout.tp * layout.pp
    share, extra = divmod(per_step, group)
    mine = share + (1 if layouts.model_parallel_rank(trainer) < extra else 0)
    return trainer, layouts.replica_of(trainer), mine


class LayoutInstruments:
    """The measured-window hook (models/measure/common.py's instruments) of a layout cell: per step, each stage's
    busy seconds and each mesh dimension's collective seconds; per window and rank, their means; in the record, the
    layout's facts with every rank's figures."""

    def __init__(self, trainer, inner=None):
        self.trainer, self.inner = trainer, inner
        self.facts = dict(trainer.facts.pop("layout", {}))
        self._reset()

    def _reset(self):
        self.steps, self.busy, self.step_s, self.comm = 0, [], [], {}

    def window_open(self):
        self._reset()
        if getattr(self.trainer, "timer", None):
            self.trainer.timer.take()
        if self.inner:
            self.inner.window_open()

    def before_step(self):
        if self.inner:
            self.inner.before_step()

    def after_step(self):
        t = self.trainer
        self.steps += 1
        self.step_s.append(getattr(t, "schedule_s", 0.0) or getattr(t, "last_step_s", 0.0))
        self.busy.append(list(getattr(t, "stage_busy", [])))
        if getattr(t, "timer", None):
            for dim, s in t.timer.take().items():
                self.comm[dim] = self.comm.get(dim, 0.0) + s
        if self.inner:
            self.inner.after_step()

    def window_close(self, meter) -> dict[str, Any]:
        own = self.inner.window_close(meter) if self.inner else {}
        steps = max(self.steps, 1)
        summary: dict[str, Any] = {"collective_s_per_step": {d: s / steps for d, s in sorted(self.comm.items())}}
        if self.busy and self.busy[0]:
            step = statistics.fmean(self.step_s)
            per_stage = [statistics.fmean(b[i] for b in self.busy) for i in range(len(self.busy[0]))]
            busy = sum(per_stage)
            summary["pipeline"] = {"schedule_s": step, "busy_s": busy, "idle_s": step - busy,
                                   "bubble": (step - busy) / busy if busy > 0 else None,
                                   "stages": getattr(self.trainer, "stage_ids", None)}
        return {**own, "layout_rank": summary}

    def record_fields(self, summaries, samples) -> dict[str, Any]:
        own = self.inner.record_fields(summaries, samples) if self.inner else {}
        ranks = [s.get("layout_rank", {}) for s in summaries]
        dims = sorted({d for r in ranks for d in r.get("collective_s_per_step", {})})
        measured: dict[str, Any] = {
            "collective_s_per_step": {d: statistics.median(r.get("collective_s_per_step", {}).get(d, 0.0)
                                                           for r in ranks) for d in dims},
            "collective_s_per_step_by_rank": [r.get("collective_s_per_step", {}) for r in ranks],
            "collective_timing": "timers around each process group's collective calls and their waits "
                                 "(DTensor's functional collectives from issue to wait; DDP's all-reduces from "
                                 "launch to completion, while any is in flight)",
        }
        pipes = [r.get("pipeline") for r in ranks]
        if any(pipes):
            measured["pipeline_by_rank"] = pipes
            bubbles = [p["bubble"] for p in pipes if p and p.get("bubble") is not None]
            measured["bubble_measured"] = max(bubbles) if bubbles else None
            measured["bubble_measured_mean"] = statistics.fmean(bubbles) if bubbles else None
        return {**own, "layout": {**self.facts, **measured}}

    def close(self):
        if getattr(self.trainer, "timer", None):
            self.trainer.timer.close()
        if self.inner:
            self.inner.close()
