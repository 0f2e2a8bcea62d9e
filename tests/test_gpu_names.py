"""The catalogue owns what nvidia-smi calls each SKU's GPU: every name matches its own SKU and no other (a family
substring would take an A100 PCIe for an A100 SXM4, an H100 NVL for an H100 SXM5), and the local backend runs a GPU
cell only on GPUs of that SKU."""
import pytest

from bench.backends.local import backend as local
from bench.facts.catalog import catalog

# GPU names as nvidia-smi --query-gpu=name prints them (NVIDIA driver product names).
SMI_NAMES = {
    "K80": "Tesla K80", "P40": "Tesla P40", "P100": "Tesla P100-PCIE-16GB", "V100": "Tesla V100-PCIE-16GB",
    "V100-ND40": "Tesla V100-SXM2-32GB", "T4": "Tesla T4", "A100-PCIe": "NVIDIA A100 80GB PCIe",
    "A100": "NVIDIA A100-SXM4-80GB", "H100-NVL": "NVIDIA H100 NVL", "H100": "NVIDIA H100 80GB HBM3",
    "H200": "NVIDIA H200",
}


def test_every_gpu_sku_has_a_name_and_each_name_matches_its_own_sku_only():
    skus = catalog()
    assert set(SMI_NAMES) == {k for k, s in skus.items() if not s.is_cpu}
    for key, name in SMI_NAMES.items():
        assert [k for k, s in skus.items() if s.is_this_gpu(name)] == [key], name
    for other in ("NVIDIA H100 PCIe", "NVIDIA H200 NVL", "NVIDIA A10", "NVIDIA GeForce RTX 4090"):
        assert not [k for k, s in skus.items() if s.is_this_gpu(other)], other


@pytest.mark.parametrize("found,runs", [(("NVIDIA H100 NVL",) * 8, False), (("NVIDIA H100 80GB HBM3",) * 8, True)])
def test_the_local_backend_runs_an_h100_cell_only_on_h100_sxm_gpus(monkeypatch, tmp_path, found, runs):
    monkeypatch.setattr(local, "local_gpus", lambda: found)  # what nvidia-smi would have said on that machine
    backend = local.LocalBackend(tmp_path, 60)
    reason = backend.reach_reason({"gpu": "H100", "gpus": 8, "data": "synthetic"}, nodes=1)
    if runs:
        assert reason is None
    else:
        assert reason == f"H100 cell needs 8x {catalog()['H100'].gpu_model}; this machine has 8x NVIDIA H100 NVL"


def test_each_gpu_feature_discovery_product_is_the_driver_name_of_its_own_sku():
    """GFD writes the driver's product name with spaces as '-': each `gfd_products` value, read back that way, is
    the SKU's nvidia-smi name above, so the Kubernetes node affinity asks for exactly the GPU the cell names."""
    skus = catalog()
    for key, name in SMI_NAMES.items():
        assert skus[key].gfd_products == (name.replace(" ", "-"),), key
        for product in skus[key].gfd_products:
            assert [k for k, s in skus.items() if s.is_this_gpu(product.replace("-", " "))
                    or s.is_this_gpu(product)] == [key], product
    assert skus["cpu"].gfd_products == ()
