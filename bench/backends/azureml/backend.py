"""Azure ML backend: each job of a cell is one Azure ML command job, built with the real SDK (azure-ai-ml), submitted
with DefaultAzureCredential, polled, and its `records` output downloaded into results/runs/<run>/<cell>/job<k>/.

Decisions (docs/backends.md, "Azure ML", says the same for users):
- Azure ML writes the mpirun line itself (MpiDistribution); the MPI flavour is the image's, and what the local
  launchers say with flags (binding, transports, fabric) reaches the workers only as environment variables.
- Gloo cells (Horovod's own launcher): Azure ML has no horovodrun, and horovodrun starts remote workers over SSH,
  which Azure ML jobs do not offer. A single-node Gloo cell runs horovodrun inside a one-process job (same launch
  line as the local backend); a multi-node one is skipped with that reason.
- Native-engine (DDP) cells: mpi=gloo means "started by torchrun" → PyTorchDistribution (Azure ML sets RANK,
  WORLD_SIZE, MASTER_ADDR/PORT); mpi=openmpi means "started by mpirun" → MpiDistribution plus MASTER_ADDR/PORT.
- cpu cells are the local CPU fallback (one process per thread on this machine); they are not sent to a cloud CPU
  cluster, whose numbers would not be the fallback's. Retired VM sizes are skipped: Azure cannot allocate them.
- Nothing secret is configured or written: DefaultAzureCredential finds credentials at submit time, data is reached
  by identity or through a workspace datastore, and a configured value that looks like a key is rejected.
"""
from __future__ import annotations

import datetime
import json
import logging
import re
import shlex
import time
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

from bench.backend_settings.azureml import AzureMLConfig
from bench.backends.azureml.workspace import WORKSPACE_ENV, Workspace, check_no_secrets, resolve_workspace
from bench.backends.base import Backend
from bench.backends.shared.cell_launch import MODELS_DIR, cell_dir, threads_for, worker_program
from bench.backends.shared.outcome import JobEnd, Outcome, classify
from bench.backends.shared.records import read_end, read_records, tail_of
from bench.core.errors import BenchInputError
from bench.facts.catalog import GpuSku, catalog
from bench.images import recipes
from bench.launch import LaunchSpec, Rendered, flavour_named
from bench.launch.evidence import debug_env
from bench.launch.fabric import nccl_env
from bench.planning.cell import PlannedCell
from models.registry.engines import TORCH_DISTRIBUTED_ENGINES

__all__ = ["AzureMLBackend", "Handle", "RECORDS", "Workspace", "check_no_secrets", "fabric_env", "resolve_workspace"]

RECORDS = "records"  # the job's named output; rank 0 writes records.jsonl into it
IMAGENET = "imagenet"  # the job's named input for data=imagenet cells
POLL_EVERY_S = 30.0  # the runner polls 5 times a second; the service is asked at most this often
POLL_ERRORS_MAX = 5  # consecutive failed status queries before the cell is given up
MASTER_PORT = "29500"  # DDP rendezvous port for mpirun-started native cells
GPU_THREADS = 4  # host-side threads per worker (every cell here is a GPU cell), as on the local backend
# Statuses that end a job (azure.ai.ml's RunHistoryConstants.TERMINAL_STATUSES).
TERMINAL = frozenset({"Completed", "Failed", "Canceled", "NotResponding", "Paused"})

# The code snapshot (the models/ folder) lands in the job's working directory under no name of its own, but the
# workers import it as the package `models`: each process links it as <tmp>/models and runs the script from there.
ROOT_VAR = "BENCH_ROOT"
SNAPSHOT_SETUP = f'{ROOT_VAR}=$(mktemp -d) && ln -s "$PWD" "${ROOT_VAR}/models"'
# mpirun-started DDP: Azure ML names the first node in AZ_BATCHAI_MPI_MASTER_NODE.
MASTER_ADDR_SETUP = 'export MASTER_ADDR="${AZ_BATCHAI_MPI_MASTER_NODE:-127.0.0.1}"'

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Handle:
    planned: PlannedCell
    rendered: Rendered
    job_dir: Path
    deadline: float
    name: str | None = None  # the Azure ML job name, once submitted
    error: str | None = None  # why the cell failed without a job result (submit or tracking failed)
    status: str | None = None  # the last Azure ML status seen
    stopped: str | None = None  # timeout | interrupted
    next_poll: float = 0.0
    poll_errors: int = 0


def _sdk():
    try:
        from azure.ai import ml
        from azure.ai.ml import entities
    except ImportError:
        raise BenchInputError("the azureml backend needs azure-ai-ml and azure-identity "
                              "(pip install azure-ai-ml azure-identity)") from None
    return ml, entities


# --- what each cell's job is -------------------------------------------------------------------------------------
def fabric_env(mpi: str, ib: bool, sku: GpuSku) -> dict[str, str]:
    """The fabric and launcher settings the local launchers pass as flags, as environment variables: Azure ML
    writes the mpirun line, so this is the only way they reach the workers. Asked of the flavour (`launcher_env`),
    so the ib axis means the same thing on every backend."""
    spec = LaunchSpec(workers=1, hosts=(), program=(), ib=ib, sriov=sku.sriov, iface="eth0")  # Azure VMs: eth0
    env = nccl_env(spec)
    if ib:
        # Azure's SR-IOV InfiniBand sizes (ND A100/H100/H200) need relaxed PCI ordering for full bandwidth.
        env["NCCL_IB_PCI_RELAXED_ORDERING"] = "1"
    env.update(flavour_named(mpi).launcher_env(spec))
    if ib and "UCX_TLS" in env:  # the flavour runs on UCX: the same NICs, the same ordering
        env["UCX_IB_PCI_RELAXED_ORDERING"] = "on"
    return env


def cluster_for(config: AzureMLConfig, gpu: str) -> str:
    return config.clusters.get(gpu) or f"bench-{gpu.lower()}"


def _shell_join(argv: tuple[str, ...]) -> str:
    """shlex.join, except that words under $BENCH_ROOT stay expandable (double-quoted)."""
    return " ".join(f'"{a}"' if a.startswith(f"${ROOT_VAR}/") else shlex.quote(a) for a in argv)


def _one_line(e: BaseException) -> str:
    """An SDK error as one line: its most specific line (the SDK's formatted errors put it after "(x)")."""
    lines = [line.strip() for line in _ANSI.sub("", str(e)).splitlines() if line.strip()]
    detail = next((line for line in lines if line.startswith("(x)")), lines[0] if lines else "")
    return f"{type(e).__name__}: {detail.removeprefix('(x)').strip()}"[:300]


class AzureMLBackend(Backend):
    name = "azureml"

    def __init__(self, config: AzureMLConfig, results_dir: Path, timeout_s: float,
                 today: datetime.date | None = None, poll_every_s: float = POLL_EVERY_S):
        check_no_secrets(config)
        self.config = config
        self.results_dir = Path(results_dir).resolve()
        self.timeout_s = timeout_s
        self.today = today or datetime.date.today()
        self.poll_every_s = poll_every_s
        self._client_obj = None  # MLClient, made at the first submit: planning needs no network or credential

    @classmethod
    def from_settings(cls, settings, results_dir: Path, timeout_s: float | None = None) -> AzureMLBackend:
        return cls(settings.azureml, results_dir, timeout_s or settings.timeout_s)

    # --- planning -----------------------------------------------------------------------------------------------
    def reach_reason(self, cell: dict[str, Any], nodes: int) -> str | None:
        sku = catalog()[cell["gpu"]]
        if sku.is_cpu:
            return "cpu cells are the local CPU fallback; Azure ML clusters here are GPU VM sizes (use --backend local)"
        if sku.retired and datetime.date.fromisoformat(sku.retired) <= self.today:
            return f"{sku.vm_size} ({sku.key}) was retired on {sku.retired}; Azure can no longer allocate it"
        flavour = flavour_named(cell["mpi"])
        if flavour.azureml_launch == "own" and cell["engine"] == "horovod" and nodes > 1:
            return (f"mpi={flavour.name} on {nodes} nodes: {flavour.tool} starts remote workers over SSH, which Azure "
                    f"ML jobs do not offer (single-node {flavour.title} cells run)")
        if cell["data"] == "imagenet" and not self.config.imagenet_uri:
            return "data=imagenet: no data set for Azure ML (set backend.azureml.imagenet_uri)"
        return self._image_problem(cell)

    def _image_problem(self, cell: dict[str, Any]) -> str | None:
        if self.config.environment:
            return None
        try:
            recipes.image_for_cell(cell)
        except (ValueError, LookupError) as e:  # NotImplementedError is a bug, not a reason: it propagates
            return f"no container image for this cell: {e}"
        return None

    def cell_dir(self, planned: PlannedCell, run_id: str, job: int = 0) -> Path:
        return cell_dir(self.results_dir, planned, run_id, job)

    def threads_for(self, planned: PlannedCell) -> int:
        return threads_for(planned, None, GPU_THREADS)

    def job_env(self, planned: PlannedCell) -> dict[str, str]:
        c = planned.cell
        # debug_env: each layer's log then names the transport it really used (the ib axis: requested vs effective).
        env = {"OMP_NUM_THREADS": str(self.threads_for(planned)), "PYTHONUNBUFFERED": "1",
               **debug_env(c["mpi"], gpu=not planned.sku.is_cpu, engine=c["engine"]),
               **fabric_env(c["mpi"], c["ib"], planned.sku)}
        if c["engine"] in TORCH_DISTRIBUTED_ENGINES and flavour_named(c["mpi"]).native == "launcher":
            env["MASTER_PORT"] = MASTER_PORT
        return {**env, **self.config.env}

    def _program(self, planned: PlannedCell, run_id: str) -> tuple[str, ...]:
        """The workload's argv as on the local backend, with the script under the linked snapshot and records
        written into the job's output."""
        c = planned.cell
        data_dir = f"${{{{inputs.{IMAGENET}}}}}" if c["data"] == "imagenet" else None
        return worker_program(planned, run_id, f"${{{{outputs.{RECORDS}}}}}/records.jsonl",
                              self.threads_for(planned), python="python", data_dir=data_dir,
                              models_dir=f"${ROOT_VAR}/{MODELS_DIR.name}")

    def command_line(self, planned: PlannedCell, run_id: str) -> str:
        """What each process (or, for Gloo, the one horovodrun) runs, as Azure ML's command."""
        c = planned.cell
        program = self._program(planned, run_id)
        setup = [SNAPSHOT_SETUP]
        flavour = flavour_named(c["mpi"])
        if c["engine"] == "horovod" and flavour.azureml_launch == "own":
            spec = LaunchSpec(workers=c["gpus"], hosts=(("localhost", c["gpus"]),), program=program)
            program = flavour.render(spec).argv
        elif c["engine"] in TORCH_DISTRIBUTED_ENGINES and flavour.native == "launcher":
            setup.append(MASTER_ADDR_SETUP)
        return " && ".join([*setup, _shell_join(program)])

    def render(self, planned: PlannedCell, run_id: str, job: int = 0) -> Rendered:
        return Rendered(("sh", "-c", self.command_line(planned, run_id)), self.job_env(planned))

    def _distribution(self, planned: PlannedCell):
        ml, _ = _sdk()
        c = planned.cell
        per_node = c["gpus"] // planned.nodes
        flavour = flavour_named(c["mpi"])
        if c["engine"] in TORCH_DISTRIBUTED_ENGINES and flavour.native == "torchrun":
            return ml.PyTorchDistribution(process_count_per_instance=per_node)  # torchrun's part is Azure ML's own
        if c["engine"] == "horovod" and flavour.azureml_launch == "own":
            return None  # the flavour's launcher starts the workers itself in a one-process job
        return ml.MpiDistribution(process_count_per_instance=per_node)

    def _environment(self, cell: dict[str, Any]):
        _, entities = _sdk()
        chosen = self.config.environment
        if chosen:
            # A registered environment ("name:version", "azureml:...", an ARM id) is passed by reference.
            is_image = "/" in chosen and not chosen.startswith(("azureml:", "/"))
            return entities.Environment(image=chosen) if is_image else chosen
        image = recipes.image_for_cell(cell)
        if self.config.image_registry:
            image = f"{self.config.image_registry.rstrip('/')}/{image}"
        return entities.Environment(image=image)

    def build(self, planned: PlannedCell, run_id: str, job: int = 0):
        """The azure-ai-ml Command node of one job of the cell (what create_or_update takes)."""
        ml, _ = _sdk()
        c = planned.cell
        inputs = {}
        if c["data"] == "imagenet":
            inputs[IMAGENET] = ml.Input(type="uri_folder", path=self.config.imagenet_uri, mode="ro_mount")
        return ml.command(
            code=str(MODELS_DIR),  # only the workloads: they import nothing from bench/
            command=self.command_line(planned, run_id),
            environment=self._environment(c),
            compute=cluster_for(self.config, c["gpu"]),
            instance_count=planned.nodes,  # a Gloo cell's horovodrun job is single-node (reach_reason)
            distribution=self._distribution(planned),
            environment_variables=self.job_env(planned),
            inputs=inputs,
            outputs={RECORDS: ml.Output(type="uri_folder", mode="rw_mount")},
            experiment_name=self.config.experiment,
            display_name=f"{planned.label()} job{job}",
            tags={"cell_id": planned.cell_id, "run_id": run_id, "job": str(job), "bench": "1"},
        )

    def job_yaml(self, planned: PlannedCell, run_id: str, job: int = 0) -> str:
        # A node dumps as a pipeline node, which load_job rejects; the standalone job is what gets submitted.
        out = StringIO()
        self.build(planned, run_id, job)._to_job().dump(out)
        return out.getvalue()

    def describe(self, planned: PlannedCell, run_id: str) -> dict[str, Any]:
        return {"job_yaml": self.job_yaml(planned, run_id)}

    # --- running ------------------------------------------------------------------------------------------------
    def workspace(self) -> Workspace:
        ws = resolve_workspace(self.config)
        if ws is None:
            raise BenchInputError("backend azureml: no workspace configured (set backend.azureml.subscription_id, "
                                  "resource_group and workspace, or config_file, or " + ", ".join(WORKSPACE_ENV) + ")")
        return ws

    def check(self, planned: list[PlannedCell]) -> None:
        """Before anything is written, what `run` needs and `plan` does not: a workspace and an image source.
        No network yet: the client and its credential are made at the first submit."""
        _sdk()
        self.workspace()
        if not (self.config.environment or self.config.image_registry):
            raise BenchInputError("backend.azureml: set image_registry (where bench's images are pushed) or "
                                  "environment; an image without a registry cannot be pulled by the cluster")

    def prepare(self, planned: list[PlannedCell], say=print) -> None:
        self.check(planned)
        ws = self.workspace()
        say(f"Azure ML workspace {ws.name} (resource group {ws.resource_group}, from {ws.source}); "
            f"experiment {self.config.experiment}")

    def _client(self):
        if self._client_obj is None:
            ml, _ = _sdk()
            from azure.identity import DefaultAzureCredential

            # The credential chain logs every credential it tried, many lines each, and the SDK warns about its own
            # experimental schema classes on submit; the cell's one-line reason is what the user needs.
            for noisy in ("azure.identity", "azure.ai.ml._utils._experimental"):
                logging.getLogger(noisy).setLevel(logging.ERROR)
            ws = self.workspace()
            self._client_obj = ml.MLClient(DefaultAzureCredential(), ws.subscription_id, ws.resource_group, ws.name)
        return self._client_obj

    def submit(self, planned: PlannedCell, run_id: str, job: int = 0) -> Handle:
        """Never raises for the service's sake: a workspace that cannot be reached, an auth failure or a quota
        error fails this cell with one line, and the run goes on to the next."""
        from azure.core.exceptions import AzureError

        job_dir = self.cell_dir(planned, run_id, job)
        job_dir.mkdir(parents=True, exist_ok=True)
        handle = Handle(planned, self.render(planned, run_id, job), job_dir, time.monotonic() + self.timeout_s)
        try:
            created = self._client().jobs.create_or_update(self.build(planned, run_id, job))
        except (AzureError, OSError) as e:
            handle.error = f"submit to Azure ML failed: {_one_line(e)}"
            return handle
        handle.name = created.name
        (job_dir / "azureml_job.json").write_text(json.dumps({"name": created.name,
                                                              "studio_url": getattr(created, "studio_url", None)}))
        return handle

    def poll(self, handle: Handle) -> bool:
        if handle.error or handle.stopped:
            return True
        now = time.monotonic()
        if now > handle.deadline:
            handle.stopped = "timeout"
            self._cancel_job(handle)
            return True
        if now < handle.next_poll:
            return False
        handle.next_poll = now + self.poll_every_s
        from azure.core.exceptions import AzureError

        try:
            handle.status = self._client().jobs.get(handle.name).status
        except (AzureError, OSError) as e:
            handle.poll_errors += 1
            if handle.poll_errors >= POLL_ERRORS_MAX:
                handle.error = f"lost track of Azure ML job {handle.name}: {_one_line(e)}"
                self._cancel_job(handle)
                return True
            return False
        handle.poll_errors = 0
        return handle.status in TERMINAL

    def cancel(self, handle: Handle) -> None:
        handle.stopped = handle.stopped or "interrupted"
        self._cancel_job(handle)

    def _cancel_job(self, handle: Handle) -> None:
        if handle.name is None:
            return
        from azure.core.exceptions import AzureError

        try:
            self._client().jobs.begin_cancel(handle.name)
        except (AzureError, OSError):
            pass  # already ended, or unreachable: the job's own limits end it

    def collect(self, handle: Handle) -> Outcome:
        job = f"Azure ML job {handle.name}"
        end = JobEnd(error=handle.error, stopped=handle.stopped)
        if not (handle.error or handle.stopped):
            end = self._job_end(handle, job)
        return classify(end, handle.planned.cell["repeats"], self.timeout_s, f"{job} was canceled",
                        fallback="see its logs in Azure ML studio")

    def _job_end(self, handle: Handle, job: str) -> JobEnd:
        """A failed job's log tail, or a completed job's records (downloaded into the job directory)."""
        if handle.status != "Completed":
            tail = self._log_tail(handle)
            return JobEnd(log=tail or "", tail=tail, failure=f"{job} ended {handle.status}")
        from azure.core.exceptions import AzureError

        try:
            self._client().jobs.download(handle.name, output_name=RECORDS, download_path=handle.job_dir)
        except (AzureError, OSError) as e:
            return JobEnd(error=f"could not download the records of {job}: {_one_line(e)}")
        records, bad = read_records(handle.job_dir / "named-outputs" / RECORDS / "records.jsonl")
        return JobEnd(records, bad)

    def _log_tail(self, handle: Handle) -> str | None:
        """The end of rank 0's log (downloaded with the job's default artifacts), or None if it cannot be had."""
        from azure.core.exceptions import AzureError

        try:
            self._client().jobs.download(handle.name, download_path=handle.job_dir)
        except (AzureError, OSError):
            return None
        logs = sorted((handle.job_dir / "artifacts" / "user_logs").glob("std_log*.txt"))
        if not logs:
            return None
        return tail_of(read_end(logs[0]))
