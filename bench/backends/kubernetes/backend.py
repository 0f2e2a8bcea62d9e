"""Kubernetes backend: each job of a cell is one Kubeflow job (an MPIJob, or a PyTorchJob for torchrun's DDP cells;
bench/backends/kubernetes/manifests.py says which and why), checked offline against the operators' schemas
(schema.py), created with the `kubernetes` client, followed to its end (follow.py reads the
job's and its pods' status), its records read from the pods' logs, and deleted: when it ends, on Ctrl-C or SIGTERM,
and at --timeout, so no job is left behind.

Never run against a real cluster here (no API server can run on the machines this was written on): the manifests
are checked against the real schemas, and the following is tested on API objects shaped like the real ones;
docs/backends.md, "Kubernetes", says which parts have not met a cluster.
"""
from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.backend_settings.kubernetes import KubernetesConfig
from bench.backends.base import Backend
from bench.backends.kubernetes import schema as kubernetes_schema
from bench.backends.kubernetes.follow import job_state, launcher_pod, records_from_log
from bench.backends.kubernetes.manifests import ManifestMaker, job_name
from bench.backends.shared.cell_launch import cell_dir
from bench.backends.shared.outcome import JobEnd, Outcome, classify
from bench.backends.shared.records import tail_of
from bench.core.errors import BenchInputError
from bench.facts.catalog import catalog
from bench.images import mpijob, recipes
from bench.images.push import pushed_reference
from bench.launch import Rendered
from bench.planning.cell import PlannedCell

POLL_EVERY_S = 5.0  # the runner polls 5 times a second; the API server is asked at most this often
POLL_ERRORS_MAX = 5  # consecutive failed queries before the cell is given up (and its job deleted)


@dataclass
class Handle:
    planned: PlannedCell
    rendered: Rendered
    job_dir: Path
    manifest: dict[str, Any]
    submitted: float
    name: str | None = None  # set once the API server took the job
    error: str | None = None  # why the cell failed without a job result
    stopped: str | None = None  # timeout | interrupted
    phase: str = "pending"
    reason: str | None = None  # the follower's reason for the last phase
    running_since: float | None = None  # the time limit counts from here: queueing is not the cell's time
    next_poll: float = 0.0
    poll_errors: int = 0
    deleted: bool = False


class KubernetesBackend(Backend):
    name = "kubernetes"

    def __init__(self, config: KubernetesConfig, results_dir: Path, timeout_s: float,
                 poll_every_s: float = POLL_EVERY_S, api=None):
        self.config = config
        self.results_dir = Path(results_dir).resolve()
        self.timeout_s = timeout_s
        self.poll_every_s = poll_every_s
        self._api = api  # ClusterApi, made at the first submit: planning needs no cluster
        self.maker = ManifestMaker(config, self.image_for, mpijob.SSH_PORT, mpijob.SSH_AUTH_MOUNT_PATH,
                                   mpijob.sshd_command, mpijob.IMAGE_UID)

    @classmethod
    def from_settings(cls, settings, results_dir: Path, timeout_s: float | None = None) -> KubernetesBackend:
        return cls(settings.kubernetes, results_dir, timeout_s or settings.timeout_s)

    # --- planning -----------------------------------------------------------------------------------------------
    def reach_reason(self, cell: dict[str, Any], nodes: int) -> str | None:
        cfg = self.config
        sku = catalog()[cell["gpu"]]
        per_node = -(-cell["gpus"] // nodes)
        if not sku.is_cpu and per_node > cfg.gpus_per_node:
            return (f"{per_node} GPUs per node: the cluster's GPU nodes have {cfg.gpus_per_node} "
                    f"(backend.kubernetes.gpus_per_node)")
        if not sku.is_cpu and not (cfg.gpu_products.get(cell["gpu"]) or sku.gfd_products):
            return f"no node label value for {sku.key} GPUs (set backend.kubernetes.gpu_products.{sku.key})"
        if cell["ib"] and not cfg.rdma_resource:
            return "ib=on: the cluster's RDMA device resource is not set (backend.kubernetes.rdma_resource)"
        if cell["data"] == "imagenet":
            return "data=imagenet: no data set volume for Kubernetes yet (synthetic cells run)"
        if cfg.image:
            return None
        try:
            recipes.image_for_cell(cell)
        except (ValueError, LookupError) as e:
            return f"no container image for this cell: {e}"
        return None

    def image_for(self, cell: dict[str, Any], for_mpijob: bool) -> str:
        """The image reference a pod runs: the configured one, or the cell's bench image (its -mpijob layer for
        MPIJobs) by the digest `bench images push` recorded, else by name under the registry."""
        if self.config.image:
            return self.config.image
        local = mpijob.mpijob_image_for_cell(cell) if for_mpijob else recipes.image_for_cell(cell)
        registry = self.config.image_registry.rstrip("/") if self.config.image_registry else None
        pushed = pushed_reference(local, registry, self.results_dir / "images")
        if pushed and (registry is None or pushed.startswith(f"{registry}/")):  # never another registry's push
            return pushed
        return f"{registry}/{local}" if registry else local

    def manifest(self, planned: PlannedCell, run_id: str, job: int = 0) -> dict[str, Any]:
        """The job, checked against the schemas: a setting that makes it invalid is refused with one line."""
        manifest = self.maker.manifest(planned, run_id, job)
        kubernetes_schema.check(manifest, f"backend kubernetes, cell {planned.cell_id}")
        return manifest

    def render(self, planned: PlannedCell, run_id: str, job: int = 0) -> Rendered:
        return self.maker.launch(planned, run_id, job_name(planned, run_id, job))

    def describe(self, planned: PlannedCell, run_id: str) -> dict[str, Any]:
        return {"manifest": yaml.safe_dump(self.manifest(planned, run_id), sort_keys=False, width=120)}

    def check(self, planned: list[PlannedCell]) -> None:
        """Before anything is written: every job renders to a valid manifest, an image can be pulled, the client is
        installed and a cluster is configured (kubeconfig or a pod's service account). The cluster itself is first
        asked at the first submit."""
        if not (self.config.image or self.config.image_registry):
            raise BenchInputError("backend.kubernetes: set image_registry (where `bench images push` put bench's "
                                  "images) or image; an image without a registry cannot be pulled by the cluster")
        for p in planned:
            if p.runnable:
                self.manifest(p, "RUN_ID")
        self._client()

    def prepare(self, planned: list[PlannedCell], say=print) -> None:
        self.check(planned)
        context = self.config.context or "the current kubeconfig context (or the pod's service account)"
        say(f"Kubernetes namespace {self.config.namespace}, {context}")

    # --- running ------------------------------------------------------------------------------------------------
    def _client(self):
        if self._api is None:
            from bench.backends.kubernetes.api import ClusterApi

            self._api = ClusterApi(self.config.namespace, self.config.context)
        return self._api

    def submit(self, planned: PlannedCell, run_id: str, job: int = 0) -> Handle:
        """Never raises for the cluster's sake: an API server that does not answer or refuses the job fails this
        cell with one line, and the run goes on."""
        job_dir = cell_dir(self.results_dir, planned, run_id, job)
        job_dir.mkdir(parents=True, exist_ok=True)
        manifest = self.manifest(planned, run_id, job)
        (job_dir / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False, width=120))
        handle = Handle(planned, self.render(planned, run_id, job), job_dir, manifest, time.monotonic())
        try:
            handle.name = self._client().create(manifest)
        except BenchInputError:
            raise  # no client, or no kubeconfig: the whole run's problem, said once
        except Exception as e:  # noqa: BLE001 - the API layer turns its errors into one line; anything else too
            handle.error = f"submit to Kubernetes failed: {e}"
        return handle

    def poll(self, handle: Handle) -> bool:
        if handle.error or handle.stopped:
            return True
        now = time.monotonic()
        if handle.running_since is not None and now - handle.running_since > self.timeout_s:
            handle.stopped = "timeout"
            return True
        if now < handle.next_poll:
            return False
        handle.next_poll = now + self.poll_every_s
        api = self._client()
        try:
            job = api.get(handle.manifest["kind"], handle.name)
            pods = api.pods(handle.name)
        except Exception as e:  # noqa: BLE001 - one line from the API layer
            handle.poll_errors += 1
            if handle.poll_errors >= POLL_ERRORS_MAX:
                handle.error = f"lost track of {handle.manifest['kind']} {handle.name}: {e}"
                return True
            return False
        handle.poll_errors = 0
        state = job_state(job, pods, pending_for_s=now - handle.submitted,
                          pending_limit_s=self.config.pending_timeout_s)
        handle.phase, handle.reason = state.phase, state.reason
        if state.phase == "running" and handle.running_since is None:
            handle.running_since = now
        return state.phase in ("succeeded", "failed")

    def cancel(self, handle: Handle) -> None:
        handle.stopped = handle.stopped or "interrupted"

    def collect(self, handle: Handle) -> Outcome:
        what = f"{handle.manifest['kind']} {handle.name}"
        try:
            end = JobEnd(error=handle.error, stopped=handle.stopped)
            if handle.name and not handle.error:
                end = self._job_end(handle, end)
            log_path = handle.job_dir / "log.txt"
            outcome = classify(end, handle.planned.cell["repeats"], self.timeout_s, f"{what} was deleted",
                               fallback=f"see {log_path}")
            outcome.log_path = log_path if log_path.exists() else None
            return outcome
        finally:
            self._delete(handle)

    def _job_end(self, handle: Handle, end: JobEnd) -> JobEnd:
        """The pods' logs (kept in log.txt), the records rank 0 printed in them, and how the job ended."""
        api = self._client()
        try:
            pods = api.pods(handle.name)
            kind = handle.manifest["kind"]
            # Rank 0 prints the records: under mpirun its output comes out of the launcher; under torchrun's c10d
            # rendezvous any pod may hold rank 0.
            readers = [launcher_pod(kind, pods)] if kind == "MPIJob" else pods
            log = "\n".join(api.log(p["metadata"]["name"]) for p in readers if p)
        except Exception as e:  # noqa: BLE001
            return JobEnd(error=f"could not read the logs of {handle.manifest['kind']} {handle.name}: {e}")
        (handle.job_dir / "log.txt").write_text(log)
        records, bad = records_from_log(log)
        tail = tail_of(log)
        if end.stopped:
            return JobEnd(records, bad, log, tail, stopped=end.stopped)
        if handle.phase != "succeeded":
            return JobEnd(records, bad, log, tail, failure=handle.reason or f"{handle.manifest['kind']} failed")
        return JobEnd(records, bad, log, tail, rc=0)

    def _delete(self, handle: Handle) -> None:
        if handle.name is None or handle.deleted:
            return
        try:
            self._client().delete(handle.manifest["kind"], handle.name)
            handle.deleted = True
        except Exception:  # noqa: BLE001 - already gone, or unreachable: the job's TTL ends it
            (handle.job_dir / "not-deleted.txt").write_text(
                f"{datetime.datetime.now(datetime.timezone.utc).isoformat()}: could not delete "
                f"{handle.manifest['kind']} {handle.name} in namespace {self.config.namespace}; delete it by hand\n")
