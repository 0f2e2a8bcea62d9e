"""matrix-llm-cluster.yaml: Llama 3 8B's shape across 8-32 H100s x IB on/off x engines, rendered for Slurm, Azure ML
and Kubernetes, each backend's job valid by its own rules (sbatch script, the Azure ML SDK's job schema, the
operators' CRDs), and the cells that cannot fit an H100 skipped with the reason."""
from __future__ import annotations

import io

import pytest

from bench.backends import make_backend
from bench.planning.matrix import load_matrix
from bench.planning.plan import plan_cells
from tests.conftest import ROOT

MATRIX = ROOT / "matrix-llm-cluster.yaml"


def _planned(backend_name: str, tmp_path):
    matrix = load_matrix(MATRIX)
    backend = make_backend(backend_name, matrix.spec.backend, tmp_path)
    return backend, plan_cells(matrix.cells(), backend)


def test_only_fsdp2_fits_and_the_others_say_why(tmp_path):
    _, planned = _planned("slurm", tmp_path)
    assert len(planned) == 18
    runnable = [p for p in planned if p.runnable]
    assert {p.cell["engine"] for p in runnable} == {"fsdp2"} and len(runnable) == 5
    assert {(p.cell["gpus"], p.cell["ib"]) for p in runnable} == {(8, False), (16, False), (16, True), (32, False),
                                                                  (32, True)}
    unsharded = [p for p in planned if p.cell["engine"] != "fsdp2"]
    assert all("128.5 GB on every GPU (unsharded)" in p.reason for p in unsharded)


def test_slurm_starts_fsdp2_across_nodes_with_the_first_node_as_rendezvous(tmp_path):
    backend, planned = _planned("slurm", tmp_path)
    [cell] = [p for p in planned if p.runnable and p.cell["gpus"] == 32 and p.cell["ib"]]
    script = backend.script(cell, "RUN")
    assert "#SBATCH --nodes=4" in script and "#SBATCH --gpus-per-node=8" in script
    assert script.index("BENCH_NODES=(") < script.index('export MASTER_ADDR="${BENCH_NODES[0]}"')
    assert "--engine fsdp2" in script and "--model llama3-8b" in script and "NCCL_IB_DISABLE=0" in script


@pytest.mark.slow
def test_azure_ml_jobs_load_in_the_sdk(tmp_path, monkeypatch):
    from azure.ai.ml import load_job

    backend, planned = _planned("azureml", tmp_path)
    runnable = [p for p in planned if p.runnable]
    assert len(runnable) == 5
    for p in runnable:
        job = load_job(io.StringIO(backend.job_yaml(p, "RUN1")))
        assert job.resources.instance_count == p.nodes and "transformer/pytorch_worker.py" in job.command


@pytest.mark.slow
def test_kubernetes_jobs_are_valid_against_the_vendored_crds(tmp_path):
    pytest.importorskip("kubernetes_validate", reason="the core schema comes with kubernetes-validate (.[kubernetes])")
    from bench.backends.kubernetes import schema as kubernetes_schema

    backend, planned = _planned("kubernetes", tmp_path)
    runnable = [p for p in planned if p.runnable]
    assert len(runnable) == 5
    for p in runnable:
        manifest = backend.maker.manifest(p, "RUN_ID")
        assert manifest["kind"] == "MPIJob" and kubernetes_schema.problems(manifest) == [], p.label()
        assert "transformer/pytorch_worker.py" in str(manifest)
