"""Data-parallel training throughput of a decoder-only transformer language model, PyTorch: tokens/s, samples/s, step
time, the FLOPs per sample that MFU divides by, peak memory per rank, and the loss falling.

A sample is one sequence of `--seq-len` tokens; a step is `--grad-accum` micro-batches of `--batch-size` sequences on
each rank. Engines: Horovod (default), PyTorch's DDP (native) or FSDP2 (models/workloads/transformer/engines.py). Runs
on every worker under the launcher the cell names (mpirun, horovodrun, torchrun, srun); rank 0 writes one JSON record
per measured window, through the same measured-window loop as the image workloads (models/measure/common.py). Imports
nothing from the control plane.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))  # run from anywhere

from models.data.tokens import check_token_file  # noqa: E402
from models.gpu.plan import plan_device  # noqa: E402
from models.measure.allocator import hold_freed_memory  # noqa: E402
from models.measure.common import (Comm, SampleRate, import_horovod, measure_windows, single_process_comm,  # noqa: E402
                                   threads_for)
from models.measure.fail import fail  # noqa: E402
from models.measure.phases import PhaseClock  # noqa: E402
from models.probes import engine_probe  # noqa: E402
from models.registry.rules import workload_refusal  # noqa: E402
from models.registry.workloads import COMPILE_MODES, OPTIMIZER_IMPLS, TRANSFORMER_WORKLOAD  # noqa: E402
from models.workloads.transformer.engines import ENGINES  # noqa: E402
from models.workloads.transformer.shapes import lookup  # noqa: E402

VERSION = TRANSFORMER_WORKLOAD["version"]
PRECISIONS = ("fp32", "bf16", "fp16")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny",
                   help="a configuration (models/workloads/transformer/shapes.py) or a shape id")
    p.add_argument("--seq-len", type=int, default=0, help="tokens per sequence; 0 = the model's context")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per micro-batch, per worker")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32")
    p.add_argument("--engine", choices=(*ENGINES, "none"), default="horovod",
                   help="who averages gradients; none: one process, no launcher, nothing to average")
    p.add_argument("--activation-checkpointing", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--layout", default=None, help="a parallel layout's text form (docs/layouts.md): tp, pp with its "
                   "schedule, FSDP2/HSDP on a DeviceMesh (models/workloads/transformer/layouts.py)")
    p.add_argument("--compile", choices=COMPILE_MODES, default="off", help="torch.compile mode for each block")
    p.add_argument("--optimizer-impl", choices=OPTIMIZER_IMPLS, default="default",
                   help="AdamW's kernel (default: fused on a GPU, foreach on a CPU)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--data", choices=("synthetic", "tokens"), default="synthetic")
    p.add_argument("--tokens-file", default=None, help="flat token ids (nanoGPT's train.bin layout)")
    p.add_argument("--tokens-dtype", choices=("auto", "uint16", "uint32"), default="auto",
                   help="the file's id width (auto: uint16 when the vocabulary fits)")
    p.add_argument("--warmup-steps", type=int, default=5, help="run before the first window, not measured")
    p.add_argument("--steps", type=int, default=20, help="steps per measured window")
    p.add_argument("--repeats", type=int, default=3, help="measured windows")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads per worker; 0 = cores / local workers")
    p.add_argument("--hold-freed-memory", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--cell-id", default=None)
    p.add_argument("--run-id", default=None)
    p.add_argument("--out", default=None, help="append records (JSON lines) here; default: stdout")
    args = p.parse_args(argv)
    hold_freed_memory(args.hold_freed_memory)
    for name in ("batch_size", "grad_accum", "steps", "repeats"):
        if getattr(args, name) <= 0:
            fail(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.warmup_steps < 0 or args.seq_len < 0:
        fail("--warmup-steps and --seq-len must be >= 0")
    try:
        args.shape = lookup(args.model)
    except ValueError as e:
        fail(str(e))
    args.seq_len = args.seq_len or args.shape.seq
    if args.data == "tokens":
        if not args.tokens_file:
            fail("--data tokens needs --tokens-file")
        if why := check_token_file(args.tokens_file, args.tokens_dtype, args.shape.vocab):
            fail(why)
    if why_not := refusal_before_start(args):
        fail(why_not)
    # What measure_windows counts per step and rank: every sequence of every micro-batch.
    args.sequences_per_step = args.batch_size * args.grad_accum
    return args


def rule_settings(args) -> dict:
    """The flags as the matrix names them, for the registry's rules (models/registry/rules.py WORKLOAD_RULES), which the
    plan applies to the same cells with the same words. The image keys at the values the transformer leaves alone;
    engine `none` (one process) is Horovod's single-process fallback as far as the rules go."""
    return {"model": args.model, "engine": "horovod" if args.engine == "none" else args.engine,
            "precision": args.precision, "data": args.data, "data_layout": "jpeg", "warmup_steps": args.warmup_steps,
            "channels_last": True, "loader": "auto", "compile": args.compile, "optimizer_impl": args.optimizer_impl,
            "cuda_graphs": False, "seq_len": args.seq_len}


def refusal_before_start(args) -> str | None:
    """What these settings cannot do, whatever the device: the registry's rules (on a GPU, where no device rule of
    theirs fires)."""
    return workload_refusal("pytorch", rule_settings(args), "gpu")


def refusal_on_device(args, cuda: bool) -> str | None:
    if args.precision == "fp16" and not cuda:
        return "precision=fp16 needs a GPU (a loss-scaled fp16 step on a CPU measures nothing users run)"
    return workload_refusal("pytorch", rule_settings(args), "gpu" if cuda else "cpu")


# --- set-up ---------------------------------------------------------------------------------------------------------
def start_engine(args, torch) -> tuple[Comm, Any, Any, int]:
    """(comm, hvd, the native module, local rank): Horovod's ranks, or the process group DDP and FSDP2 share."""
    if args.engine == "none":
        return single_process_comm(), None, None, 0
    if args.engine in ("native", "fsdp2"):
        from models.workloads import torch_native as native

        try:
            comm, local_rank, _backend = native.init(torch)
        except RuntimeError as e:  # no launcher told it its rank
            fail(f"engine={args.engine}: {e}")
        return comm, None, native, local_rank
    hvd = import_horovod("horovod.torch")
    if hvd is None:
        return single_process_comm(), None, None, 0
    from models.workloads.torch_horovod import horovod_comm

    hvd.init()
    return horovod_comm(hvd, torch), hvd, None, hvd.local_rank()


class PeakMemory:
    """The instruments hook (models/measure/common.py) that reads each rank's peak memory after every window: on a GPU
    the allocator's high-water mark (torch.cuda.max_memory_allocated), on a CPU the process's peak resident set (the
    kernel's ru_maxrss, everything the process ever held, interpreter included)."""

    def __init__(self, torch, device, inner=None):
        self.torch, self.device, self.inner = torch, device, inner
        self.kind = "cuda_max_allocated" if device.type == "cuda" else "peak_rss"

    def window_open(self):
        if self.inner:
            self.inner.window_open()

    def before_step(self):
        if self.inner:
            self.inner.before_step()

    def after_step(self):
        if self.inner:
            self.inner.after_step()

    def window_close(self, meter) -> dict[str, Any]:
        own = self.inner.window_close(meter) if self.inner else {}
        if self.device.type == "cuda":
            peak = int(self.torch.cuda.max_memory_allocated(self.device))
        else:
            peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB
        return {**own, "peak_memory_bytes": peak}

    def record_fields(self, summaries, samples) -> dict[str, Any]:
        own = self.inner.record_fields(summaries, samples) if self.inner else {}
        return {**own, "peak_memory": {"kind": self.kind,
                                       "bytes_per_rank": [s["peak_memory_bytes"] for s in summaries]}}

    def close(self):
        if self.inner:
            self.inner.close()


# After this many steps a training model's loss is well below its first (the tiny model's by ~10%, from ln(vocab)
# towards ln 4 on the synthetic language); a step that does not train stays within ~0.1% of it whatever the batch.
LOSS_FALL_STEPS, LOSS_FALL = 20, 0.01


def sequence_rate(seq: int, initial_loss: dict) -> SampleRate:
    """A sample is a sequence of `seq` tokens. A window whose loss has not fallen is refused: a step that does not
    train (no update, gradients lost) must never be reported as a fast one. Fallen means below the first step's
    loss, and by 1% once LOSS_FALL_STEPS steps have run."""

    def fields(measured):
        tokens = measured["samples_per_sec"] * seq
        return {**measured, "tokens_per_sec": tokens, "tokens_per_sec_per_gpu": tokens / len(measured["per_rank"]),
                "loss_initial": initial_loss.get("value")}

    def unusable(summaries):
        if engine_probe.active():
            # FSDP2's engine probe turns gradient sync off, which leaves its sharded parameters without gradients:
            # it computes every step but updates nothing. Its windows are a rate for the expected value, never a
            # cell's measurement (the store never sees them).
            return None
        first, steps = initial_loss.get("value"), initial_loss.get("steps", 0)
        now = summaries[0]["loss"]
        bar = first * (1 - LOSS_FALL) if steps >= LOSS_FALL_STEPS else first
        if first is not None and not now < bar:
            return (f"the loss has not fallen ({first:.4f} at the first step, {now:.4f} after {steps} steps): the "
                    f"step is not training")
        return None

    return SampleRate(fields=fields, unusable=unusable,
                      line=lambda m: f"{m['tokens_per_sec']:,.0f} tokens/s ({m['samples_per_sec']:.2f} sequences/s)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from models.data.tokens import SyntheticTokens, TokenFile
    from models.workloads.transformer import model as tfm
    from models.workloads.transformer.engines import wrap

    comm, hvd, native, local_rank = start_engine(args, torch)
    torch.set_num_threads(threads_for(args, comm.local_size))
    cuda = torch.cuda.is_available()
    dev = plan_device(cuda=cuda, device_count=torch.cuda.device_count() if cuda else 0, local_rank=local_rank)
    device = torch.device("cuda", dev.index) if dev.cuda else torch.device("cpu")
    if dev.cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
    if why_not := refusal_on_device(args, dev.cuda):
        fail(why_not)
    shape, seq = args.shape, args.seq_len

    def measure(args) -> int:
        """The model, its engine's wrapping, its data and its windows (the cell's, or the engine probe's:
        engine_probe.active()), built afresh on the started engine; the exit code."""
        def build_model():
            built = tfm.build(shape, checkpointing=args.activation_checkpointing, device=device, seed=0)
            if args.compile != "off":
                built.compile_parts(None if args.compile == "default" else args.compile)
            return built

        data_rank, counted = comm.rank, args.sequences_per_step
        if args.layout:  # a parallel layout on its DeviceMesh (models/workloads/transformer/layout_run.py)
            from models.workloads.transformer import layout_run

            try:
                trainer, data_rank, counted = layout_run.trainer_for(torch, args, shape, device, comm, build_model,
                                                                     wrap)
            except ValueError as e:
                fail(str(e))
            model = trainer.module
        else:
            model = build_model()
            trainer = wrap(torch, model, args.engine if (hvd or native) else "none", hvd=hvd, device=device,
                           precision=args.precision, grad_accum=args.grad_accum, lr=args.lr,
                           optimizer_impl=args.optimizer_impl, world_size=comm.size)
        if args.data == "tokens":
            try:
                data = TokenFile(torch, args.tokens_file, vocab=shape.vocab, dtype=args.tokens_dtype, seq=seq,
                                 micro_batch=args.batch_size, grad_accum=args.grad_accum, rank=data_rank,
                                 device=device)
            except ValueError as e:  # too short for one window: one line, nothing trained
                fail(str(e))
        else:
            data = SyntheticTokens(torch, vocab=shape.vocab, seq=seq, micro_batch=args.batch_size,
                                   grad_accum=args.grad_accum, rank=data_rank, device=device)

        def sync() -> None:
            if dev.cuda:
                torch.cuda.synchronize(device)

        phases = PhaseClock(sync, enabled=not dev.cuda)
        initial: dict[str, float] = {}

        def train_step(windows):
            loss = trainer.step(windows, phases)
            initial["steps"] = initial.get("steps", 0) + 1
            if "value" not in initial:
                # rank 0's first loss, the one every check reads
                initial["value"] = comm.broadcast_object(float(loss))
            return loss

        compute_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
        base = {"framework": "pytorch", "workload": TRANSFORMER_WORKLOAD["name"], "workload_version": VERSION,
                "model": args.model, "shape": shape.as_dict(), "params": shape.params(),
                "sample_unit": "sequence", "tokens_per_sample": seq,
                "flops_per_sample": shape.flops_per_sequence(seq),
                "flops_convention": "6N+12LHQT", "batch_per_worker": args.sequences_per_step,
                "micro_batch": args.batch_size, "grad_accum": args.grad_accum, "seq_len": seq,
                "precision": args.precision, "engine": trainer.engine, "device": device.type,
                "threads_per_worker": torch.get_num_threads(), "data": args.data,
                "sdpa_kernel": tfm.sdpa_kernel_used(shape, args.batch_size, seq, compute_dtype, device),
                "activation_checkpointing": args.activation_checkpointing, "compile": args.compile,
                "compile_scope": "blocks, head+loss" if args.compile != "off" else None,
                "optimizer": "adamw", "lr": args.lr, **trainer.facts}
        gpu = None
        if dev.cuda:
            from models.gpu.window import gpu_window

            base["gpu"] = gpu_what_ran(torch, device, dev, args)
            gpu = gpu_window(torch, device)
        instruments = PeakMemory(torch, device, gpu)
        if args.layout:
            from models.workloads.transformer.layout_run import LayoutInstruments

            instruments = PeakMemory(torch, device, LayoutInstruments(trainer, gpu))
        model.train()
        try:
            code = measure_windows(args_for_loop(args), comm, train_step, lambda loss: float(loss), sync, base,
                                   next_batch=data, batch_samples=lambda _: counted, phases=phases,
                                   instruments=instruments, rate=sequence_rate(seq, initial))
        finally:
            instruments.close()
        if code == 0 and engine_probe.active() and (hvd or native) and not args.layout:  # no probe of a layout
            if args.engine == "fsdp2":
                # its gradient sync as FSDP2 runs it: the probe's own steps with sync on, less with it off
                def fsdp2_step(on: bool) -> None:
                    model.set_requires_gradient_sync(on)
                    trainer.step(data())

                # a DTensor's numel is the whole parameter's
                nbytes = 4 * sum(p.numel() for p in model.parameters())
                engine_probe.report_sync_cost(comm, args.out, nbytes, fsdp2_step, sync)
            else:
                sizes, how = [p.numel() for p in model.parameters()], "per-tensor" if hvd else "buckets"
                engine_probe.time_gradient_allreduce(torch, device, sizes, comm, args.out, hvd, how)
        return code

    # the engine probe first where the control plane asks for it (models/probes/engine_probe.py), then the cell
    code = engine_probe.first_then(args, comm.rank, measure)
    if hvd is not None:
        hvd.shutdown()
    if native is not None:
        native.shutdown()
        native.leave(code)
    return code


def gpu_what_ran(torch, device, dev, args) -> dict[str, Any]:
    """The record's `gpu` field as the image workers write it (models/gpu/facts.py): which GPU, driver, CUDA, cuDNN,
    NCCL, its clocks and power limit, and the numerics this worker chose. Autocast runs under DDP and Horovod in
    bf16/fp16; FSDP2 casts by its mixed-precision policy instead (the record's `fsdp`), so it names no autocast."""
    import dataclasses

    from models.gpu.facts import gpu_record
    from models.gpu.plan import ComputePlan

    autocast = None if args.precision == "fp32" or args.engine == "fsdp2" else \
        {"bf16": "bfloat16", "fp16": "float16"}[args.precision]
    compute = ComputePlan(autocast_dtype=autocast, grad_scaler=args.precision == "fp16",
                          input_channels_last=False, param_channels_last=False)
    # The transformer leaves cuDNN's autotuner as PyTorch sets it (off); the plan's default is the image workers'.
    ran = dataclasses.replace(dev, cudnn_benchmark=bool(torch.backends.cudnn.benchmark))
    return gpu_record(torch, device, ran, compute)


def args_for_loop(args) -> argparse.Namespace:
    """What measure_windows reads of the flags: its batch is every sequence of a step."""
    return argparse.Namespace(**{**vars(args), "batch_size": args.sequences_per_step})


if __name__ == "__main__":
    sys.exit(main())
