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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run as a script from anywhere

from models.common import Comm, fail, measure_windows, parse_args, single_process_comm, threads_for  # noqa: E402
from models.registry import WORKLOADS  # noqa: E402

VERSION = WORKLOADS["pytorch"]["version"]


def horovod_comm(hvd, torch) -> Comm:
    barrier_tensor = torch.zeros(1)
    return Comm(hvd.rank(), hvd.size(), hvd.local_size(),
                barrier=lambda: hvd.allreduce(barrier_tensor, name="bench.barrier"),
                allgather_object=hvd.allgather_object,
                broadcast_object=lambda obj: hvd.broadcast_object(obj, root_rank=0))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    import torch

    from models.envprobe import probe_torch
    from models.resnet import ResNet50

    hvd = native = None
    local_rank = 0
    if args.engine == "native":
        from models import torch_native as native

        comm, local_rank, native_backend = native.init(torch)
    else:
        try:
            import horovod.torch as hvd
        except ImportError:
            print("bench worker: horovod is not installed; running as a single process", flush=True)
            comm = single_process_comm()
        else:
            hvd.init()
            comm = horovod_comm(hvd, torch)
            local_rank = hvd.local_rank()
    torch.set_num_threads(threads_for(args, comm.local_size))

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True  # autotune happens in warm-up, outside the window
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if args.precision == "bf16" and cuda and not torch.cuda.is_bf16_supported():
        fail(f"bf16 is not supported on {torch.cuda.get_device_name(device)}")
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    # Channels-last means NHWC activations. On a GPU cuDNN wants the weights in that layout too. On a CPU a
    # channels-last input alone runs oneDNN's NHWC kernels at the same speed while parameters and gradients stay
    # NCHW, so Horovod reduces them without two layout copies a step (28 ms of ~1.1 s measured here).
    param_format = memory_format if cuda else torch.contiguous_format

    torch.manual_seed(1234)
    model = ResNet50(num_classes=args.num_classes).to(device)
    global_batch = args.batch_size * comm.size
    if native is not None:
        # DDP broadcasts rank 0's parameters when it wraps the model, and averages gradients in backward().
        model = torch.nn.parallel.DistributedDataParallel(model.to(memory_format=param_format),
                                                          device_ids=[local_rank] if cuda else None)
    # The fused SGD kernel: momentum and weight decay in one pass (measured here: 13 vs 30 ms a step on 2 cores).
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * global_batch / 256, momentum=0.9, weight_decay=5e-5,
                                fused=True)
    if hvd is not None:
        from models.torch_layout import LayoutPreservingCompression

        # Horovod only moves contiguous (NCHW-ordered) tensors: broadcast first, then switch the layout.
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Average,
                                             compression=LayoutPreservingCompression)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    model = model.to(memory_format=param_format)
    loss_fn = torch.nn.CrossEntropyLoss()

    # Synthetic data: random (not zero) images and labels, different per rank, resident on the device.
    gen = torch.Generator().manual_seed(comm.rank)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=gen)
    images = images.to(device).contiguous(memory_format=memory_format)
    labels = torch.randint(0, args.num_classes, (args.batch_size,), generator=gen).to(device)
    next_batch = None
    if args.data == "imagenet":
        if args.data_layout != "jpeg":
            fail("the PyTorch workload reads the ImageNet JPEG tree only (data_layout: jpeg)")
        from models.data.imagenet_torch import Batches, default_workers
        from models.data.layout import DataError

        try:
            batches = Batches(args.data_dir, args.image_size, args.batch_size, comm.rank, comm.size,
                              args.loader_workers or default_workers(comm.local_size), device, args.channels_last)
        except DataError as e:
            fail(str(e))

        def next_batch():
            try:
                return next(batches)
            except DataError as e:
                fail(str(e))

    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.precision)
    autocast = (lambda: torch.autocast(device.type, dtype=amp_dtype)) if amp_dtype else contextlib.nullcontext
    # fp16 needs loss scaling; bf16 has fp32's range and does not.
    scaler = torch.amp.GradScaler(device.type) if args.precision == "fp16" else None

    def train_step(batch=None) -> torch.Tensor:
        x, y = batch if batch is not None else (images, labels)
        optimizer.zero_grad()  # torch 2 default: set_to_none (Horovod's wrapper takes no argument)
        with autocast():
            loss = loss_fn(model(x), y)
        if scaler:
            scaler.scale(loss).backward()
            if hvd is not None:
                optimizer.synchronize()  # Horovod: finish the allreduce before unscaling
                scaler.unscale_(optimizer)
                with optimizer.skip_synchronize():
                    scaler.step(optimizer)
            else:
                scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss.detach()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    model.train()
    base = {"framework": "pytorch", "workload": "resnet50_pytorch", "workload_version": VERSION,
            "batch_per_worker": args.batch_size, "image_size": args.image_size, "precision": args.precision,
            "channels_last": args.channels_last, "threads_per_worker": torch.get_num_threads(),
            "device": device.type, "engine": "native" if native else "horovod" if hvd else "none",
            "data": args.data}
    if args.data == "imagenet":
        base.update(data_layout=args.data_layout, loader_workers=batches.loader.num_workers)
    base["env_probe"] = probe_torch(hvd)
    if native is not None:
        base["env_probe"]["torch_distributed_backend"] = native_backend
    code = measure_windows(args, comm, train_step, lambda loss: float(loss), sync, base, next_batch,
                           batch_samples=lambda batch: len(batch[1]))
    if args.data == "imagenet" and batches.bad:
        print(f"bench worker: rank {comm.rank} skipped {batches.bad} undecodable images of {batches.seen}",
              flush=True)
    if hvd is not None:
        hvd.shutdown()
    if native is not None:
        native.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
