"""When ResNet-50's gradients become ready in one backward pass on this machine, against the ready times
bench/analysis/fusion.py assumes (each layer's share of backward proportional to its multiply-accumulates), and how
many fused operations each gives.

    python benchmarks/gradient_ready.py --image-size 64 --batch-size 32 --threads 1 --alpha-ms 1.2 --gbps 0.19

The model the PyTorch cells train (models/workloads/resnet50/model_torch.py). A hook on every parameter (torch's
post-accumulate-grad hook, where Horovod's DistributedOptimizer submits each gradient) notes when its gradient is ready,
as a fraction of the backward pass; medians over --steps steps after --warmup steps. --alpha-ms and --gbps: one
allreduce's latency and bandwidth for the fusion count (a sweep's fit). Prints, per stage, where its last gradient is
ready (measured / the multiply-accumulate model), and the operation count of each profile.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.analysis.fusion import Gradient, resnet50_gradients, simulate  # noqa: E402


def model_name(torch_name: str) -> str:
    """models/workloads/resnet50/model_torch.py's parameter name (stem.*, layers.K.*, fc.*) → fusion.resnet50_gradients'
    (conv1.*, layerS.B.*, fc.*)."""
    from models.workloads.resnet50.model_torch import ResNet50

    parts = torch_name.split(".")
    if parts[0] == "stem":
        return "conv1.weight" if parts[1] == "0" else f"conv1.bn.{parts[-1]}"
    if parts[0] == "fc":
        return torch_name
    index, stage = int(parts[1]), 1
    for _, blocks, _ in ResNet50.stages:
        if index < blocks:
            break
        index, stage = index - blocks, stage + 1
    block, layer, kind = f"layer{stage}.{index}", parts[2], parts[-1]
    if layer == "downsample":
        return f"{block}.downsample" + (".weight" if parts[3] == "0" else f".bn.{kind}")
    if layer.startswith("bn"):
        return f"{block}.conv{layer[2:]}.bn.{kind}"
    return f"{block}.{layer}.{kind}"


def measure(image_size: int, batch: int, threads: int, warmup: int, steps: int) -> dict[str, float]:
    import torch

    from models.workloads.resnet50.model_torch import ResNet50

    torch.set_num_threads(threads)
    net = ResNet50()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(batch, 3, image_size, image_size), torch.randint(0, 1000, (batch,))
    stamps: dict[str, float] = {}
    for name, p in net.named_parameters():
        p.register_post_accumulate_grad_hook(lambda _p, name=name: stamps.__setitem__(name, time.perf_counter()))
    ready: dict[str, list[float]] = {}
    for step in range(warmup + steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        stamps.clear()
        t0 = time.perf_counter()
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        if step >= warmup:
            for name, t in stamps.items():
                ready.setdefault(model_name(name), []).append((t - t0) / (t1 - t0))
    return {name: statistics.median(v) for name, v in ready.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--backward-s", type=float, default=1.0, help="backward seconds for the fusion count")
    p.add_argument("--alpha-ms", type=float, default=1.2)
    p.add_argument("--gbps", type=float, default=0.19, help="GB/s")
    a = p.parse_args(argv)
    for name in ("image_size", "batch_size", "threads", "steps", "backward_s", "alpha_ms", "gbps"):
        if not getattr(a, name) > 0:
            print(f"gradient_ready: --{name.replace('_', '-')} must be positive, got {getattr(a, name):g}",
                  file=sys.stderr)
            return 2
    assumed = resnet50_gradients(a.image_size)
    measured = measure(a.image_size, a.batch_size, a.threads, a.warmup, a.steps)
    missing = [g.name for g in assumed if g.name not in measured]
    if missing:
        print(f"gradient_ready: no measured time for {missing[0]} ({len(missing)} in all)", file=sys.stderr)
        return 1
    print(f"ResNet-50, batch {a.batch_size} of {a.image_size} px, {a.threads} thread(s): the share of backward done "
          f"when each stage's gradients are all ready (measured / multiply-accumulate model)")
    for stage in ("fc", "layer4", "layer3", "layer2", "layer1", "conv1"):
        names = [g for g in assumed if g.name.startswith(stage + ".")]
        print(f"  {stage}: {max(measured[g.name] for g in names):.3f} / {max(g.ready_fraction for g in names):.3f}")
    link = lambda n: a.alpha_ms / 1000 + n / (a.gbps * 1e9)  # noqa: E731
    real = [Gradient(g.name, g.params, min(1.0, measured[g.name])) for g in assumed]
    for label, grads in (("measured ready times", real), ("multiply-accumulate model", assumed)):
        s = simulate(grads, a.backward_s, link)
        print(f"{label}: {s.count} operations, {s.after_backward} ending after the backward pass, "
              f"tail {1000 * s.tail_s:.0f} ms (backward {a.backward_s:g} s, α {a.alpha_ms:g} ms, {a.gbps:g} GB/s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # its reader (e.g. `| head`) stopped reading: no traceback, the shell's SIGPIPE status
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
