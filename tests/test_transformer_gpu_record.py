"""The transformer worker's `gpu` what-ran, built on a machine with no GPU: a stand-in for the few torch.cuda calls
torch_gpu_facts makes, no nvidia-smi on PATH. The field must say what this worker chose (autocast under DDP, the
mixed-precision policy under FSDP2, no cuDNN autotuning) and pass bench's record schema."""
from types import SimpleNamespace

import pytest

from bench.records.parts import GpuRan
from models.gpu.plan import plan_device
from models.workloads.transformer.pytorch_worker import gpu_what_ran


def stand_in_torch():
    props = SimpleNamespace(name="NVIDIA H200", uuid="91875b66-0000-0000-0000-000000000000", major=9, minor=0)
    return SimpleNamespace(
        cuda=SimpleNamespace(get_device_properties=lambda device: props,
                             nccl=SimpleNamespace(version=lambda: (2, 28, 9))),
        version=SimpleNamespace(cuda="13.0"),
        backends=SimpleNamespace(cudnn=SimpleNamespace(version=lambda: 91900, benchmark=False)))


@pytest.mark.parametrize("engine, precision, amp, scaler", [
    ("native", "bf16", "bfloat16", False), ("fsdp2", "bf16", None, False), ("horovod", "fp16", "float16", True),
    ("native", "fp32", None, False)])
def test_the_record_names_the_gpu_and_the_numerics_this_worker_chose(monkeypatch, engine, precision, amp, scaler):
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: the fields it owns are null, not guessed
    dev = plan_device(cuda=True, device_count=1, local_rank=0)
    ran = gpu_what_ran(stand_in_torch(), SimpleNamespace(index=0, type="cuda"), dev,
                       SimpleNamespace(precision=precision, engine=engine))
    assert ran["name"] == "NVIDIA H200" and ran["compute_capability"] == "9.0" and ran["nccl"] == "2.28.9"
    assert ran["amp_dtype"] == amp and ran["grad_scaler"] is scaler
    assert ran["cudnn_benchmark"] is False  # the image workers' plan turns it on; this worker does not
    assert ran["channels_last_input"] is False and ran["tf32"] is True
    assert ran["clocks_sm_mhz"] is None and ran["driver"] is None
    GpuRan.model_validate(ran)
