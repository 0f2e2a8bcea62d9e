"""A model's gradient tensors in the order its backward pass yields them, each with the share of the backward pass
done when it is ready (pure: the architecture's shapes and multiply-accumulates, no framework): ResNet-50's, and a
transformer decoder's (by layer part).

Two users: the collective sweep replays this stream beside a compute probe on the worker
(models/workloads/collectives/contention.py), and the control plane's fusion simulation (bench/analysis/fusion.py) runs
Horovod's loop over it. Kept on the worker side so the worker imports nothing from the control plane.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gradient:
    name: str
    params: int
    ready_fraction: float  # of the backward pass done when this gradient is ready (0 = its start, 1 = its end)


def _conv_macs(cin: int, cout: int, k: int, out_hw: int) -> int:
    return cin * cout * k * k * out_hw * out_hw


def resnet50_layers(image_size: int = 224) -> list[tuple[str, int, int, int]]:
    """ResNet-50 v1.5 (torchvision's: the stride on the 3×3 convolution) in forward order: (name, parameters of the
    convolution or linear layer, its batch-norm channels (0 for fc), its multiply-accumulates per image)."""
    layers = []
    hw = (image_size + 1) // 2  # conv1: 7×7, stride 2, padding 3
    layers.append(("conv1", 3 * 64 * 49, 64, _conv_macs(3, 64, 7, hw)))
    hw = (hw + 1) // 2  # max pool 3×3, stride 2, padding 1
    cin = 64
    for stage, (blocks, width, stride) in enumerate(((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)), 1):
        for block in range(blocks):
            s = stride if block == 0 else 1
            out_hw = (hw + s - 1) // s
            prefix = f"layer{stage}.{block}"
            layers.append((f"{prefix}.conv1", cin * width, width, _conv_macs(cin, width, 1, hw)))
            layers.append((f"{prefix}.conv2", width * width * 9, width, _conv_macs(width, width, 3, out_hw)))
            layers.append((f"{prefix}.conv3", width * 4 * width, 4 * width, _conv_macs(width, 4 * width, 1, out_hw)))
            if block == 0:
                layers.append((f"{prefix}.downsample", cin * 4 * width, 4 * width,
                               _conv_macs(cin, 4 * width, 1, out_hw)))
            cin, hw = 4 * width, out_hw
    layers.append(("fc", 2048 * 1000 + 1000, 0, 2048 * 1000))
    return layers


def resnet50_gradients(image_size: int = 224) -> list[Gradient]:
    """The 161 gradient tensors in the order the backward pass yields them, each with the share of backward done by
    then (a layer's backward time taken as proportional to its multiply-accumulates; a batch norm's gradients are
    ready just before its convolution's, as backward meets the norm first)."""
    layers = resnet50_layers(image_size)
    total = sum(macs for *_, macs in layers)
    out, done = [], 0
    for name, params, bn, macs in reversed(layers):
        if name == "fc":
            done += macs
            out += [Gradient("fc.bias", 1000, done / total), Gradient("fc.weight", params - 1000, done / total)]
            continue
        at_norm = done / total
        out += [Gradient(f"{name}.bn.bias", bn, at_norm), Gradient(f"{name}.bn.weight", bn, at_norm)]
        done += macs
        out.append(Gradient(f"{name}.weight", params, done / total))
    return out


def transformer_gradients(shape, seq: int | None = None) -> list[Gradient]:
    """A decoder's gradients in backward order, one tensor group per layer part, each with the share of the backward
    pass done when it is ready (backward time taken as proportional to the forward FLOPs of what lies after it:
    the head's matmul, then each block's attention (its matrices and the T² score and value products) and MLP, last
    block first). `shape`: a models.workloads.transformer.shapes.Shape (duck-typed, so this module imports nothing). The
    parameters add up to shape.params(); a tied head's gradient is the embedding's, ready at the very end."""
    t = seq or shape.seq
    d, kv, f = shape.width, shape.kv_width, shape.ffn
    mlp_in = (2 if shape.style == "llama" else 1) * d * f
    attn_matrices = d * (d + 2 * kv) + d * d
    attn_flops = attn_matrices + 2 * d * t  # per token: its matrices and its share of QK^T and AV
    mlp_flops = mlp_in + f * d
    head = shape.vocab * d
    total = head + shape.layers * (attn_flops + mlp_flops)
    vectors = shape.block_vectors()
    norm = d * (2 if shape.style == "gpt2" else 1)
    out, done = [], head
    out.append(Gradient("norm.final", norm, done / total))
    if not shape.tied:
        out.append(Gradient("head.weight", head, done / total))
    for layer in reversed(range(shape.layers)):
        done += mlp_flops
        out.append(Gradient(f"blocks.{layer}.mlp", mlp_in + f * d, done / total))
        done += attn_flops
        out.append(Gradient(f"blocks.{layer}.attention", attn_matrices, done / total))
        out.append(Gradient(f"blocks.{layer}.vectors", vectors, done / total))  # norms (and GPT-2's biases)
    positions = shape.seq * d if shape.style == "gpt2" else 0  # GPT-2's learned positions
    if positions:
        out.append(Gradient("positions", positions, 1.0))
    out.append(Gradient("embedding", shape.vocab * d, 1.0))
    return out
