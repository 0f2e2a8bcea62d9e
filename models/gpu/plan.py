"""Where a PyTorch worker computes and in what precision, decided from plain facts, without touching CUDA.

The worker asks torch the facts (is CUDA available, how many devices, is bf16 supported) and performs the CUDA
calls; every choice between them is made here, so each GPU branch runs in a unit test on a machine with no GPU.
Two steps, because bf16 support is a question about the current device, which exists only once the device index
chosen here has been set.
"""
from __future__ import annotations

from dataclasses import dataclass


class GpuPlanError(ValueError):
    """A placement or precision this process cannot run; the worker refuses with its text."""


@dataclass(frozen=True)
class DevicePlan:
    cuda: bool
    index: int | None  # the CUDA device of this process (its local rank), None on a CPU
    cudnn_benchmark: bool  # cuDNN autotunes in warm-up, outside the measured window
    tf32: bool  # TF32 matmuls and convolutions (Ampere and newer), as for any fp32 training on a GPU

    @property
    def type(self) -> str:
        return "cuda" if self.cuda else "cpu"


@dataclass(frozen=True)
class ComputePlan:
    autocast_dtype: str | None  # the name of a torch dtype ("float16", "bfloat16"), None without autocast
    grad_scaler: bool  # fp16 needs loss scaling; bf16 has fp32's range and does not
    input_channels_last: bool
    param_channels_last: bool


def plan_device(*, cuda: bool, device_count: int, local_rank: int) -> DevicePlan:
    """One GPU per process, picked by local rank; the CPU when CUDA is absent."""
    if not cuda:
        return DevicePlan(cuda=False, index=None, cudnn_benchmark=False, tf32=False)
    if not 0 <= local_rank < device_count:
        raise GpuPlanError(f'local rank {local_rank} has no GPU: this node shows {device_count} '
                           f'(one worker per GPU; fewer workers per node, or check CUDA_VISIBLE_DEVICES)')
    return DevicePlan(cuda=True, index=local_rank, cudnn_benchmark=True, tf32=True)


_AUTOCAST = {"fp16": "float16", "bf16": "bfloat16"}


def plan_compute(device: DevicePlan, *, precision: str, channels_last: bool, bf16_supported: bool,
                 device_name: str | None = None) -> ComputePlan:
    """Autocast, loss scaling and memory formats for `precision` on `device`.

    `bf16_supported` is asked of the device only where it matters (bf16 on a GPU); on a CPU bf16 autocast runs
    whatever the answer.
    """
    if precision == "bf16" and device.cuda and not bf16_supported:
        raise GpuPlanError(f'bf16 is not supported on {device_name}')
    # Channels-last means NHWC activations. On a GPU cuDNN wants the weights in that layout too. On a CPU a
    # channels-last input alone runs oneDNN's NHWC kernels at the same speed while parameters and gradients stay
    # NCHW, so Horovod reduces them without two layout copies a step (28 ms of ~1.1 s measured here).
    return ComputePlan(autocast_dtype=_AUTOCAST.get(precision), grad_scaler=precision == "fp16",
                       input_channels_last=channels_last, param_channels_last=channels_last and device.cuda)
