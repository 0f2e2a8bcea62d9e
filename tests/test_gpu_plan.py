"""The PyTorch worker's device and precision choices (models/gpu/plan.py), every GPU branch included, on a CPU: the
plans are pure, the worker only performs their CUDA calls."""
from __future__ import annotations

import pytest

from models.gpu.plan import ComputePlan, DevicePlan, GpuPlanError, plan_compute, plan_device

CPU = plan_device(cuda=False, device_count=0, local_rank=0)
GPU1 = plan_device(cuda=True, device_count=8, local_rank=1)


def test_without_cuda_every_rank_computes_on_the_cpu_with_no_cuda_settings():
    for local_rank in (0, 3):  # no GPU to run out of: any local rank is fine
        assert plan_device(cuda=False, device_count=0, local_rank=local_rank) == DevicePlan(
            cuda=False, index=None, cudnn_benchmark=False, tf32=False)
    assert CPU.type == "cpu"


@pytest.mark.parametrize("local_rank", [0, 1, 7])
def test_each_local_rank_gets_its_own_gpu_with_cudnn_autotune_and_tf32(local_rank):
    plan = plan_device(cuda=True, device_count=8, local_rank=local_rank)
    assert plan == DevicePlan(cuda=True, index=local_rank, cudnn_benchmark=True, tf32=True)
    assert plan.type == "cuda"


@pytest.mark.parametrize("local_rank,count", [(8, 8), (1, 1), (0, 0), (-1, 4)])
def test_a_local_rank_beyond_the_nodes_gpus_is_refused_with_both_numbers(local_rank, count):
    with pytest.raises(GpuPlanError) as e:
        plan_device(cuda=True, device_count=count, local_rank=local_rank)
    assert str(e.value).startswith(f"local rank {local_rank} has no GPU: this node shows {count} ")
    assert "CUDA_VISIBLE_DEVICES" in str(e.value)


# device, precision, channels_last -> autocast dtype, GradScaler, input NHWC, parameters NHWC
CASES = [
    (CPU, "fp32", False, None, False, False, False),
    (CPU, "fp32", True, None, False, True, False),  # CPU: only the input goes channels-last
    (CPU, "fp16", False, "float16", True, False, False),
    (CPU, "bf16", True, "bfloat16", False, True, False),
    (GPU1, "fp32", False, None, False, False, False),
    (GPU1, "fp32", True, None, False, True, True),  # GPU: cuDNN wants the weights NHWC too
    (GPU1, "fp16", True, "float16", True, True, True),
    (GPU1, "bf16", False, "bfloat16", False, False, False),
    (GPU1, "bf16", True, "bfloat16", False, True, True),
]


@pytest.mark.parametrize("device,precision,channels_last,dtype,scaler,input_nhwc,param_nhwc", CASES)
def test_autocast_loss_scaling_and_memory_formats(device, precision, channels_last, dtype, scaler, input_nhwc,
                                                   param_nhwc):
    plan = plan_compute(device, precision=precision, channels_last=channels_last, bf16_supported=True)
    assert plan == ComputePlan(autocast_dtype=dtype, grad_scaler=scaler, input_channels_last=input_nhwc,
                               param_channels_last=param_nhwc)


def test_the_autocast_dtype_names_a_real_torch_dtype():
    torch = pytest.importorskip("torch")
    for precision, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        plan = plan_compute(GPU1, precision=precision, channels_last=False, bf16_supported=True)
        assert getattr(torch, plan.autocast_dtype) is dtype


def test_bf16_on_a_gpu_without_it_is_refused_with_the_devices_name():
    with pytest.raises(GpuPlanError, match=r"^bf16 is not supported on Tesla V100-SXM2-32GB$"):
        plan_compute(GPU1, precision="bf16", channels_last=True, bf16_supported=False,
                     device_name="Tesla V100-SXM2-32GB")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_bf16_support_matters_only_for_bf16(precision):
    plan = plan_compute(GPU1, precision=precision, channels_last=False, bf16_supported=False)
    assert plan.autocast_dtype == {"fp32": None, "fp16": "float16"}[precision]


def test_bf16_on_the_cpu_does_not_ask_about_gpu_support():
    # The worker does not ask torch.cuda on a CPU and passes False: CPU bf16 autocast runs regardless.
    assert plan_compute(CPU, precision="bf16", channels_last=False, bf16_supported=False).autocast_dtype == "bfloat16"
