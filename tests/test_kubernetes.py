"""The Kubernetes backend offline: every job the default matrix plans renders to a manifest the operators' own CRD
schemas and Kubernetes' core schema accept; placement, fabric and image choices land where the cluster reads them;
a setting that makes an invalid manifest is refused with one line and exit 2; and the submit / follow / collect /
cancel lifecycle deletes its job on every way out. No API server can run here: the lifecycle is driven by a stand-in
that plays back API objects shaped as the operators and the client give them (tests/test_kubernetes_follow.py says
where each shape comes from)."""
from __future__ import annotations

import copy
import hashlib
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from bench.backend_settings.kubernetes import KubernetesConfig
from bench.backends.kubernetes import schema as kubernetes_schema
from bench.backends.kubernetes.backend import KubernetesBackend
from bench.backends.kubernetes.manifests import job_name, worker_hosts
from bench.facts.catalog import catalog
from bench.images import mpijob
from bench.planning.matrix import load_matrix, load_matrix_text
from bench.planning.plan import plan_cells
from tests.conftest import ROOT, bench_cli
from tests.test_kubernetes_follow import (MPI_CREATED, MPI_RUNNING, PT_CREATED, PT_RUNNING, cond, container, launcher,
                                          mpi_labels)
from tests.test_kubernetes_follow import mpijob as mpijob_object
from tests.test_kubernetes_follow import pod, pt_labels, pytorchjob, unschedulable, worker

pytest.importorskip("kubernetes_validate", reason="the core schema comes with kubernetes-validate (.[kubernetes])")

CLUSTER = {"rdma_resource": "rdma/ib", "image_registry": "registry.example/bench"}
RECORD = '{"schema":1,"cell_id":"%s","run_id":"RUN","repeat":%d,"samples_per_sec":100.0}'


def _backend(tmp_path: Path, api=None, **settings) -> KubernetesBackend:
    return KubernetesBackend(KubernetesConfig(**{**CLUSTER, **settings}), tmp_path, 600, poll_every_s=0, api=api)


def _planned(backend, text: str | None = None):
    matrix = load_matrix(ROOT / "matrix.yaml") if text is None else load_matrix_text(text)
    return [p for p in plan_cells(matrix.cells(), backend) if p.runnable]


# --- the operators' schemas, as published ----------------------------------------------------------------------------
def test_the_vendored_crds_are_the_published_files():
    """bench/data/kubernetes/README.md names each file's digest: a local edit (or a swap without updating the
    table) fails here."""
    folder = ROOT / "bench" / "data" / "kubernetes"
    table = (folder / "README.md").read_text()
    for name in kubernetes_schema.CRDS.values():
        digest = hashlib.sha256((folder / name[0]).read_bytes()).hexdigest()
        assert re.search(rf"`{re.escape(name[0])}`.*`{digest}`", table), name[0]


@pytest.mark.slow
def test_every_job_of_the_default_matrix_is_valid_against_the_schemas(tmp_path):
    backend = _backend(tmp_path)
    planned = _planned(backend)
    kinds, flavours = Counter(), Counter()
    for p in planned:
        manifest = backend.maker.manifest(p, "RUN_ID")
        assert kubernetes_schema.problems(manifest) == [], p.label()
        kinds[manifest["kind"]] += 1
        flavours[(p.cell["mpi"], p.cell["engine"], p.cell["ib"], p.nodes > 1, p.sku.is_cpu)] += 1
    # What the default matrix plans here covers every kind, flavour, engine, ib value and node count.
    assert len(planned) > 1000 and set(kinds) == {"MPIJob", "PyTorchJob"}
    assert {m for m, *_ in flavours} == {"openmpi", "intelmpi", "mpich", "gloo"}
    assert {(ib, multi) for _, _, ib, multi, _ in flavours} == {(False, False), (False, True), (True, True)}
    assert {e for _, e, *_ in flavours} == {"horovod", "native", "fsdp2"}  # the transformer cells add FSDP2


def test_the_strict_check_refuses_a_misspelt_field_where_the_api_server_would_drop_it(tmp_path):
    backend = _backend(tmp_path)
    p = _planned(backend)[0]
    manifest = backend.maker.manifest(p, "RUN_ID")
    bad = copy.deepcopy(manifest)
    bad["spec"]["slotsPerWorkers"] = 1
    assert kubernetes_schema.problems(bad) == ["MPIJob spec: Additional properties are not allowed "
                                               "('slotsPerWorkers' was unexpected)"]
    bad = copy.deepcopy(manifest)
    bad["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"gpu": []}
    found = kubernetes_schema.problems(bad)
    assert any(f.startswith("MPIJob Worker pod template spec.containers.0.resources.limits.gpu") for f in found), found
    bad = copy.deepcopy(manifest)
    bad["spec"]["mpiImplementation"] = "OpenMPI5"
    assert any("'OpenMPI5' is not one of" in f for f in kubernetes_schema.problems(bad))


# --- what lands where the cluster reads it -------------------------------------------------------------------------
def _one(backend, **match):
    return next(p for p in _planned(backend) if all(
        (p.nodes if k == "nodes" else p.cell[k]) == v for k, v in match.items()))


def test_a_multi_node_infiniband_gpu_cell(tmp_path):
    backend = _backend(tmp_path)
    p = _one(backend, gpu="H100", mpi="openmpi", ib=True, engine="horovod", nodes=2)
    m = backend.maker.manifest(p, "RUN_ID")
    name = job_name(p, "RUN_ID")
    assert m["spec"]["mpiImplementation"] == "OpenMPI" and m["spec"]["slotsPerWorker"] == 8
    assert m["spec"]["sshAuthMountPath"] == mpijob.SSH_AUTH_MOUNT_PATH
    workers = m["spec"]["mpiReplicaSpecs"]["Worker"]
    assert workers["replicas"] == 2
    spec = workers["template"]["spec"]
    box = spec["containers"][0]
    assert box["resources"]["limits"] == {"nvidia.com/gpu": 8, "rdma/ib": 1}
    assert box["command"] == mpijob.sshd_command()
    assert box["image"] == f"registry.example/bench/{mpijob.mpijob_image_for_cell(p.cell)}"
    assert "IPC_LOCK" in box["securityContext"]["capabilities"]["add"]
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"] == [{"key": "nvidia.com/gpu.product", "operator": "In",
                                             "values": list(catalog()["H100"].gfd_products)}]
    assert spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
        "topologyKey"] == "kubernetes.io/hostname"
    argv = m["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    hosts = worker_hosts(name, "default", 2)
    assert argv[0] == "mpirun" and f"{hosts[0]}:8,{hosts[1]}:8" in argv
    assert f"-p {mpijob.SSH_PORT}" in argv and "--allow-run-as-root" not in argv
    assert "--out" not in argv  # rank 0 prints its records: the launcher's log carries them


def test_single_node_cells_and_cpu_cells(tmp_path):
    backend = _backend(tmp_path)
    m = backend.maker.manifest(_one(backend, gpu="A100", mpi="mpich", nodes=1, ib=False, gpus=8), "RUN_ID")
    spec = m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert "hostNetwork" not in spec and "podAntiAffinity" not in spec["affinity"]
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8}
    launch = m["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert launch[0] == "/opt/bench/.venv/bin/mpiexec.hydra"  # MPICH's, in the image's environment
    m = backend.maker.manifest(_one(backend, gpu="cpu", mpi="intelmpi"), "RUN_ID")
    assert m["spec"]["mpiImplementation"] == "Intel"
    worker_spec = m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker_spec["containers"][0]["resources"] == {} and "affinity" not in worker_spec


def test_torchrun_ddp_cells_are_pytorchjobs_and_mpirun_ddp_cells_mpijobs(tmp_path):
    backend = _backend(tmp_path)
    text = (ROOT / "matrix.yaml").read_text().split("\nbackend:")[0] + """
  - {gpu: H100, framework: pytorch, mpi: gloo, ib: false, gpus: 16, engine: native}
  - {gpu: H100, framework: pytorch, mpi: openmpi, ib: false, gpus: 16, engine: native}
"""
    planned = {(p.cell["mpi"], p.cell["gpu"], p.cell["gpus"]): p for p in _planned(backend, text)
               if p.cell["engine"] == "native"}
    torchrun = backend.maker.manifest(planned[("gloo", "H100", 16)], "RUN_ID")
    assert torchrun["kind"] == "PyTorchJob" and kubernetes_schema.problems(torchrun) == []
    replicas = torchrun["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 1
    argv = replicas["Master"]["template"]["spec"]["containers"][0]["command"]
    name = job_name(planned[("gloo", "H100", 16)], "RUN_ID")
    assert argv[:3] == ["/opt/bench/.venv/bin/python", "-m", "torch.distributed.run"]
    assert (f"{name}-master-0:29400" in argv
            and replicas["Worker"]["template"]["spec"]["containers"][0]["command"] == argv)
    mpirun = backend.maker.manifest(planned[("openmpi", "H100", 16)], "RUN_ID")
    assert mpirun["kind"] == "MPIJob" and kubernetes_schema.problems(mpirun) == []
    env = mpirun["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "MASTER_ADDR", "value": worker_hosts(job_name(planned[("openmpi", "H100", 16)], "RUN_ID"),
                                                         "default", 2)[0]} in env


def test_reach_reasons(tmp_path):
    backend = _backend(tmp_path, gpus_per_node=4, rdma_resource=None)
    reasons = {p.reason for p in plan_cells(load_matrix(ROOT / "matrix.yaml").cells(), backend) if not p.runnable}
    assert "8 GPUs per node: the cluster's GPU nodes have 4 (backend.kubernetes.gpus_per_node)" in reasons
    assert "ib=on: the cluster's RDMA device resource is not set (backend.kubernetes.rdma_resource)" in reasons
    assert "data=imagenet: no data set volume for Kubernetes yet (synthetic cells run)" in reasons


def test_images_by_digest_when_pushed_and_by_name_otherwise(tmp_path):
    from bench.images.push import Pushed, record_pushed

    backend = _backend(tmp_path)
    p = _one(backend, gpu="H100", mpi="openmpi", nodes=1, ib=False)
    local = mpijob.mpijob_image_for_cell(p.cell)
    assert backend.image_for(p.cell, True) == f"registry.example/bench/{local}"
    digest = "sha256:" + "ab" * 32
    record_pushed(Pushed(image=local, registry="registry.example/bench",
                         reference=f"registry.example/bench/{local.split(':')[0]}@{digest}",
                         image_id=None, pushed_at="2026-11-28T00:00:00+00:00"), tmp_path / "images")
    assert backend.image_for(p.cell, True).endswith(f"@{digest}")
    assert _backend(tmp_path, image="mine:1").image_for(p.cell, True) == "mine:1"


# --- refused with one line ---------------------------------------------------------------------------------------
SMALL = """name: k8s
axes: {gpu: [cpu], framework: [pytorch], mpi: [openmpi], ib: [false], gpus: [2]}
workload: {image_size: 32, batch_per_gpu: 2, warmup_steps: 1, steps: 2, repeats: 1, threads: 1}
backend:
  name: kubernetes
  kubernetes:
    image_registry: registry.example/bench
"""


def test_plan_prints_valid_manifests(write_matrix, tmp_path):
    out = bench_cli("plan", str(write_matrix(SMALL)), "--show-commands", "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    import json

    rows = [r for r in json.loads(out.stdout) if r["status"] == "planned"]
    assert rows
    for row in rows:
        manifest = yaml.safe_load(row["command"]["manifest"])
        assert manifest["kind"] == "MPIJob" and kubernetes_schema.problems(manifest) == []


@pytest.mark.slow
def test_a_setting_that_makes_an_invalid_manifest_exits_2_with_one_line(write_matrix, tmp_path):
    bad = SMALL + "    tolerations: [{key: gpu, operator: Exists, tolerationSeconds: soon}]\n"
    out = bench_cli("plan", str(write_matrix(bad)), "--show-commands", cwd=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "rendered manifest is invalid" in lines[0] and "tolerationSeconds" in lines[0], lines
    out = bench_cli("run", str(write_matrix(bad)), cwd=tmp_path)
    assert out.returncode == 2 and not (tmp_path / "results").exists(), out.stderr


def test_run_without_a_registry_or_a_kubeconfig_exits_2_before_anything_is_written(write_matrix, tmp_path,
                                                                                   monkeypatch):
    no_registry = SMALL.replace("    image_registry: registry.example/bench\n", "    namespace: bench\n")
    out = bench_cli("run", str(write_matrix(no_registry)), cwd=tmp_path)
    assert out.returncode == 2 and "image_registry" in out.stderr and not (tmp_path / "results").exists()
    out = bench_cli("run", str(write_matrix(SMALL)), cwd=tmp_path,
                    env={"KUBECONFIG": str(tmp_path / "none"), "KUBERNETES_SERVICE_HOST": ""})
    assert out.returncode == 2 and "kube" in out.stderr.lower() and not (tmp_path / "results").exists(), out.stderr


# --- the lifecycle, on played-back API objects ---------------------------------------------------------------------
class PlayedBack:
    """A cluster's answers in order: each `get` returns the next job object (the last one repeats), `pods` the
    matching pod list; `delete` is recorded. What a real API server would answer for these calls, nothing more."""

    def __init__(self, jobs, pods, logs=None, create_error=None):
        self.jobs, self.pod_lists, self.logs = list(jobs), list(pods), logs or {}
        self.create_error = create_error
        self.created, self.deleted = [], []

    def create(self, manifest):
        if self.create_error:
            raise self.create_error
        self.created.append(manifest)
        return manifest["metadata"]["name"]

    def get(self, kind, name):
        return self.jobs.pop(0) if len(self.jobs) > 1 else self.jobs[0]

    def pods(self, name):
        return self.pod_lists.pop(0) if len(self.pod_lists) > 1 else self.pod_lists[0]

    def log(self, pod_name, container=None, tail_bytes=None):
        return self.logs.get(pod_name, "")

    def delete(self, kind, name):
        self.deleted.append((kind, name))


def _cell(backend):
    return _one(backend, gpu="cpu", mpi="openmpi")


def _follow(backend, p, limit=50):
    handle = backend.submit(p, "RUN")
    for _ in range(limit):
        if backend.poll(handle):
            break
    return handle, backend.collect(handle)


def test_a_succeeded_mpijob_gives_the_records_rank_0_printed_and_is_deleted(tmp_path):
    p = _cell(_backend(tmp_path))
    repeats = p.cell["repeats"]
    log = "\n".join(["Warning: Permanently added 'bench-x-worker-0' (ED25519) to the list of known hosts."] +
                    [f"[1,0]<stdout>:BENCH_RECORD {RECORD % (p.cell_id, r)}" for r in range(repeats)])
    done = mpijob_object(MPI_CREATED, MPI_RUNNING, cond("Succeeded", "True", "MPIJobSucceeded",
                                                          "MPIJob default/bench-x successfully completed.",
                                                          "2025-03-01T10:05:00Z"))
    api = PlayedBack([mpijob_object(MPI_CREATED), mpijob_object(MPI_CREATED, MPI_RUNNING), done],
                     [[launcher(), worker(0)]], logs={"bench-x-launcher-abcde": log})
    backend = _backend(tmp_path, api=api)
    handle, outcome = _follow(backend, p)
    assert outcome.status == "ok", outcome.reason
    assert [r["repeat"] for r in outcome.records] == list(range(repeats))
    assert api.deleted == [("MPIJob", handle.name)]
    assert (handle.job_dir / "log.txt").read_text() == log
    assert yaml.safe_load((handle.job_dir / "manifest.yaml").read_text()) == api.created[0]


def test_an_oom_killed_worker_fails_the_cell_with_the_reason_and_the_job_is_deleted(tmp_path):
    p = _cell(_backend(tmp_path))
    oom = worker(1, phase="Failed", containers=[container("worker", terminated=("OOMKilled", 137, None))])
    api = PlayedBack([mpijob_object(MPI_CREATED, MPI_RUNNING)], [[launcher(), worker(0), oom]])
    backend = _backend(tmp_path, api=api)
    handle, outcome = _follow(backend, p)
    assert outcome.status == "failed" and "OOMKilled" in outcome.reason and "bench-x-worker-1" in outcome.reason
    assert api.deleted == [("MPIJob", handle.name)]


def test_an_unschedulable_cell_fails_after_the_pending_limit_naming_the_scheduler(tmp_path):
    p = _cell(_backend(tmp_path))
    stuck = pod("bench-x-worker-0", mpi_labels("worker", 0), phase="Pending", conditions=[unschedulable()])
    api = PlayedBack([mpijob_object(MPI_CREATED)], [[stuck]])
    backend = _backend(tmp_path, api=api, pending_timeout_s=1)
    handle = backend.submit(p, "RUN")
    handle.submitted -= 5  # it has waited 5 s, past the 1 s limit
    assert backend.poll(handle)
    outcome = backend.collect(handle)
    assert outcome.status == "failed" and "Insufficient nvidia.com/gpu" in outcome.reason
    assert api.deleted == [("MPIJob", handle.name)]


def test_ctrl_c_and_the_timeout_delete_the_job(tmp_path):
    p = _cell(_backend(tmp_path))
    api = PlayedBack([mpijob_object(MPI_CREATED, MPI_RUNNING)], [[launcher(), worker(0)]])
    backend = _backend(tmp_path, api=api)
    handle = backend.submit(p, "RUN")
    assert not backend.poll(handle)
    backend.cancel(handle)
    outcome = backend.collect(handle)
    assert outcome.status == "interrupted" and api.deleted == [("MPIJob", handle.name)]
    backend.timeout_s = 0.0
    handle = backend.submit(p, "RUN2")
    backend.poll(handle)  # running from now on
    assert backend.poll(handle)
    outcome = backend.collect(handle)
    assert outcome.status == "timeout" and api.deleted[-1] == ("MPIJob", handle.name)


def test_a_refused_submit_fails_its_cell_with_one_line_and_leaves_nothing(tmp_path):
    from bench.backends.kubernetes.api import ClusterError

    p = _cell(_backend(tmp_path))
    api = PlayedBack([], [], create_error=ClusterError('403 Forbidden: mpijobs.kubeflow.org is forbidden: User '
                                                       '"dev" cannot create resource "mpijobs"', 403))
    backend = _backend(tmp_path, api=api)
    handle, outcome = _follow(backend, p)
    assert outcome.status == "failed" and outcome.reason.startswith("submit to Kubernetes failed: 403 Forbidden")
    assert api.deleted == []


def test_a_pytorchjob_reads_rank_0_from_whichever_pod_holds_it(tmp_path):
    backend = _backend(tmp_path)
    text = (ROOT / "matrix.yaml").read_text().split("\nbackend:")[0] + \
        "\n  - {gpu: cpu, framework: pytorch, mpi: gloo, ib: false, gpus: 2, engine: native, workers_per_node: 1," \
        " image_size: 32, batch_per_gpu: 2, warmup_steps: 1, steps: 2, repeats: 2, threads: 1}\n"
    p = next(p for p in _planned(backend, text) if p.cell["engine"] == "native" and p.nodes == 2)
    log = "\n".join(f"BENCH_RECORD {RECORD % (p.cell_id, r)}" for r in range(2))
    done = pytorchjob(PT_CREATED, PT_RUNNING, cond("Succeeded", "True", "PyTorchJobSucceeded",
                                                   "PyTorchJob bench-x is successfully completed.",
                                                   "2025-03-01T10:05:00Z"))
    pods = [pod("bench-x-master-0", pt_labels("master", 0), phase="Succeeded"),
            pod("bench-x-worker-0", pt_labels("worker", 0), phase="Succeeded")]
    api = PlayedBack([done], [pods], logs={"bench-x-worker-0": log})
    backend = _backend(tmp_path, api=api)
    handle, outcome = _follow(backend, p)
    assert outcome.status == "ok" and len(outcome.records) == 2
    assert api.deleted == [("PyTorchJob", handle.name)]


def test_the_example_in_the_docs_is_what_bench_renders_today(tmp_path):
    """docs/backends.md shows matrix-kubernetes.yaml and its manifest: both as the repository has and renders them."""
    text = (ROOT / "docs" / "backends.md").read_text()
    section = text[text.index("## Kubernetes"):text.index("## An emulated cluster")]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert blocks[-2] == (ROOT / "matrix-kubernetes.yaml").read_text()
    matrix = load_matrix(ROOT / "matrix-kubernetes.yaml")
    backend = KubernetesBackend(matrix.spec.backend.kubernetes, tmp_path, 600)
    [planned] = [p for p in plan_cells(matrix.cells(), backend) if p.runnable]
    assert yaml.safe_load(blocks[-1]) == backend.manifest(planned, "RUN_ID")
    assert backend.describe(planned, "RUN_ID")["manifest"] == blocks[-1]
