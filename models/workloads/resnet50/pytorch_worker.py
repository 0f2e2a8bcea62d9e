"""Data-parallel ResNet-50 v1.5 training throughput, PyTorch, synthetic or ImageNet (JPEG tree) data.

Gradients are averaged by Horovod (default) or by PyTorch's own DistributedDataParallel (--engine native). Runs on
every worker (one process per GPU, or per CPU slot in the fallback); rank 0 writes one JSON record per measured
repeat. Imports nothing from the control plane: this folder is all a cluster node gets. Without Horovod installed
it runs as a single process (world size 1) with the same meter.
"""
from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))  # run from anywhere

from models.gpu.plan import ComputePlan, DevicePlan, GpuPlanError, plan_compute, plan_device  # noqa: E402
from models.measure.common import (Comm, import_horovod, measure_windows, parse_args, record_base,  # noqa: E402
                                   report_dropped, single_process_comm, threads_for)
from models.measure.fail import fail  # noqa: E402
from models.measure.phases import PhaseClock  # noqa: E402
from models.probes import engine_probe  # noqa: E402
from models.registry.rules import workload_refusal  # noqa: E402
from models.registry.workloads import WORKLOADS  # noqa: E402
from models.workloads.resnet50.step_settings import (LoaderError, StaticBatch, compiled, gpu_loaders,  # noqa: E402
                                                     graph_forward_backward, graph_scope, graph_warmup,
                                                     graph_whole_step, on_side_stream, resolve_loader, sgd_kernel,
                                                     sgd_options, whole_step)
from models.workloads.torch_horovod import horovod_comm  # noqa: E402

VERSION = WORKLOADS["pytorch"]["version"]


@dataclass
class Worker:
    """Who this process is in the job and where it computes."""

    comm: Comm
    hvd: Any  # horovod.torch when Horovod averages, else None
    native: Any  # models.workloads.torch_native when DDP averages, else None
    native_backend: str | None
    local_rank: int
    device: Any  # torch.device
    memory_format: Any  # of the input
    param_format: Any  # of parameters and gradients
    compute: ComputePlan
    device_plan: DevicePlan

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def engine(self) -> str:
        """Who averages the gradients: horovod, native (DDP) or none (one process without Horovod)."""
        return "native" if self.native is not None else "horovod" if self.hvd is not None else "none"


# --- set-up ---------------------------------------------------------------------------------------------------------
def start_engine(args, torch) -> tuple[Comm, Any, Any, str | None, int]:
    """Joins the job through the engine that averages gradients: (comm, hvd, native, native backend, local rank)."""
    if args.engine == "native":
        from models.workloads import torch_native as native

        if getattr(args, "cuda_graphs", False):
            # A capture that holds DDP's allreduce needs NCCL's async error handling off before the process group
            # starts (PyTorch's CUDA-graphs notes); set only where graphs are asked for, so other cells run as before.
            os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")
        comm, local_rank, native_backend = native.init(torch)
        return comm, None, native, native_backend, local_rank
    hvd = import_horovod("horovod.torch")
    if hvd is None:
        return single_process_comm(), None, None, None, 0
    hvd.init()
    return horovod_comm(hvd, torch), hvd, None, None, hvd.local_rank()


def start(args, torch) -> Worker:
    try:
        return place(args, torch)
    except GpuPlanError as e:
        fail(str(e))


def place(args, torch) -> Worker:
    """Joins the job and performs the CUDA calls of the plans made in models/gpu/plan.py."""
    comm, hvd, native, native_backend, local_rank = start_engine(args, torch)
    torch.set_num_threads(threads_for(args, comm.local_size))
    cuda = torch.cuda.is_available()
    dev = plan_device(cuda=cuda, device_count=torch.cuda.device_count() if cuda else 0, local_rank=local_rank)
    device = torch.device("cuda", dev.index) if dev.cuda else torch.device("cpu")
    if dev.cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = dev.cudnn_benchmark
        torch.backends.cuda.matmul.allow_tf32 = dev.tf32
        torch.backends.cudnn.allow_tf32 = dev.tf32
    if refusal := workload_refusal("pytorch", vars(args), "gpu" if dev.cuda else "cpu"):
        fail(refusal)
    asks_bf16 = args.precision == "bf16" and dev.cuda  # bf16 support is a question about the device just set
    plan = plan_compute(dev, precision=args.precision, channels_last=args.channels_last,
                        bf16_supported=asks_bf16 and torch.cuda.is_bf16_supported(),
                        device_name=torch.cuda.get_device_name(device) if asks_bf16 else None)
    layout = {True: torch.channels_last, False: torch.contiguous_format}
    return Worker(comm, hvd, native, native_backend, local_rank, device, layout[plan.input_channels_last],
                  layout[plan.param_channels_last], plan, dev)


def build_model(args, torch, w: Worker):
    """ResNet-50 and its optimizer, identical on every rank, with the engine's gradient averaging wired in."""
    from models.workloads.resnet50.model_torch import ResNet50

    torch.manual_seed(1234)
    model = ResNet50(num_classes=args.num_classes).to(w.device)
    global_batch = args.batch_size * w.comm.size
    if engine_probe.active():  # the engine up, no gradient averaging (models/probes/engine_probe.py)
        model = model.to(memory_format=w.param_format)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * global_batch / 256, momentum=0.9, weight_decay=5e-5,
                                    **sgd_options(getattr(args, "optimizer_impl", "default")))
        return compiled(torch, model, getattr(args, "compile", "off")), optimizer
    if w.native is not None:
        # DDP broadcasts rank 0's parameters when it wraps the model, and averages gradients in backward(). A
        # whole-step CUDA graph holding its allreduce needs it built on a side stream (PyTorch's CUDA-graphs notes).
        def wrap():
            return torch.nn.parallel.DistributedDataParallel(model.to(memory_format=w.param_format),
                                                             device_ids=[w.local_rank] if w.cuda else None)

        model = on_side_stream(torch, wrap) if graphs_for(args, w) == "step" else wrap()
    # SGD with momentum; the kernel by optimizer_impl (models/workloads/resnet50/step_settings.py). The default is the
    # fused kernel: momentum and weight decay in one pass (measured here: 13 vs 30 ms a step on 2 cores).
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * global_batch / 256, momentum=0.9, weight_decay=5e-5,
                                **sgd_options(getattr(args, "optimizer_impl", "default")))
    if w.hvd is not None:
        from models.workloads.resnet50.torch_layout import LayoutPreservingCompression

        # Horovod only moves contiguous (NCHW-ordered) tensors: broadcast first, then switch the layout.
        w.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = w.hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                               op=w.hvd.Average, compression=LayoutPreservingCompression)
        # No broadcast_optimizer_state: a fresh optimizer has no state to share, and Horovod makes it by a zero-grad
        # step, which here would leave NCHW momentum buffers behind the channels-last parameters; CUDA's fused SGD
        # then refuses the step (check_fast_path_restrictions: params, grads and buffers must share strides), as
        # seen on an H200. The CPU kernel does not check, so tests/test_channels_last_horovod.py checks the strides.
    model = model.to(memory_format=w.param_format)
    # Compiled last: DDP's own graph breaks at its buckets (torch.compile of the DDP module, as PyTorch advises), and
    # Horovod's hooks stay on the parameters' gradient accumulators, which the compiled backward still feeds.
    return compiled(torch, model, getattr(args, "compile", "off")), optimizer


def graphs_for(args, w: Worker) -> str | None:
    """What CUDA graphs capture in this worker (models/workloads/resnet50/step_settings.py): None, "fwd+bwd" or
    "step"."""
    if not getattr(args, "cuda_graphs", False):
        return None
    return graph_scope(True, w.cuda, w.engine, w.compute.grad_scaler)


# --- data -----------------------------------------------------------------------------------------------------------
def synthetic_batch(args, torch, w: Worker):
    """Random (not zero) images and labels, different per rank, resident on the device."""
    gen = torch.Generator().manual_seed(w.comm.rank)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=gen)
    images = images.to(w.device).contiguous(memory_format=w.memory_format)
    labels = torch.randint(0, args.num_classes, (args.batch_size,), generator=gen).to(w.device)
    return images, labels


def imagenet_batches(args, w: Worker):
    """(the loader that runs, this rank's share of the ImageNet JPEG tree as batches on the device). `loader: auto`
    is resolved here (models/workloads/resnet50/step_settings.py, models/data/loaders.py): Pillow in DataLoader workers,
    nvJPEG or DALI on a GPU. A DataError ends the worker, as does a loader that cannot run here."""
    from models.data.imagenet_torch import Batches, default_workers
    from models.data.layout import DataError

    loaders = gpu_loaders()
    try:
        kind = resolve_loader(args.loader, w.device.type, loaders)
    except (LoaderError, ValueError) as e:  # ValueError: models/data/loaders.py's (no DALI, no torchvision)
        fail(str(e))
    workers = args.loader_workers or default_workers(w.comm.local_size)
    try:
        if loaders is None:
            return kind, Batches(args.data_dir, args.image_size, args.batch_size, w.comm.rank, w.comm.size, workers,
                                 w.device, args.channels_last)
        return kind, loaders.build_loader(kind, args.data_dir, args.batch_size, args.image_size, args.channels_last,
                                          w.device, workers, w.comm.rank, w.comm.size, 1234, args.precision)
    except DataError as e:
        fail(str(e))


def fetcher(batches) -> Callable[[], Any]:
    from models.data.layout import DataError

    def next_batch():
        try:
            return next(batches)
        except DataError as e:
            fail(str(e))

    return next_batch


# --- step -----------------------------------------------------------------------------------------------------------
def make_train_step(args, torch, w: Worker, model, optimizer, default_batch,
                    phases: PhaseClock | None = None) -> Callable[[Any], Any]:
    """One forward/backward/update on `batch` (the synthetic batch when None); returns the loss, on the device.
    Under Horovod the allreduce is waited for explicitly, so `phases` (models/measure/phases.py) holds compute (forward
    and backward), comm_wait (the allreduce backward did not hide) and update apart; under DDP the wait is inside
    backward: compute and update only."""
    phases = phases or PhaseClock()
    loss_fn = torch.nn.CrossEntropyLoss()
    scope = graphs_for(args, w)
    amp_dtype = getattr(torch, w.compute.autocast_dtype) if w.compute.autocast_dtype else None
    # CUDA graphs replay autocast's casts only if it caches none (make_graphed_callables refuses a caching autocast).
    cache = {"cache_enabled": False} if scope else {}
    autocast = ((lambda: torch.autocast(w.device.type, dtype=amp_dtype, **cache)) if amp_dtype
                else contextlib.nullcontext)
    scaler = torch.amp.GradScaler(w.device.type) if w.compute.grad_scaler else None
    # The engine probe: the optimizer is the plain one; a 1-element ping per gradient where the allreduce's wait
    # would be (models/probes/engine_probe.ping).
    probe = engine_probe.ping(torch, w.device, w.hvd, model) if engine_probe.active() and w.engine != "none" else None
    averaged = w.hvd is not None and probe is None  # Horovod's DistributedOptimizer wraps the optimizer

    def train_step(batch=None) -> torch.Tensor:
        optimizer.zero_grad()  # torch 2 default: set_to_none (Horovod's wrapper takes no argument)
        return body(batch)

    def body(batch=None) -> torch.Tensor:
        """The step after zero_grad: forward, loss, backward, the allreduce's wait and the update."""
        x, y = batch if batch is not None else default_batch
        with autocast():
            loss = loss_fn(model(x), y)
        if scaler:
            scaler.scale(loss).backward()
            phases.mark("compute", sync=True)
            if probe is not None:
                probe()
                phases.mark("comm_wait", sync=True)
            if averaged:
                optimizer.synchronize()  # Horovod: finish the allreduce before unscaling
                phases.mark("comm_wait", sync=True)
                scaler.unscale_(optimizer)
                with optimizer.skip_synchronize():
                    scaler.step(optimizer)
            else:
                scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            phases.mark("compute", sync=True)
            if probe is not None:
                probe()
                phases.mark("comm_wait", sync=True)
            if averaged:
                optimizer.synchronize()  # what step() would do first, timed on its own
                phases.mark("comm_wait", sync=True)
                with optimizer.skip_synchronize():
                    optimizer.step()
            else:
                optimizer.step()
        phases.mark("update", sync=True)
        return loss.detach()

    train_step.cuda_graphs = scope  # what the record says was captured
    if scope == "fwd+bwd":
        # The model's forward and backward as graphs, replayed inside autograd; the rest of the step stays eager.
        inner = getattr(model, "module", model)  # DDP's wrapper, when it wraps
        graph_forward_backward(torch, inner, default_batch[0], autocast)
    elif scope == "step":
        static = StaticBatch(default_batch)
        replay = graph_whole_step(torch, body, optimizer.zero_grad, static, graph_warmup(w.engine))
        graphed = whole_step(replay, train_step, static)
        graphed.cuda_graphs = scope
        return graphed
    return train_step


def base_record(args, torch, w: Worker, batches, loader: str | None = None,
                cuda_graphs: str | None = None) -> dict[str, Any]:
    """The fields every record of this worker starts with. `loader`: the JPEG loader that runs (real data);
    `cuda_graphs`: what CUDA graphs captured (None: none)."""
    from models.probes.envprobe import probe_torch

    base = record_base(args, "pytorch", VERSION, threads_per_worker=torch.get_num_threads(), device=w.device.type,
                       engine=w.engine, data=args.data, loader=loader, compile=args.compile,
                       optimizer_impl=sgd_kernel(args.optimizer_impl), cuda_graphs=cuda_graphs)
    if batches is not None:
        base.update(data_layout=args.data_layout, loader_workers=batches.workers)
    base["env_probe"] = probe_torch(w.hvd)
    if w.native is not None:
        base["env_probe"]["torch_distributed_backend"] = w.native_backend
    if w.cuda:
        base["gpu"] = gpu_record(torch, w)
    return base


def gpu_record(torch, w: Worker) -> dict[str, Any]:
    """The record's `gpu` what-ran (CUDA calls: GPU path only); the choices come from models/gpu/facts.py."""
    from models.gpu.facts import gpu_record as record

    return record(torch, w.device, w.device_plan, w.compute)


def instruments_for(torch, w: Worker):
    """CUDA-event step times and sampled power beside the meter, on a GPU; nothing on a CPU."""
    if not w.cuda:
        return None
    from models.gpu.window import gpu_window

    return gpu_window(torch, w.device)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    import torch

    w = start(args, torch)
    loader, batches = imagenet_batches(args, w) if args.data == "imagenet" else (None, None)
    # the engine probe first where the control plane asks for it (models/probes/engine_probe.py), then the cell
    code = engine_probe.first_then(args, w.comm.rank, lambda a: measure(a, torch, w, loader, batches))
    if batches is not None:
        report_dropped(w.comm.rank, batches.bad, batches.seen)
    if w.hvd is not None:
        w.hvd.shutdown()
    if w.native is not None:
        w.native.shutdown()
        w.native.leave(code)
    return code


def measure(args, torch, w: Worker, loader: str | None, batches) -> int:
    """The model, its step and its measured windows (the cell's, or the engine probe's: engine_probe.active()),
    built afresh on the started engine; the exit code."""
    model, optimizer = build_model(args, torch, w)
    synthetic = synthetic_batch(args, torch, w)

    def sync() -> None:
        if w.cuda:
            torch.cuda.synchronize(w.device)

    phases = PhaseClock(sync, enabled=not w.cuda)  # no per-phase device syncs on a GPU (models/measure/phases.py)
    train_step = make_train_step(args, torch, w, model, optimizer, synthetic, phases)

    model.train()
    base = base_record(args, torch, w, batches, loader, train_step.cuda_graphs)
    instruments = instruments_for(torch, w)
    try:
        code = measure_windows(args, w.comm, train_step, lambda loss: float(loss), sync, base,
                               fetcher(batches) if batches is not None else None,
                               batch_samples=lambda batch: len(batch[1]), phases=phases, instruments=instruments)
    finally:
        if instruments is not None:
            instruments.close()
    if code == 0 and engine_probe.active() and w.engine != "none":
        sizes = [p.numel() for p in model.parameters()]
        engine_probe.time_gradient_allreduce(torch, w.device, sizes, w.comm, args.out, w.hvd,
                                             "per-tensor" if w.hvd is not None else "buckets")
    return code


if __name__ == "__main__":
    sys.exit(main())
