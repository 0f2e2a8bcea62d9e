"""What a cell is on Kubernetes: one Kubeflow job per job of the cell, as the dict the API server takes.

- Horovod cells (every MPI flavour, and Horovod's Gloo) and DDP cells started by mpirun: an MPIJob
  (kubeflow/mpi-operator v0.8, `kubeflow.org/v2beta1`). The launcher pod runs the cell's launch line, rendered by
  the flavour exactly as on the other backends, with the worker pods' DNS names as its hosts; the worker pods run
  sshd (the image's `-mpijob` layer) and hold the GPUs. `mpiImplementation` is the flavour's; Horovod's Gloo cells
  say OpenMPI, which only decides the hostfile variable the operator sets: horovodrun reads the host list from its
  own `-H` and reaches the workers over the same ssh.
- DDP cells started by torchrun: a PyTorchJob (kubeflow/trainer v1.9, `kubeflow.org/v1`): one Master and N-1
  Workers, each running the same torchrun line (`bench.launch.torchrun`), meeting at the Master's service.
- Records: rank 0 prints them on stdout (models/measure/record.py's STDOUT_PREFIX) and bench reads them back from the
  pods' logs. Chosen over a volume because every cluster keeps pod logs and not every cluster has a ReadWriteMany volume
  to share; the price is that the records live as long as the pods' logs do (bench reads them as soon as the job
  ends, before it deletes the job).
"""
from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

from bench.backend_settings.kubernetes import KubernetesConfig
from bench.backends.shared.cell_launch import launch_in_image
from bench.launch import LAUNCHERS, TORCHRUN, Rendered, Ssh
from bench.planning.cell import PlannedCell
from models.registry.engines import TORCH_DISTRIBUTED_ENGINES

MPIJOB_API = "kubeflow.org/v2beta1"
PYTORCHJOB_API = "kubeflow.org/v1"
# Where the bench images keep the worker's Python and models/ (docker/Dockerfile.j2), and who runs in them.
IMAGE_PYTHON = "/opt/bench/.venv/bin/python"
IMAGE_MODELS = "/opt/bench/models"
MASTER_PORT = "29500"  # DDP's rendezvous under mpirun (MASTER_ADDR = the first worker pod)
PYTORCHJOB_PORT = 23456  # the trainer's default port name for PyTorchJob containers ("pytorchjob-port")
# The operators' names for roles (mpi-operator's MPIReplicaType, the trainer's PyTorchJob replica types).
LAUNCHER, WORKER, MASTER = "Launcher", "Worker", "Master"
SHM_VOLUME = "dshm"


def job_name(planned: PlannedCell, run_id: str, job: int = 0) -> str:
    """A DNS label short enough for the pods' names (`<name>-worker-<i>` must stay within 63 characters)."""
    run = hashlib.sha256(run_id.encode()).hexdigest()[:6]
    return f"bench-{planned.cell_id}-{run}-{job}"


def is_pytorchjob(planned: PlannedCell) -> bool:
    return planned.cell["engine"] in TORCH_DISTRIBUTED_ENGINES and LAUNCHERS[planned.cell["mpi"]].native == "torchrun"


def worker_hosts(name: str, namespace: str, nodes: int) -> tuple[str, ...]:
    """The worker pods as the launcher reaches them: the operator's headless service gives each
    `<job>-worker-<i>.<job>.<namespace>.svc` (mpi-operator's hostfile uses the same names)."""
    return tuple(f"{name}-worker-{i}.{name}.{namespace}.svc" for i in range(nodes))


class ManifestMaker:
    """Renders a cell's jobs for one cluster's settings; `image` names the cell's image (registry, digest)."""

    def __init__(self, config: KubernetesConfig, image_for, ssh_port: int, ssh_auth_path: str, sshd_command,
                 image_uid: int):
        self.config = config
        self.image_for = image_for  # (cell, mpijob: bool) -> image reference
        self.ssh_port = ssh_port
        self.ssh_auth_path = ssh_auth_path
        self.sshd_command = sshd_command
        self.image_uid = image_uid

    # --- the launch line -------------------------------------------------------------------------------------------
    def launch(self, planned: PlannedCell, run_id: str, name: str) -> Rendered:
        """The launcher's argv and env (MPIJob), or every pod's torchrun line (PyTorchJob)."""
        c = planned.cell
        flavour = LAUNCHERS[c["mpi"]]
        if is_pytorchjob(planned):
            hosts = ((f"{name}-master-0", planned.per_node),) + tuple(
                (f"{name}-worker-{i}", planned.per_node) for i in range(planned.nodes - 1))
            spec, runtime, _ = launch_in_image(planned, run_id, hosts, python=IMAGE_PYTHON, models_dir=IMAGE_MODELS)
            if planned.nodes == 1:
                return TORCHRUN.render(spec, runtime.python)
            return TORCHRUN.render_nodes(spec, runtime.python, rdzv_id=name)[0].rendered
        hosts = tuple((h, planned.per_node) for h in worker_hosts(name, self.config.namespace, planned.nodes))
        spec, _, tool = launch_in_image(planned, run_id, hosts, python=IMAGE_PYTHON, models_dir=IMAGE_MODELS,
                                        ssh=Ssh(port=self.ssh_port))
        if c["engine"] in TORCH_DISTRIBUTED_ENGINES:  # DDP under mpirun: rendezvous at the first worker
            spec = replace(spec, env={**spec.env, "MASTER_ADDR": hosts[0][0], "MASTER_PORT": MASTER_PORT})
        return flavour.render(spec, tool)

    # --- the pods --------------------------------------------------------------------------------------------------
    def _env(self, env: dict[str, str]) -> list[dict[str, str]]:
        merged = {**env, **self.config.env}
        return [{"name": k, "value": v} for k, v in sorted(merged.items())]

    def _pod(self, planned: PlannedCell, name: str, container: dict[str, Any], gpus: int, role: str,
             anti_affinity: bool) -> dict[str, Any]:
        """A pod template: the container, /dev/shm, the GPU placement, the fabric, the cluster's own settings."""
        cfg, c = self.config, planned.cell
        resources: dict[str, dict[str, Any]] = {}
        if gpus:
            resources.setdefault("limits", {})[cfg.gpu_resource] = gpus
        if role != LAUNCHER and c["ib"] and cfg.rdma_resource:
            resources.setdefault("limits", {})[cfg.rdma_resource] = 1
        if role != LAUNCHER and cfg.worker_memory:
            for kind in ("requests", "limits"):
                resources.setdefault(kind, {})["memory"] = cfg.worker_memory
        if not container.get("env"):
            container = {k: v for k, v in container.items() if k != "env"}
        container = {**container, "resources": resources,
                     "volumeMounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]}
        if role != LAUNCHER and c["ib"]:
            # RDMA pins memory: the verbs layer needs to lock more than the default limit.
            container["securityContext"] = {**container.get("securityContext", {}),
                                            "capabilities": {"add": ["IPC_LOCK"]}}
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": self.image_uid, "runAsGroup": self.image_uid,
                                "fsGroup": self.image_uid},
            "containers": [container],
            "volumes": [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": cfg.shm_size}}],
        }
        if cfg.service_account:
            spec["serviceAccountName"] = cfg.service_account
        if cfg.image_pull_secret:
            spec["imagePullSecrets"] = [{"name": cfg.image_pull_secret}]
        if cfg.node_selector:
            spec["nodeSelector"] = dict(cfg.node_selector)
        if cfg.tolerations:
            spec["tolerations"] = [dict(t) for t in cfg.tolerations]
        affinity: dict[str, Any] = {}
        products = self.gpu_products(c["gpu"])
        if gpus and products:
            affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": cfg.gpu_label, "operator": "In", "values": list(products)}]}]}}
        if anti_affinity:
            # One worker pod per node: the cell's node count is its own, whatever else the node could hold.
            affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"bench/job": name, "bench/role": role.lower()}},
                "topologyKey": "kubernetes.io/hostname"}]}
        if affinity:
            spec["affinity"] = affinity
        if role != LAUNCHER and c["ib"] and cfg.ib_host_network:
            spec["hostNetwork"] = True
            spec["dnsPolicy"] = "ClusterFirstWithHostNet"  # the job's service names must still resolve
        labels = {"bench/job": name, "bench/role": role.lower(), "bench/cell": planned.cell_id}
        return {"metadata": {"labels": labels}, "spec": spec}

    def gpu_products(self, gpu: str) -> tuple[str, ...]:
        from bench.facts.catalog import catalog

        return tuple(self.config.gpu_products.get(gpu) or catalog()[gpu].gfd_products)

    def _metadata(self, planned: PlannedCell, run_id: str, job: int, name: str) -> dict[str, Any]:
        return {"name": name, "namespace": self.config.namespace,
                "labels": {"bench/cell": planned.cell_id, "bench/job": name, "app.kubernetes.io/managed-by": "bench"},
                "annotations": {"bench/run-id": run_id, "bench/label": planned.label(), "bench/job-index": str(job)}}

    # --- the jobs --------------------------------------------------------------------------------------------------
    def manifest(self, planned: PlannedCell, run_id: str, job: int = 0) -> dict[str, Any]:
        name = job_name(planned, run_id, job)
        rendered = self.launch(planned, run_id, name)
        if is_pytorchjob(planned):
            return self._pytorchjob(planned, run_id, job, name, rendered)
        return self._mpijob(planned, run_id, job, name, rendered)

    def _mpijob(self, planned: PlannedCell, run_id: str, job: int, name: str, rendered: Rendered) -> dict[str, Any]:
        gpus = 0 if planned.sku.is_cpu else planned.per_node
        image = self.image_for(planned.cell, True)
        launcher = {"name": "launcher", "image": image, "command": list(rendered.argv), "env": self._env(rendered.env)}
        worker_env = self._env({})  # the launcher hands the cell's env to every rank; only the user's extras here
        worker = {"name": "worker", "image": image, "command": list(self.sshd_command()),
                  # The launcher starts once every worker's sshd answers (launcherCreationPolicy below).
                  "readinessProbe": {"tcpSocket": {"port": self.ssh_port}, "initialDelaySeconds": 2,
                                     "periodSeconds": 2}, "env": worker_env}
        return {
            "apiVersion": MPIJOB_API, "kind": "MPIJob", "metadata": self._metadata(planned, run_id, job, name),
            "spec": {
                "slotsPerWorker": planned.per_node,
                "mpiImplementation": LAUNCHERS[planned.cell["mpi"]].mpi_operator_implementation,
                "sshAuthMountPath": self.ssh_auth_path,
                "launcherCreationPolicy": "WaitForWorkersReady",
                "runPolicy": self._run_policy(),
                "mpiReplicaSpecs": {
                    LAUNCHER: {"replicas": 1, "restartPolicy": "Never",
                               "template": self._pod(planned, name, launcher, 0, LAUNCHER, False)},
                    WORKER: {"replicas": planned.nodes, "restartPolicy": "Never",
                             "template": self._pod(planned, name, worker, gpus, WORKER, planned.nodes > 1)},
                },
            },
        }

    def _pytorchjob(self, planned: PlannedCell, run_id: str, job: int, name: str,
                    rendered: Rendered) -> dict[str, Any]:
        gpus = 0 if planned.sku.is_cpu else planned.per_node
        image = self.image_for(planned.cell, False)
        # The trainer requires the container to be called "pytorch"; every pod runs the same torchrun line.
        container = {"name": "pytorch", "image": image, "command": list(rendered.argv), "env": self._env(rendered.env),
                     "ports": [{"name": "pytorchjob-port", "containerPort": PYTORCHJOB_PORT}]}
        replicas = {MASTER: {"replicas": 1, "restartPolicy": "Never",
                             "template": self._pod(planned, name, container, gpus, MASTER, False)}}
        if planned.nodes > 1:
            replicas[WORKER] = {"replicas": planned.nodes - 1, "restartPolicy": "Never",
                                "template": self._pod(planned, name, container, gpus, WORKER, planned.nodes > 2)}
        return {"apiVersion": PYTORCHJOB_API, "kind": "PyTorchJob",
                "metadata": self._metadata(planned, run_id, job, name),
                "spec": {"runPolicy": self._run_policy(), "pytorchReplicaSpecs": replicas}}

    def _run_policy(self) -> dict[str, Any]:
        # One try: a benchmark that failed is a result, not something to retry behind the user's back. Pods stay
        # until bench has read their logs and deletes the job; the TTL is a backstop for a bench that died.
        return {"backoffLimit": 0, "cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 24 * 3600}
