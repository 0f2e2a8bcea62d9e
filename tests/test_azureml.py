"""The Azure ML backend, offline: every job of the default matrix is built with the real azure-ai-ml SDK and
validated by its own loader; the CLI plans without a workspace and refuses to run without one; a submit that cannot
authenticate (the real DefaultAzureCredential, with no credential to find) fails its cell and the next is tried.
The cloud itself is unreachable here: only the poll/collect lifecycle uses a stand-in for the service."""
import datetime
import io
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from azure.ai.ml import load_job
from azure.ai.ml.entities import Command

from bench.backend_settings.azureml import AzureMLConfig
from bench.backends import make_backend
from bench.backends.azureml.backend import (RECORDS, AzureMLBackend, Handle, check_no_secrets, fabric_env,
                                            resolve_workspace)
from bench.backends.shared.cell_launch import MODELS_DIR
from bench.core.errors import BenchInputError
from bench.core.redact import redact_text
from bench.facts.catalog import catalog
from bench.images import recipes
from bench.launch.evidence import debug_env
from bench.planning.cell import PlannedCell, cell_id
from bench.planning.matrix import load_matrix, load_matrix_text
from bench.planning.plan import plan_cells
from tests.conftest import ROOT, bench_cli

FAKE_KEY = "A1b2" * 21 + "xy=="  # 86 base64 characters + "==": the shape of a storage account key
assert len(FAKE_KEY) == 88
BINDING = re.compile(r"\$\{\{(inputs|outputs)\.(\w+)\}\}")
SECRETS = re.compile(r"(?i)AccountKey|[?&]sig=|password|secret|bearer|[A-Za-z0-9+/]{86}==")
WORKSPACE_VARS = ("AZUREML_SUBSCRIPTION_ID", "AZUREML_RESOURCE_GROUP", "AZUREML_WORKSPACE")


@pytest.fixture
def no_workspace(monkeypatch):
    for var in WORKSPACE_VARS:
        monkeypatch.delenv(var, raising=False)


def _backend(text: str, tmp_path: Path, **kw) -> tuple[AzureMLBackend, list[PlannedCell]]:
    matrix = load_matrix_text(text)
    backend = AzureMLBackend(matrix.spec.backend.azureml, tmp_path, 600, **kw)
    return backend, plan_cells(matrix.cells(), backend)


def _load(job_yaml: str) -> Command:
    return load_job(io.StringIO(job_yaml))


# --- every job of the default matrix ---------------------------------------------------------------------------
@pytest.mark.slow
def test_every_runnable_job_of_the_default_matrix_builds_and_loads(no_workspace, tmp_path):
    matrix = load_matrix(ROOT / "matrix.yaml")
    backend = make_backend("azureml", matrix.spec.backend, tmp_path)
    started = time.perf_counter()
    planned = plan_cells(matrix.cells(), backend)
    runnable = [p for p in planned if p.runnable]
    assert len(planned) > 2000 and len(runnable) > 100
    kinds = set()
    for p in runnable:
        c, sku = p.cell, p.sku
        text = backend.job_yaml(p, "RUN1")
        job = _load(text)  # the SDK's own schema: raises on anything it would not submit
        assert isinstance(job, Command)
        assert job.compute == f"bench-{c['gpu'].lower()}"
        assert job.code == str(MODELS_DIR) and Path(job.code).name == "models"
        assert job.resources.instance_count == p.nodes
        if c["mpi"] == "gloo":  # horovodrun in a one-process, one-node job
            assert job.distribution is None and p.nodes == 1
            assert f"horovodrun --gloo -np {c['gpus']} -H localhost:{c['gpus']}" in job.command
            kinds.add("gloo")
        else:
            per_node = job.distribution.process_count_per_instance
            assert job.distribution.type == "mpi"
            assert per_node * p.nodes == c["gpus"] and per_node <= sku.gpus_per_vm
            if p.nodes > 1:
                assert per_node == sku.gpus_per_vm
            kinds.add(f"mpi{p.nodes}")
        env = job.environment_variables
        assert env["NCCL_IB_DISABLE"] == ("0" if c["ib"] else "1")
        if c["mpi"] == "openmpi":
            assert env["OMPI_MCA_pml"] == ("ucx" if c["ib"] else "ob1")
        assert env["OMP_NUM_THREADS"] == str(c["threads"] or 4)
        assert env.items() >= debug_env(c["mpi"], gpu=True).items()  # the log will name the effective transport
        assert job.environment.image.endswith(recipes.image_for_cell(c))
        bindings = BINDING.findall(job.command)
        assert ("outputs", RECORDS) in bindings
        for kind, name in bindings:
            assert name in (job.outputs if kind == "outputs" else job.inputs)
        assert job.tags["cell_id"] == p.cell_id and job.tags["run_id"] == "RUN1"
        assert job.display_name.startswith(p.label())
        assert f"--cell-id {p.cell_id}" in job.command
        assert not SECRETS.search(text) and redact_text(text) == text
    elapsed = time.perf_counter() - started
    print(f"\n{len(runnable)} of {len(planned)} cells runnable on azureml; built, dumped and loaded in {elapsed:.1f} s")
    assert kinds >= {"gloo", "mpi1", "mpi2"}
    assert elapsed < 60


def test_reach_reasons(tmp_path):
    _, planned = _backend("""
name: t
axes: {gpu: [cpu, K80, V100, H100], mpi: [openmpi, gloo], gpus: [2, 16]}
""", tmp_path, today=datetime.date(2026, 1, 1))
    reason = {(p.cell["gpu"], p.cell["mpi"], p.cell["gpus"]): p.reason for p in planned}
    assert "local CPU fallback" in reason[("cpu", "openmpi", 2)]
    assert "retired on 2023-09-06" in reason[("K80", "openmpi", 16)]
    assert "retired on 2025-09-30" in reason[("V100", "openmpi", 16)]
    assert "SSH" in reason[("H100", "gloo", 16)]
    assert reason[("H100", "gloo", 2)] is None and reason[("H100", "openmpi", 16)] is None
    # Before its retirement a SKU is planned.
    _, planned = _backend("name: t\naxes: {gpu: [V100], gpus: [8]}\n", tmp_path, today=datetime.date(2025, 1, 1))
    assert all(p.runnable for p in planned)


def test_imagenet_cells_need_a_data_uri_and_mount_it(tmp_path):
    text = "name: t\naxes: {gpu: [H100], gpus: [8]}\nworkload: {data: imagenet}\n"
    _, planned = _backend(text, tmp_path)
    assert "imagenet_uri" in planned[0].reason
    uri = "azureml://datastores/imagenet/paths/train"
    backend, planned = _backend(text + f"backend: {{azureml: {{imagenet_uri: '{uri}'}}}}\n", tmp_path)
    job = _load(backend.job_yaml(planned[0], "R"))
    assert job.inputs["imagenet"].path == uri and job.inputs["imagenet"].mode == "ro_mount"
    assert "--data-dir '${{inputs.imagenet}}'" in job.command


def test_native_engine_cells(tmp_path):
    backend, planned = _backend("""
name: t
axes: {gpu: [H100], framework: [pytorch], mpi: [gloo, openmpi], gpus: [8, 16]}
workload: {engine: native}
""", tmp_path)
    for p in planned:
        assert p.runnable, p.reason
        job = _load(backend.job_yaml(p, "R"))
        assert job.resources.instance_count == p.nodes
        assert job.distribution.process_count_per_instance == 8
        if p.cell["mpi"] == "gloo":  # "started by torchrun": Azure ML's PyTorch distribution sets RANK etc.
            assert job.distribution.type == "pytorch" and "MASTER_PORT" not in job.environment_variables
        else:  # "started by mpirun": DDP's rendezvous comes from the env and the first node's name
            assert job.distribution.type == "mpi" and job.environment_variables["MASTER_PORT"]
            assert "AZ_BATCHAI_MPI_MASTER_NODE" in job.command
        assert "--engine native" in job.command


def _cell(**kw):
    base = load_matrix_text("name: t\naxes: {gpu: [H100]}\n").cells()[0]
    return {**base, **kw}


@pytest.mark.parametrize("gpu,mpi,ib,expected", [
    ("H100", "intelmpi", True, {"I_MPI_FABRICS": "shm:ofi", "FI_PROVIDER": "mlx", "NCCL_IB_DISABLE": "0"}),
    ("H100", "intelmpi", False, {"I_MPI_FABRICS": "shm:ofi", "FI_PROVIDER": "tcp", "NCCL_IB_DISABLE": "1"}),
    ("K80", "intelmpi", True, {"I_MPI_FABRICS": "shm:dapl"}),
    ("A100", "openmpi", True, {"OMPI_MCA_pml": "ucx", "UCX_IB_PCI_RELAXED_ORDERING": "on"}),
    ("T4", "openmpi", False, {"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,vader,tcp"}),
    ("H100", "mpich", False, {"MPIR_CVAR_CH4_NETMOD": "ucx", "UCX_TLS": "tcp,sm,self"}),
    ("H100", "mpich", True, {"UCX_TLS": "rc,sm,self", "NCCL_IB_DISABLE": "0"}),
])
def test_fabric_settings_travel_as_env(gpu, mpi, ib, expected, tmp_path):
    env = fabric_env(mpi, ib, catalog()[gpu])
    assert {k: env.get(k) for k in expected} == expected
    # And they reach the job: build an MPI flavour the planner may not offer yet, by hand.
    c = _cell(gpu=gpu, mpi=mpi, ib=ib, gpus=2 * catalog()[gpu].gpus_per_vm)
    backend = AzureMLBackend(AzureMLConfig(env={"NCCL_TOPO_FILE": "/opt/topo.xml"}), tmp_path, 60)
    job = _load(backend.job_yaml(PlannedCell(c, cell_id(c), "planned", nodes=2), "R"))
    assert {k: job.environment_variables.get(k) for k in expected} == expected
    assert job.environment_variables["NCCL_TOPO_FILE"] == "/opt/topo.xml"


def test_environment_cluster_and_registry_choices(tmp_path):
    base = "name: t\naxes: {gpu: [A100], gpus: [8]}\nbackend:\n  azureml:\n"
    backend, planned = _backend(base + "    image_registry: myacr.azurecr.io/\n    clusters: {A100: nd-a100}\n",
                                tmp_path)
    job = _load(backend.job_yaml(planned[0], "R"))
    assert job.environment.image == f"myacr.azurecr.io/{recipes.image_for_cell(planned[0].cell)}"
    assert job.compute == "nd-a100"
    backend, planned = _backend(base + "    environment: bench-pt:3\n", tmp_path)
    assert _load(backend.job_yaml(planned[0], "R")).environment == "bench-pt:3"  # by reference, not as an image
    backend, planned = _backend(base + "    environment: other.io/team/img:1\n", tmp_path)
    assert _load(backend.job_yaml(planned[0], "R")).environment.image == "other.io/team/img:1"


# --- the command really runs the workload from a code snapshot ------------------------------------------------
@pytest.mark.workload
def test_job_command_runs_the_workload_from_a_snapshot_of_models(tmp_path):
    """Azure ML puts the code folder's contents in the working directory under no name of its own; the command
    must still import the `models` package. Run it as Azure ML would, with the output binding substituted."""
    backend, planned = _backend("""
name: t
axes: {gpu: [H100], framework: [pytorch], gpus: [1]}
workload: {batch_per_gpu: 2, image_size: 32, warmup_steps: 1, steps: 2, repeats: 2, threads: 1,
           channels_last: false}
""", tmp_path)
    snapshot, out, bin_dir = tmp_path / "wd", tmp_path / "out", tmp_path / "bin"
    shutil.copytree(MODELS_DIR, snapshot, ignore=shutil.ignore_patterns("__pycache__"))
    out.mkdir()
    # A node's image has the frameworks but not bench: `python` here skips site (so the editable install's
    # finder, which maps `models` to this checkout, is not loaded) and sees the venv's packages as plain paths.
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    (bin_dir / "python").chmod(0o755)
    site_packages = [p for p in sys.path if p.endswith("site-packages")]
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(site_packages),
           "OMP_NUM_THREADS": backend.job_env(planned[0])["OMP_NUM_THREADS"]}  # not the fabric's (no eth0 here)
    naive = subprocess.run(["python", "workloads/resnet50/pytorch_worker.py", "--help"], check=False, cwd=snapshot,
                           env=env, capture_output=True, text=True, timeout=60)
    assert naive.returncode != 0 and "No module named 'models'" in naive.stderr  # why the command links it
    command = backend.command_line(planned[0], "R").replace(f"${{{{outputs.{RECORDS}}}}}", str(out))
    done = subprocess.run(["sh", "-c", command], check=False, cwd=snapshot, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (out / "records.jsonl").read_text().splitlines()
    assert len(lines) == 2 and planned[0].cell_id in lines[0]


# --- secrets and workspaces -------------------------------------------------------------------------------------
@pytest.mark.parametrize("config,where", [
    ({"imagenet_uri": f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={FAKE_KEY}"}, "imagenet_uri"),
    ({"imagenet_uri": "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=short;"}, "imagenet_uri"),
    ({"env": {"DATA": FAKE_KEY}}, "env.DATA"),
    ({"clusters": {"H100": FAKE_KEY}}, "clusters.H100"),
    ({"imagenet_uri": "https://a.blob.core.windows.net/c?sv=2022&sig=abc"}, "imagenet_uri"),
    ({"env": {"STORAGE_KEY": "x"}}, "env.STORAGE_KEY"),
])
def test_keys_and_inline_secrets_are_rejected_without_echoing_them(config, where):
    with pytest.raises(BenchInputError) as e:
        check_no_secrets(AzureMLConfig(**config))
    assert f"backend.azureml.{where}" in str(e.value) and FAKE_KEY not in str(e.value) and "\n" not in str(e.value)


def test_a_configured_account_key_exits_2_with_one_line(write_matrix, tmp_path):
    path = write_matrix(f"""
name: t
axes: {{gpu: [H100]}}
backend:
  azureml:
    environment: bench-pt:1
    imagenet_uri: "DefaultEndpointsProtocol=https;AccountName=a;AccountKey={FAKE_KEY};"
""")
    done = bench_cli("plan", str(path), "--backend", "azureml", cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "account key" in lines[0] and FAKE_KEY not in done.stderr + done.stdout


def test_workspace_sources(tmp_path):
    assert resolve_workspace(AzureMLConfig(), environ={}) is None
    ws = resolve_workspace(AzureMLConfig(), environ=dict(zip(WORKSPACE_VARS, ("s", "g", "w"))))
    assert (ws.subscription_id, ws.resource_group, ws.name) == ("s", "g", "w")
    cfg = tmp_path / "config.json"
    cfg.write_text('{"subscription_id": "s2", "resource_group": "g2", "workspace_name": "w2"}')
    assert resolve_workspace(AzureMLConfig(config_file=str(cfg)), environ={}).name == "w2"
    with pytest.raises(BenchInputError, match="missing resource_group, workspace"):
        resolve_workspace(AzureMLConfig(subscription_id="s"), environ={})


SMALL = """
name: t
axes: {gpu: [H100], framework: [pytorch], mpi: [openmpi], ib: [false], gpus: [1, 2]}
backend:
  name: azureml
  azureml:
    image_registry: myacr.azurecr.io
"""


@pytest.mark.slow
def test_plan_shows_job_yaml_without_a_workspace(no_workspace, capsys, tmp_path, monkeypatch):
    from bench.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["plan", str(ROOT / "matrix.yaml"), "--backend", "azureml", "--show-commands"]) == 0
    out = capsys.readouterr().out
    blocks = out.split("  job_yaml:\n")[1:]
    assert len(blocks) > 100
    first = "\n".join(line[4:] for line in blocks[0].splitlines() if line.startswith("    "))
    assert isinstance(_load(first), Command)
    assert not (tmp_path / "results").exists()  # planning writes nothing


@pytest.mark.slow
def test_run_without_a_workspace_exits_2_before_anything_is_written(write_matrix, tmp_path):
    path = write_matrix(SMALL.replace("image_registry: myacr.azurecr.io", "environment: bench-pt:1"))
    env = {var: "" for var in WORKSPACE_VARS}
    done = bench_cli("run", str(path), "--backend", "azureml", "--store", str(tmp_path / "store" / "b.db"),
                     cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("bench: error:") and "no workspace configured" in lines[-1]
    assert [line for line in lines if "error" in line] == [lines[-1]]
    assert not (tmp_path / "store").exists()


@pytest.mark.slow
def test_a_submit_that_cannot_authenticate_fails_its_cell_and_the_next_is_tried(write_matrix, tmp_path):
    """The real client and DefaultAzureCredential against a made-up workspace, with nothing to authenticate with:
    the credential chain gives up before any request, each cell fails with one line, and the run goes on."""
    path = write_matrix(SMALL.replace("image_registry: myacr.azurecr.io", "environment: bench-pt:1"))
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "IDENTITY_", "MSI_"))}
    env.update(HOME=str(home), AZURE_CONFIG_DIR=str(home / ".azure"), AZUREML_SUBSCRIPTION_ID=
               "00000000-0000-0000-0000-000000000000", AZUREML_RESOURCE_GROUP="rg", AZUREML_WORKSPACE="ws")
    store = tmp_path / "results" / "bench.db"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bench", "run", str(path), "--store", str(store)],
                          check=False, cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    print(f"\nrun with 2 unauthenticated submits: {elapsed:.1f} s")
    assert done.returncode == 1, done.stderr
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT cell_id, status, error FROM records").fetchall()
    assert len(rows) == 2 and {r[1] for r in rows} == {"failed"}  # the second cell was tried after the first
    for _, _, error in rows:
        assert error.startswith("submit to Azure ML failed: ClientAuthenticationError") and "\n" not in error
    # Neither the credential chain's many lines nor the SDK's experimental-class warnings reach the user.
    assert "Attempted credentials" not in done.stderr and "experimental" not in done.stderr
    assert elapsed < 60


# --- poll / collect / cancel against a stand-in for the (unreachable) service -----------------------------------
class _Jobs:
    """Stands in for MLClient.jobs: statuses in order, and a download that lays files out as the SDK does
    (<download_path>/named-outputs/<output>/, <download_path>/artifacts/user_logs/)."""

    def __init__(self, statuses, records=(), log="", submit_error=None):
        self.statuses, self.records, self.log, self.submit_error = list(statuses), records, log, submit_error
        self.canceled = []

    def create_or_update(self, node):
        if self.submit_error:
            raise self.submit_error
        return type("Job", (), {"name": "job-1", "studio_url": None})()

    def get(self, name):
        return type("Job", (), {"status": self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]})()

    def download(self, name, *, download_path, output_name=None, all=False):
        if output_name == RECORDS:
            out = Path(download_path) / "named-outputs" / RECORDS
            out.mkdir(parents=True, exist_ok=True)
            (out / "records.jsonl").write_text("".join(line + "\n" for line in self.records))
        else:
            logs = Path(download_path) / "artifacts" / "user_logs"
            logs.mkdir(parents=True, exist_ok=True)
            (logs / "std_log_process_0.txt").write_text(self.log)

    def begin_cancel(self, name):
        self.canceled.append(name)


def _lifecycle(tmp_path, jobs, timeout_s=600):
    backend, planned = _backend("name: t\naxes: {gpu: [H100], gpus: [8]}\n"
                                "workload: {repeats: 2}\nbackend: {azureml: {environment: e:1}}\n", tmp_path,
                                poll_every_s=0)
    backend.timeout_s = timeout_s
    backend._client_obj = type("Client", (), {"jobs": jobs})()
    handle = backend.submit(planned[0], "R")
    while not backend.poll(handle):
        pass
    return backend, handle, backend.collect(handle)


def test_completed_job_records_are_downloaded_into_the_job_dir(tmp_path):
    jobs = _Jobs(["Queued", "Running", "Completed"], records=['{"repeat": 0}', '{"repeat": 1}'])
    _, handle, outcome = _lifecycle(tmp_path, jobs)
    assert outcome.status == "ok" and [r["repeat"] for r in outcome.records] == [0, 1]
    assert handle.job_dir == tmp_path.resolve() / "runs" / "R" / handle.planned.cell_id / "job0"
    assert (handle.job_dir / "named-outputs" / RECORDS / "records.jsonl").exists()


def test_failed_job_reason_comes_from_its_log(tmp_path):
    jobs = _Jobs(["Running", "Failed"], log="starting\nRuntimeError: NCCL error: unhandled system error\n")
    _, _, outcome = _lifecycle(tmp_path, jobs)
    assert outcome.status == "failed" and "ended Failed: RuntimeError: NCCL error" in outcome.reason


def test_short_records_fail_the_cell(tmp_path):
    _, _, outcome = _lifecycle(tmp_path, _Jobs(["Completed"], records=['{"repeat": 0}']))
    assert outcome.status == "failed" and outcome.reason == "expected 2 records, got 1"


def test_timeout_cancels_the_job(tmp_path):
    jobs = _Jobs(["Running"])
    _, _, outcome = _lifecycle(tmp_path, jobs, timeout_s=0.01)
    assert outcome.status == "timeout" and jobs.canceled == ["job-1"]


def test_quota_error_at_submit_fails_the_cell_with_one_line(tmp_path):
    from azure.core.exceptions import HttpResponseError

    error = HttpResponseError(message="(QuotaExceeded) Not enough quota for Standard_ND96isr_H100_v5.\nMore text")
    _, handle, outcome = _lifecycle(tmp_path, _Jobs(["Completed"], submit_error=error))
    assert outcome.status == "failed" and handle.name is None
    assert outcome.reason.startswith("submit to Azure ML failed: HttpResponseError: (QuotaExceeded)")
    assert "\n" not in outcome.reason


def test_poll_asks_the_service_at_most_every_interval(tmp_path):
    backend, planned = _backend("name: t\naxes: {gpu: [H100], gpus: [8]}\n"
                                "backend: {azureml: {environment: e:1}}\n", tmp_path)
    jobs = _Jobs(["Running"])
    calls = []
    jobs.get = lambda name: calls.append(name) or type("Job", (), {"status": "Running"})()
    backend._client_obj = type("Client", (), {"jobs": jobs})()
    handle = Handle(planned[0], backend.render(planned[0], "R"), tmp_path, time.monotonic() + 600, name="job-1")
    for _ in range(50):
        assert backend.poll(handle) is False
    assert len(calls) == 1
