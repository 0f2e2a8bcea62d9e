"""The GPU what-ran fields (models/gpu/facts.py) from a reconstructed nvidia-smi output and torch's answers, and
the catalogue SKU bench gives them."""
from pathlib import Path

import pytest

from bench.facts.catalog import sku_of_gpu
from bench.records.parts import GpuRan
from models.gpu.facts import FACT_FIELDS, gpu_what_ran, smi_row_for
from models.gpu.plan import plan_compute, plan_device
from models.gpu.query import parse_query_gpu

ROWS = parse_query_gpu((Path(__file__).parent / "data" / "nvidia_smi" / "facts_h100.csv").read_text(),
                       FACT_FIELDS)
TORCH = {"name": "NVIDIA H100 80GB HBM3", "uuid": "72775666-ffa6-4239-9cf3-42ca060bb525",
         "compute_capability": "9.0", "cuda": "13.0", "cudnn": 91300, "nccl": "2.28.9"}


def test_the_row_of_this_gpu_is_found_by_uuid_not_by_position():
    assert len(ROWS) == 2
    # CUDA_VISIBLE_DEVICES=1 makes the second GPU device 0: the UUID still finds its row
    assert smi_row_for(ROWS, TORCH["uuid"], 0) is ROWS[1]
    assert smi_row_for(ROWS, None, 0) is ROWS[0]
    assert smi_row_for(ROWS, "GPU-00000000-0000-0000-0000-000000000000", 0) is None
    assert smi_row_for(ROWS, None, 5) is None


@pytest.mark.parametrize("precision,channels_last,amp,scaler", [("fp32", False, None, False),
                                                                 ("fp16", True, "float16", True),
                                                                 ("bf16", True, "bfloat16", False)])
def test_what_ran_joins_nvidia_smi_torch_and_the_plans(precision, channels_last, amp, scaler):
    device = plan_device(cuda=True, device_count=2, local_rank=1)
    compute = plan_compute(device, precision=precision, channels_last=channels_last, bf16_supported=True)
    got = gpu_what_ran(smi_row_for(ROWS, TORCH["uuid"], 1), TORCH, device, compute)
    assert got["name"] == "NVIDIA H100 80GB HBM3" and got["driver"] == "570.124.06"
    assert (got["clocks_sm_mhz"], got["clocks_max_sm_mhz"], got["clocks_mem_mhz"]) == (345.0, 1980.0, 2619.0)
    assert got["power_limit_w"] == 700.0
    assert (got["cuda"], got["cudnn"], got["nccl"], got["compute_capability"]) == ("13.0", 91300, "2.28.9", "9.0")
    assert got["cudnn_benchmark"] is True and got["tf32"] is True
    assert (got["amp_dtype"], got["grad_scaler"]) == (amp, scaler)
    assert got["channels_last_input"] is channels_last and got["channels_last_params"] is channels_last
    GpuRan.model_validate({**got, "sku": sku_of_gpu(got["name"])})  # the record accepts every field


def test_without_nvidia_smi_the_fields_it_owns_are_null():
    device = plan_device(cuda=True, device_count=1, local_rank=0)
    got = gpu_what_ran(None, TORCH, device, plan_compute(device, precision="fp32", channels_last=True,
                                                         bf16_supported=True))
    assert got["name"] == TORCH["name"]
    assert got["driver"] is None and got["power_limit_w"] is None and got["clocks_sm_mhz"] is None


def test_the_catalogue_sku_of_an_nvidia_smi_name():
    assert sku_of_gpu("NVIDIA H100 80GB HBM3") == "H100"
    assert sku_of_gpu("NVIDIA H200") == "H200"
    assert sku_of_gpu("NVIDIA A100-SXM4-80GB") == "A100"
    assert sku_of_gpu("NVIDIA H100 PCIe") is None  # no catalogue size has it
    assert sku_of_gpu(None) is None
