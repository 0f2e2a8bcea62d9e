"""FLOPs of one trained image, counted from the workload's model at an image size, two independent ways.

MFU (model FLOPs utilisation) divides the FLOPs a training step must do by what the GPU could do in the same time.
The convention (PaLM's "model FLOPs": 6N per token for a transformer = 3 × the forward pass's 2N) counts the
matrix-multiply and convolution FLOPs of one forward pass and takes three times that for a training step: the
forward pass, and a backward pass of two products per layer of the same size, one for the gradient of the input
and one for the gradient of the weights. A multiply-add is 2 FLOPs. What the counts leave out, both of them:
BatchNorm, ReLU, max- and average-pooling, the residual additions, the loss and the optimizer update. They are
element-wise (memory-bound, no tensor cores), and by the convention they are no model FLOPs.

The two counts:

- `counted`: torch.utils.flop_counter.FlopCounterMode, which counts only the aten matmul and convolution ops
  (convolution, convolution_backward, mm, addmm, ...) by their registered shape formulas. It runs the model on the
  "meta" device (shapes only: no memory, no arithmetic, a second or two) for one training step, and also for the
  forward pass alone.
- `analytic`: a walk over the model's Conv2d and Linear layers with forward hooks for their output shapes:
  MACs = output elements × (input channels / groups) × kernel height × kernel width (Linear: output elements ×
  input features), FLOPs = 2 × MACs. Its training step is the forward pass, one weight gradient the size of the
  forward product per layer, and one input gradient per layer whose input needs a gradient.

They agree exactly on the forward pass and on the training step. The training step autograd really runs is 0.96 %
smaller than 3 × forward at 224 px (0.94 % at 32 px): the stem convolution's input is the image batch, which needs
no gradient, so its input gradient is never computed. MFU uses the convention (3 × forward, `flops_per_image` in
the table), as published MFU figures do; the table keeps the step as counted beside it.

ResNet-50 v1.5 at 224 × 224 is 4.09 GMACs forward (torchvision's resnet50 page, pytorch.org/vision/stable/models/
generated/torchvision.models.resnet50.html, lists "GFLOPS 4.09" for these 25,557,032 parameters: that figure counts
multiply-adds), 8.18 GFLOPs, 24.5 GFLOPs per trained image. The ResNet paper's 3.8 × 10⁹ "FLOPs" for ResNet-50
(He et al., 2015, arXiv:1512.03385, Table 1; its text counts FLOPs as multiply-adds; quoted with 7.6 and 11.3 × 10⁹
for ResNet-101/152 in discourse.opengenus.org's list and stats.stackexchange.com/q/291843) is v1: striding in the
downsampling blocks' first 1×1 convolution runs those three convolutions at a quarter of v1.5's positions; the
same walk with v1's strides gives 3.86 GMACs. So: paper 3.8 (v1, MACs) → 4.09 (v1.5, MACs) → 8.18 GFLOPs forward
(× 2 per multiply-add) → 24.5 GFLOPs per trained image (× 3).

The table the control plane reads, bench/data/model_flops.yaml, is written by this module and never edited by hand:

    .venv/bin/python -m models.workloads.resnet50.flops --write bench/data/model_flops.yaml
    .venv/bin/python -m models.workloads.resnet50.flops --check bench/data/model_flops.yaml   # exit 1 naming any entry
    that differs

TensorFlow and Keras cells run the same model layer for layer (models/workloads/resnet50/model_tf.py), so one row serves
every framework (tests/test_mfu.py counts the Keras model's layers a third way).
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Callable

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))  # run from anywhere

# The image sizes the repository's matrices use (matrix*.yaml, ci/*.yaml: tests/test_mfu.py checks every one is
# here), 224 first. A cell at another size has no MFU until its size is added here and the table regenerated.
SIZES = (224, 64, 32)
BATCH = 2  # two images: BatchNorm in training mode needs more than one value per channel at 32 px's 1×1 stage 4
TOLERANCE = 0.01  # how far the convention (3 × forward) may be from the training step as counted


def _resnet50(torch):
    from models.workloads.resnet50.model_torch import ResNet50

    return ResNet50(num_classes=1000)


MODELS: dict[str, Callable] = {"resnet50": _resnet50}  # the cell's `model` → its PyTorch module (1000 classes)


@dataclass(frozen=True)
class Counts:
    """FLOPs per image: the forward pass and one training step (forward + backward) as each method counts them."""

    forward: int
    step: int

    @property
    def model_flops(self) -> int:
        """The convention MFU uses: 3 × the forward pass."""
        return 3 * self.forward


def _on_meta(model_name: str, image_size: int):
    import torch

    if model_name not in MODELS:
        raise KeyError(f"no model {model_name!r} (known: {', '.join(MODELS)})")
    with torch.device("meta"):
        model = MODELS[model_name](torch)
        images = torch.randn(BATCH, 3, image_size, image_size)
    model.train()
    return torch, model, images


def counted(model_name: str, image_size: int) -> Counts:
    """torch.utils.flop_counter's count: matmul and convolution ops only, forward alone and one training step."""
    from torch.utils.flop_counter import FlopCounterMode

    torch, model, images = _on_meta(model_name, image_size)
    with FlopCounterMode(display=False) as forward:
        model(images)
    torch, model, images = _on_meta(model_name, image_size)
    with FlopCounterMode(display=False) as step:
        model(images).sum().backward()
    return Counts(_per_image(forward.get_total_flops()), _per_image(step.get_total_flops()))


def analytic(model_name: str, image_size: int) -> Counts:
    """The hand count: 2 × MACs of every Conv2d and Linear from its output shape; backward = a weight gradient per
    layer plus an input gradient where the layer's input needs one."""
    torch, model, images = _on_meta(model_name, image_size)
    nn = torch.nn
    forward, backward = [0], [0]

    def hook(module, inputs, output):
        if isinstance(module, nn.Conv2d):
            kh, kw = module.kernel_size
            macs = output.numel() * (module.in_channels // module.groups) * kh * kw
        else:
            macs = output.numel() * module.in_features
        flops = 2 * macs
        forward[0] += flops
        backward[0] += flops if module.weight.requires_grad else 0  # d(loss)/d(weight)
        backward[0] += flops if inputs[0].requires_grad else 0  # d(loss)/d(input): not for the image batch

    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            module.register_forward_hook(hook)
    model(images)
    return Counts(_per_image(forward[0]), _per_image(forward[0] + backward[0]))


def _per_image(total: int) -> int:
    if total % BATCH:
        raise ValueError(f"{total} FLOPs do not split evenly over {BATCH} images")
    return total // BATCH


def disagreements(model_name: str, image_size: int, a: Counts, b: Counts) -> list[str]:
    """What is wrong between FlopCounterMode's counts `a` and the analytic `b` (empty: they agree)."""
    out = []
    if a.forward != b.forward:
        out.append(f"{model_name} {image_size}px forward: FlopCounterMode {a.forward:,} vs analytic {b.forward:,}")
    if a.step != b.step:
        out.append(f"{model_name} {image_size}px training step: FlopCounterMode {a.step:,} vs analytic {b.step:,}")
    gap = a.model_flops / a.step - 1
    if not 0 <= gap <= TOLERANCE:
        out.append(f"{model_name} {image_size}px: 3 × forward is {100 * gap:+.2f} % from the step as counted "
                   f"(expected 0 … {100 * TOLERANCE:.0f} %)")
    return out


def both(models=tuple(MODELS), sizes=SIZES):
    """(model, image size, FlopCounterMode's counts, the analytic counts) for each model and size."""
    for name in models:
        for size in sizes:
            yield name, size, counted(name, size), analytic(name, size)


def table(counts=None) -> dict[str, dict[int, dict[str, int]]]:
    """model → image size → {flops_per_image (3 × forward, what MFU uses), forward_flops, step_flops_counted};
    refuses (ValueError) when the two counts disagree."""
    out: dict[str, dict[int, dict[str, int]]] = {}
    for name, size, c, a in (both() if counts is None else counts):
        problems = disagreements(name, size, c, a)
        if problems:
            raise ValueError("; ".join(problems))
        out.setdefault(name, {})[size] = {"flops_per_image": c.model_flops, "forward_flops": c.forward,
                                          "step_flops_counted": c.step}
    return out


HEADER = """\
# Model FLOPs per trained image, per model (the cell's `model`) and image size (px, square): generated by
# `.venv/bin/python -m models.workloads.resnet50.flops --write bench/data/model_flops.yaml`. Do not edit:
# tests/test_mfu.py recounts every entry both ways (torch.utils.flop_counter and models/workloads/resnet50/flops.py's
# layer walk) and fails on any difference.
#   flops_per_image     3 × forward_flops: the convention MFU divides by the peak (bench/analysis/mfu.py)
#   forward_flops       one forward pass: matmul and convolution FLOPs only (a multiply-add is 2 FLOPs)
#   step_flops_counted  forward + backward as autograd runs it (FlopCounterMode): the stem convolution's input
#                       gradient is never computed, so it is ~1 % under flops_per_image
"""


def render(data: dict[str, dict[int, dict[str, int]]]) -> str:
    lines = [HEADER.rstrip("\n")]
    for name, sizes in data.items():
        lines.append(f"{name}:")
        for size, row in sizes.items():
            lines.append(f"  {size}: {{" + ", ".join(f"{k}: {v}" for k, v in row.items()) + "}")
    return "\n".join(lines) + "\n"


def check(path: str) -> list[str]:
    """Every way the file at `path` differs from a fresh count (empty: it matches)."""
    import yaml

    with open(path, encoding="utf-8") as f:
        text = f.read()
    written = yaml.safe_load(text) or {}
    try:
        fresh = table()
    except ValueError as e:  # the two counts disagree: nothing to compare the table with
        return [str(e)]
    problems = []
    for name in sorted(set(written) | set(fresh)):
        have, want = written.get(name) or {}, fresh.get(name) or {}
        for size in sorted(set(have) | set(want)):
            if have.get(size) != want.get(size):
                problems.append(f"{name} {size}px: the table has {have.get(size)}, "
                                f"a fresh count gives {want.get(size)}")
    if not problems and text != render(fresh):
        problems.append("the numbers match but the file is not as --write writes it (edited by hand?)")
    return problems


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m models.workloads.resnet50.flops", description=__doc__.splitlines()[0])
    group = p.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="PATH", help="write the table (bench/data/model_flops.yaml)")
    group.add_argument("--check", metavar="PATH", help="recount and compare with the table; exit 1 on a difference")
    args = p.parse_args(argv)
    if args.check:
        problems = check(args.check)
        for line in problems:
            print(line)
        print(f"{args.check}: {'differs' if problems else 'matches a fresh count'}")
        return 1 if problems else 0
    counts = list(both())
    for name, size, c, a in counts:
        print(f"{name} {size}px: forward {c.forward / 1e9:.4f} GFLOPs (FlopCounterMode) = {a.forward / 1e9:.4f} "
              f"(analytic); step {c.step / 1e9:.4f} = {a.step / 1e9:.4f}; 3 × forward {c.model_flops / 1e9:.4f}")
    data = table(counts)
    if args.write:
        with open(args.write, "w", encoding="utf-8") as f:
            f.write(render(data))
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
