"""Where a Kubernetes training job stands, read from API objects as plain dicts (camelCase, as the API server's JSON
and the client's `ApiClient().sanitize_for_serialization` give them); no client is imported here.

The inputs, and where each comes from:
- the job's `status.conditions` ([{type, status: "True"|"False", reason, message, ...}]): written by the operator,
  kubeflow/mpi-operator v0.8.0 for an MPIJob (kubeflow.org/v2beta1; pkg/controller/mpi_job_controller_status.go) or
  kubeflow/trainer v1.9 for a PyTorchJob (kubeflow.org/v1; pkg/util/status.go). Both append a changed condition at
  the end of the list and set Running False when Failed or Succeeded comes, but can leave an older condition True
  (mpi-operator: Succeeded stays True if evicted workers add Failed later): the last True one in the list is the
  newest, and it wins.
- the pods' `status` (phase, reason "Evicted", conditions PodScheduled False/Unschedulable, container statuses
  with state.waiting / state.terminated / lastState.terminated): written by the scheduler and the kubelet. They say
  what went wrong before the operator does (an image that will not pull never fails the job by itself) and why a
  Failed job failed (the operator's message names the job, not the container that ran out of memory).

The rules, most telling first (`job_state`):
1. the newest of Failed/Succeeded True decides: failed (its message plus the first pod-level cause) or succeeded;
2. a container waiting on something that will not fix itself (a bad image, a bad config, a crash loop): failed;
3. a container OOMKilled, or a pod evicted: failed, even before the operator says so (the run is spoiled);
4. a pod the scheduler cannot place: pending until `pending_for_s` passes `pending_limit_s`, then failed;
5. the newest of Suspended/Restarting/Running True: Suspended (e.g. queued by Kueue) is pending; Running is
   running; Restarting (a replica failed and is being replaced) is running too, with why: the run's clock goes on;
6. otherwise pending, with what the pods wait for, if anything.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

# Container waiting reasons that do not fix themselves: retrying only repeats them (kubelet's images and
# kuberuntime packages: ErrImagePull/ImagePullBackOff/InvalidImageName, CreateContainer(Config)Error, CrashLoopBackOff).
STUCK_WAITING = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                 "CreateContainerError", "CrashLoopBackOff")
# Pod labels the operators set (mpi-operator pkg/apis/kubeflow/v2beta1/constants.go; trainer v1.9
# pkg/apis/kubeflow.org/v1/common_types.go, with the replica type lower-cased by the PyTorchJob controller).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
MESSAGE_CHARS = 300  # a kubelet or operator message can carry a whole termination log: one line, bounded


@dataclass(frozen=True)
class JobState:
    phase: str  # pending | running | succeeded | failed
    reason: str | None = None  # one line a user can act on


def job_state(job: dict, pods: list[dict], pending_for_s: float, pending_limit_s: float) -> JobState:
    """Where `job` (an MPIJob or a PyTorchJob) stands, given its pods; `pending_for_s` is how long it has been
    pending, `pending_limit_s` how long a pod may stay unschedulable before the job counts as failed."""
    conditions = (job.get("status") or {}).get("conditions") or []
    end = _newest_true(conditions, ("Failed", "Succeeded"))
    if end and end["type"] == "Failed":
        said = _one_line(end.get("message") or end.get("reason") or f"{job.get('kind', 'the job')} failed")
        said = said.rstrip(" .:;") or said  # mpi-operator's "...backoff limit: " when the pod said nothing
        cause = _cause(pods)
        return JobState("failed", f"{said}; {cause}" if cause else said)
    if end:
        return JobState("succeeded")
    why = _stuck(pods) or _spoiled(pods)
    if why:
        return JobState("failed", why)
    unplaced = _unschedulable(pods)
    if unplaced:
        pod, message = unplaced
        why = f"pod {pod} unschedulable for {pending_for_s:.0f} s: {message}"
        return JobState("failed" if pending_for_s > pending_limit_s else "pending", why)
    now = _newest_true(conditions, ("Suspended", "Restarting", "Running"))
    if now and now["type"] == "Suspended":
        return JobState("pending", f"suspended: {_one_line(now.get('message') or now.get('reason') or '')}")
    if now and now["type"] == "Restarting":
        return JobState("running", f"restarting: {_one_line(now.get('message') or now.get('reason') or '')}")
    if now:
        return JobState("running")
    if not conditions and not pods:
        return JobState("pending", f"no status from the operator yet: is the {_operator(job)} running in the cluster?")
    return JobState("pending", _waiting_for(pods))


def _newest_true(conditions: list[dict], types: tuple[str, ...]) -> dict | None:
    # The operators append each changed condition at the end: the last True one is the newest.
    found = [c for c in conditions if c.get("type") in types and c.get("status") == "True"]
    return found[-1] if found else None


def _operator(job: dict) -> str:
    return {"MPIJob": "mpi-operator", "PyTorchJob": "training-operator"}.get(job.get("kind", ""), "job's operator")


# --- what the pods say -------------------------------------------------------------------------------------------
def _name(pod: dict) -> str:
    return (pod.get("metadata") or {}).get("name", "?")


def _containers(pod: dict) -> list[dict]:
    status = pod.get("status") or {}
    # Init containers first: the trainer's PyTorchJob workers wait for the master in one.
    return (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])


def _exit(terminated: dict) -> str:
    how = f"{terminated.get('reason') or 'terminated'} (exit code {terminated.get('exitCode')})"
    message = terminated.get("message")
    return f"{how}: {_one_line(message)}" if message else how


def _stuck(pods: list[dict]) -> str | None:
    """The first container waiting on something retrying will not fix."""
    for pod in pods:
        for c in _containers(pod):
            waiting = (c.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK_WAITING:
                why = f"pod {_name(pod)} container {c.get('name')}: {waiting['reason']}"
                if waiting.get("message"):
                    why += f": {_one_line(waiting['message'])}"
                last = (c.get("lastState") or {}).get("terminated")
                # A crash loop's own message is only the back-off: how the container last ended is the cause.
                return f"{why}; last exit: {_exit(last)}" if last else why
    return None


def _spoiled(pods: list[dict]) -> str | None:
    """A container the kernel killed for memory (now or before a restart), else a pod the kubelet evicted."""
    for pod in pods:
        for c in _containers(pod):
            for state in (c.get("state") or {}, c.get("lastState") or {}):
                terminated = state.get("terminated") or {}
                if terminated.get("reason") == "OOMKilled":
                    return f"pod {_name(pod)} container {c.get('name')}: {_exit(terminated)}"
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("reason") == "Evicted":
            return f"pod {_name(pod)} evicted: {_one_line(status.get('message') or 'no message')}"
    return None


def _failed_container(pods: list[dict]) -> str | None:
    """The first container that ended with a non-zero exit code (Error, ContainerCannotRun, ...)."""
    for pod in pods:
        for c in _containers(pod):
            for state in (c.get("state") or {}, c.get("lastState") or {}):
                terminated = state.get("terminated") or {}
                if terminated.get("exitCode") not in (None, 0):
                    return f"pod {_name(pod)} container {c.get('name')}: {_exit(terminated)}"
    return None


def _cause(pods: list[dict]) -> str | None:
    """Why a failed job failed, as the pods tell it: memory or eviction first, then a bad exit, then a stuck wait
    (one rank's crash makes the others exit non-zero too; an OOM kill is the cause, their exits the consequence)."""
    return _spoiled(pods) or _failed_container(pods) or _stuck(pods)


def _unschedulable(pods: list[dict]) -> tuple[str, str] | None:
    for pod in pods:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False" \
                    and cond.get("reason") == "Unschedulable":
                return _name(pod), _one_line(cond.get("message") or "no message")
    return None


def _waiting_for(pods: list[dict]) -> str | None:
    """What the first pod not yet running waits for: a scheduling gate, an image pull, a volume..."""
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") not in (None, "Pending"):
            continue
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                return f"pod {_name(pod)} not scheduled: {_one_line(cond.get('reason') or cond.get('message') or '')}"
        for c in _containers(pod):
            waiting = (c.get("state") or {}).get("waiting") or {}
            if waiting.get("reason"):
                return f"pod {_name(pod)} container {c.get('name')}: {waiting['reason']}"
        return f"pod {_name(pod)} pending"
    return None


def _one_line(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS - 3] + "..."


# --- where rank 0's output is --------------------------------------------------------------------------------------
def launcher_pod(job_kind: str, pods: list[dict]) -> dict | None:
    """The pod whose log holds rank 0's output: the MPIJob's launcher, the PyTorchJob's master (worker 0 when the
    job has no master). The newest one if there are several: the launcher is a batch Job that retries its pod."""
    if job_kind == "MPIJob":
        mine = [p for p in pods if _labels(p).get(JOB_ROLE_LABEL) == "launcher"]
    elif job_kind == "PyTorchJob":
        mine = [p for p in pods if _labels(p).get(REPLICA_TYPE_LABEL) == "master"] or \
               [p for p in pods if _labels(p).get(REPLICA_TYPE_LABEL) == "worker"
                and _labels(p).get(REPLICA_INDEX_LABEL) == "0"]
    else:
        raise ValueError(f"unknown job kind {job_kind!r} (expected MPIJob or PyTorchJob)")
    # RFC 3339 times in one format sort as text; a pod not yet stamped counts as the newest.
    return max(mine, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "~", default=None)


def _labels(pod: dict) -> dict:
    return (pod.get("metadata") or {}).get("labels") or {}


# A launcher tags each forwarded line: Open MPI's "[1,0]<stdout>:", horovodrun's "[0]<stdout>:", torchrun's
# "[default0]:". Only such a tag may come before the marker: a line that merely mentions it is not a record.
_TAG = re.compile(r"^(?:\[[^\]]*\](?:<std(?:out|err)>)?:)?\s*$")


def records_from_log(log: str, marker: str = "BENCH_RECORD ") -> tuple[list[dict], str | None]:
    """The workers' records in a log, one JSON object per line after `marker`, and why the log's records are bad
    (None if every record line reads), as `records.read_records` reads a records.jsonl."""
    records = []
    for n, line in enumerate(log.splitlines(), 1):
        at = line.find(marker)
        if at < 0 or not _TAG.match(line[:at]):
            continue
        try:
            record = json.loads(line[at + len(marker):])
        except json.JSONDecodeError as e:
            return records, f"record on log line {n} is not valid JSON ({e.msg}); the log may be truncated"
        if not isinstance(record, dict):
            return records, f"record on log line {n} is not a JSON object"
        records.append(record)
    return records, None
