"""Horovod data-parallel ResNet-50 v1.5 training throughput, PyTorch, synthetic data.

Runs on every worker (one process per GPU, or per CPU slot in the fallback). Rank 0 writes one JSON record per
measured repeat. Imports nothing from the control plane: this folder is all a cluster node gets.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run as a script from anywhere

from models.meter import EmptyWindowError, WindowMeter, combine  # noqa: E402
from models.record import write_record  # noqa: E402
from models.registry import WORKLOADS  # noqa: E402

VERSION = WORKLOADS["pytorch"]["version"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--warmup-steps", type=int, default=10, help="run before the first window, not measured")
    p.add_argument("--steps", type=int, default=50, help="steps per measured window")
    p.add_argument("--repeats", type=int, default=3, help="measured windows")
    p.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads per worker; 0 = cores / local workers")
    p.add_argument("--cell-id", default=None)
    p.add_argument("--run-id", default=None)
    p.add_argument("--out", default=None, help="append records (JSON lines) here; default: stdout")
    args = p.parse_args(argv)
    for name in ("batch_size", "image_size", "steps", "repeats"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.warmup_steps < 0:
        p.error("--warmup-steps must be >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import horovod.torch as hvd

    from models.envprobe import probe_torch
    from models.resnet import ResNet50
    from models.torch_layout import LayoutPreservingCompression

    hvd.init()
    rank, size, local_size = hvd.rank(), hvd.size(), hvd.local_size()
    threads = args.threads or max(1, (os.cpu_count() or 1) // local_size)
    torch.set_num_threads(threads)

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", hvd.local_rank()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True  # autotune happens in warm-up, outside the window
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format

    torch.manual_seed(1234)
    model = ResNet50(num_classes=args.num_classes).to(device)
    # Horovod only moves contiguous (NCHW-ordered) tensors: broadcast first, then switch the layout.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    model = model.to(memory_format=memory_format)
    global_batch = args.batch_size * size
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * global_batch / 256, momentum=0.9, weight_decay=5e-5)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Average,
                                         compression=LayoutPreservingCompression)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    loss_fn = torch.nn.CrossEntropyLoss()

    # Synthetic data: random (not zero) images and labels, different per rank, resident on the device.
    gen = torch.Generator().manual_seed(rank)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=gen)
    images = images.to(device).contiguous(memory_format=memory_format)
    labels = torch.randint(0, args.num_classes, (args.batch_size,), generator=gen).to(device)

    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.precision)
    autocast = (lambda: torch.autocast(device.type, dtype=amp_dtype)) if amp_dtype else contextlib.nullcontext
    # fp16 needs loss scaling; bf16 has fp32's range and does not.
    scaler = torch.amp.GradScaler(device.type) if args.precision == "fp16" else None

    def train_step() -> torch.Tensor:
        optimizer.zero_grad()  # torch 2 default: set_to_none (Horovod's wrapper takes no argument)
        with autocast():
            loss = loss_fn(model(images), labels)
        if scaler:
            scaler.scale(loss).backward()
            optimizer.synchronize()  # Horovod: finish the allreduce before unscaling
            scaler.unscale_(optimizer)
            with optimizer.skip_synchronize():
                scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss.detach()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    barrier_tensor = torch.zeros(1)

    def barrier() -> None:
        hvd.allreduce(barrier_tensor, name="bench.barrier")

    model.train()
    for _ in range(args.warmup_steps):
        train_step()
    sync()

    env = probe_torch(hvd)
    host = socket.gethostname()
    failed = False
    for repeat in range(args.repeats):
        meter = WindowMeter()
        barrier()
        meter.begin()
        loss = None
        for _ in range(args.steps):
            loss = train_step()
            sync()
            meter.step(args.batch_size)
        meter.busy_end()
        barrier()
        meter.end()
        final_loss = float(loss)
        summaries = hvd.allgather_object(meter.rank_summary(rank, host))
        losses = hvd.allgather_object(final_loss)
        if rank == 0:
            failed = not _report(args, repeat, summaries, losses, final_loss, size, local_size, threads, device, env)
        # Every rank must leave together, or the others would wait in the next barrier forever.
        if hvd.broadcast_object(failed, root_rank=0):
            failed = True
            break
    hvd.shutdown()
    return 1 if failed else 0


def _report(args, repeat, summaries, losses, final_loss, size, local_size, threads, device, env) -> bool:  # noqa: PLR0913
    """Rank 0: combine the ranks' summaries into one record and write it. False if the window is unusable."""
    try:
        measured = combine(summaries)
    except EmptyWindowError as e:
        print(f"bench worker: repeat {repeat}: {e}", file=sys.stderr, flush=True)
        return False
    if not all(math.isfinite(x) for x in losses):
        print(f"bench worker: repeat {repeat}: non-finite loss {losses}", file=sys.stderr, flush=True)
        return False
    record = {
        "kind": "measurement",
        "cell_id": args.cell_id,
        "run_id": args.run_id,
        "repeat": repeat,
        "status": "ok",
        "framework": "pytorch",
        "workload": "resnet50_pytorch",
        "workload_version": VERSION,
        "world_size": size,
        "local_size": local_size,
        "batch_per_worker": args.batch_size,
        "image_size": args.image_size,
        "precision": args.precision,
        "channels_last": args.channels_last,
        "threads_per_worker": threads,
        "device": device.type,
        "warmup_steps": args.warmup_steps,
        "measured_steps": args.steps,
        "loss": final_loss,
        **measured,
        "env_probe": env,
    }
    write_record(record, args.out)
    print(f"bench worker: repeat {repeat}: {measured['images_per_sec']:.1f} img/s over {size} workers, "
          f"window {measured['window_s']:.2f} s, slowest rank {measured['slowest_rank']}", flush=True)
    return True


if __name__ == "__main__":
    sys.exit(main())
