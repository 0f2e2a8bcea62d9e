"""Where a Kubernetes training job stands (bench/backends/kubernetes/follow.py): every rule of `job_state`, the pod
holding rank 0's log, and the records streamed in that log.

Where each shape comes from:
- Pods: built with the kubernetes client's own model classes (V1Pod, V1PodStatus, V1ContainerStatus, ...) and
  serialised by `ApiClient().sanitize_for_serialization`, so their keys are the client's (camelCase, Nones left
  out); the messages are the scheduler's and the kubelet's own wording.
- MPIJob status: kubeflow/mpi-operator v0.8.0 pkg/apis/kubeflow/v2beta1/types.go (JobStatus, JobCondition,
  ReplicaStatus, MPIReplicaType Launcher/Worker); reasons and messages from pkg/controller/mpi_job_controller.go and
  mpi_job_controller_status.go (MPIJobCreated/Running/Succeeded/Suspended/Resumed/Evicted); the succeeded status is
  the README's `kubectl get mpijob -o yaml` example verbatim; the failed launcher is TestLauncherFailed's
  (pkg/controller/mpi_job_controller_test.go: BackoffLimitExceeded/<pod reason>, "Job has reached the specified
  backoff limit: <pod message>").
- PyTorchJob status: kubeflow/trainer v1.9.4 pkg/apis/kubeflow.org/v1/common_types.go (JobStatus, JobCondition,
  ReplicaStatus, Master/Worker from pytorch_types.go); reasons NewReason("PyTorchJob", ...) and messages from
  pkg/controller.v1/pytorch/pytorchjob_controller.go UpdateJobStatus and pkg/util/status.go.
- Pod labels: mpi-operator's defaultLabels (job-name, job-role launcher|worker, replica-index) and the trainer's
  (job-name, replica-type master|worker lower-cased, replica-index).
"""
from __future__ import annotations

import datetime

import pytest

from bench.backends.kubernetes.follow import STUCK_WAITING, JobState, job_state, launcher_pod, records_from_log

NEED_CLIENT = "pod objects are built with the kubernetes client's model classes (pip install kubernetes)"
T0 = "2025-03-01T10:00:00Z"


# --- job objects (dicts, shaped as the operators' Go types serialise) -------------------------------------------
def cond(type_: str, status: str, reason: str, message: str, at: str = T0) -> dict:
    # JobCondition: type, status, reason, message, lastUpdateTime, lastTransitionTime (both operators alike).
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastUpdateTime": at, "lastTransitionTime": at}


def mpijob(*conditions: dict, replicas: dict | None = None, name: str = "bench-x") -> dict:
    status = {"conditions": list(conditions), "replicaStatuses": replicas or {"Launcher": {}, "Worker": {}},
              "startTime": T0} if conditions else {}
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": name, "namespace": "default"}, "status": status}


def pytorchjob(*conditions: dict, replicas: dict | None = None, name: str = "bench-x") -> dict:
    status = {"conditions": list(conditions), "replicaStatuses": replicas or {"Master": {}, "Worker": {}},
              "startTime": T0} if conditions else {}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "default"}, "status": status}


MPI_CREATED = cond("Created", "True", "MPIJobCreated", "MPIJob default/bench-x is created.")
MPI_RUNNING = cond("Running", "True", "MPIJobRunning", "MPIJob default/bench-x is running.", "2025-03-01T10:00:05Z")
PT_CREATED = cond("Created", "True", "PyTorchJobCreated", "PyTorchJob bench-x is created.")
PT_RUNNING = cond("Running", "True", "PyTorchJobRunning", "PyTorchJob bench-x is running.", "2025-03-01T10:00:05Z")


# --- pods (the client's models, serialised by the client) --------------------------------------------------------
def k8s():
    return pytest.importorskip("kubernetes.client", reason=NEED_CLIENT)


def container(name: str = "worker", *, waiting: tuple[str, str | None] | None = None,
              terminated: tuple[str, int, str | None] | None = None, last: tuple[str, int] | None = None,
              running: bool = False, restarts: int = 0):
    c = k8s()

    def ended(reason, code, message=None):
        return c.V1ContainerState(terminated=c.V1ContainerStateTerminated(reason=reason, exit_code=code,
                                                                          message=message))
    if waiting:
        state = c.V1ContainerState(waiting=c.V1ContainerStateWaiting(reason=waiting[0], message=waiting[1]))
    elif terminated:
        state = ended(*terminated)
    elif running:
        state = c.V1ContainerState(running=c.V1ContainerStateRunning(
            started_at=datetime.datetime(2025, 3, 1, 10, 0, 3, tzinfo=datetime.timezone.utc)))
    else:
        state = None
    return c.V1ContainerStatus(name=name, image="bench/horovod:latest", image_id="", ready=running,
                               restart_count=restarts, state=state, last_state=ended(*last) if last else None)


def pod(name: str, labels: dict, phase: str = "Running", containers=(), init=(), conditions=(), reason=None,
        message=None, created: int = 0) -> dict:
    c = k8s()
    p = c.V1Pod(api_version="v1", kind="Pod",
                metadata=c.V1ObjectMeta(name=name, namespace="default", labels=labels, creation_timestamp=
                                        datetime.datetime(2025, 3, 1, 10, 0, created, tzinfo=datetime.timezone.utc)),
                status=c.V1PodStatus(phase=phase, reason=reason, message=message, conditions=list(conditions) or None,
                                     container_statuses=list(containers) or None,
                                     init_container_statuses=list(init) or None))
    return c.ApiClient().sanitize_for_serialization(p)


def mpi_labels(role: str, index: int | None = None) -> dict:
    labels = {"training.kubeflow.org/operator-name": "mpi-operator", "training.kubeflow.org/job-name": "bench-x",
              "training.kubeflow.org/job-role": role}
    return labels if index is None else {**labels, "training.kubeflow.org/replica-index": str(index)}


def pt_labels(replica: str, index: int) -> dict:
    return {"training.kubeflow.org/operator-name": "pytorchjob-controller", "training.kubeflow.org/job-name": "bench-x",
            "training.kubeflow.org/replica-type": replica, "training.kubeflow.org/replica-index": str(index)}


def worker(i: int, **kw) -> dict:
    kw.setdefault("containers", [container("worker", running=True)])
    return pod(f"bench-x-worker-{i}", mpi_labels("worker", i), **kw)


def launcher(**kw) -> dict:
    kw.setdefault("containers", [container("launcher", running=True)])
    return pod("bench-x-launcher-abcde", mpi_labels("launcher"), **kw)


def unschedulable(message: str = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
                                 "available: 3 No preemption victims found for incoming pod."):
    c = k8s()
    return c.V1PodCondition(type="PodScheduled", status="False", reason="Unschedulable", message=message)


def state(job, pods=(), pending_for_s: float = 0, pending_limit_s: float = 600) -> JobState:
    return job_state(job, list(pods), pending_for_s, pending_limit_s)


# --- 1. the operator's Failed / Succeeded ---------------------------------------------------------------------------
def test_the_readme_succeeded_mpijob_is_succeeded():
    # mpi-operator v0.8.0 README: Running set False and Succeeded True when the launcher completed.
    job = mpijob(cond("Created", "True", "MPIJobCreated", "MPIJob default/tensorflow-benchmarks is created.",
                      "2019-07-09T22:15:51Z"),
                 cond("Running", "False", "MPIJobRunning", "MPIJob default/tensorflow-benchmarks is running.",
                      "2019-07-09T22:15:54Z"),
                 cond("Succeeded", "True", "MPIJobSucceeded",
                      "MPIJob default/tensorflow-benchmarks successfully completed.", "2019-07-09T22:17:06Z"),
                 replicas={"Launcher": {"succeeded": 1}, "Worker": {}})
    assert job_state(job, [], 0, 600) == JobState("succeeded", None)


def test_a_failed_launcher_names_the_operators_message_and_the_worker_that_ran_out_of_memory():
    # TestLauncherFailed: the launcher Job's BackoffLimitExceeded, with the last failed launcher pod's message.
    job = mpijob(MPI_CREATED, cond("Running", "False", "MPIJobRunning", "MPIJob default/bench-x is running."),
                 cond("Failed", "True", "BackoffLimitExceeded/Error", "Job has reached the specified backoff limit: "),
                 replicas={"Launcher": {"failed": 2}, "Worker": {"active": 1, "failed": 1}})
    pods = [launcher(phase="Failed", containers=[container("launcher", terminated=("Error", 1, None))]),
            worker(0),
            worker(1, phase="Failed", containers=[container("worker", terminated=("OOMKilled", 137, None))])]
    s = state(job, pods)
    assert s.phase == "failed"
    assert s.reason.startswith("Job has reached the specified backoff limit; ")
    # The OOM kill is the cause; the launcher's exit 1 is its consequence.
    assert "pod bench-x-worker-1 container worker: OOMKilled (exit code 137)" in s.reason


def test_a_failed_job_with_a_bad_exit_names_the_container_and_its_exit_code():
    job = pytorchjob(PT_CREATED, cond("Running", "False", "PyTorchJobRunning", "PyTorchJob bench-x is running."),
                     cond("Failed", "True", "PyTorchJobFailed",
                          "PyTorchJob bench-x is failed because 1 Worker replica(s) failed."),
                     replicas={"Master": {"active": 1}, "Worker": {"failed": 1}})
    pods = [pod("bench-x-master-0", pt_labels("master", 0), containers=[container("pytorch", running=True)]),
            pod("bench-x-worker-0", pt_labels("worker", 0), phase="Failed",
                containers=[container("pytorch", terminated=("Error", 1, "RuntimeError: NCCL error\nin line 3"))])]
    s = state(job, pods)
    assert s.phase == "failed"
    assert s.reason == ("PyTorchJob bench-x is failed because 1 Worker replica(s) failed; pod bench-x-worker-0 "
                        "container pytorch: Error (exit code 1): RuntimeError: NCCL error in line 3")


def test_evicted_workers_fail_the_mpijob_and_the_reason_names_the_pod_and_the_node_pressure():
    # mpi-operator: Failed True, reason MPIJobEvicted, "<n>/<m> workers are evicted".
    job = mpijob(MPI_CREATED, MPI_RUNNING, cond("Failed", "True", "MPIJobEvicted", "1/2 workers are evicted"))
    pods = [launcher(), worker(0),
            worker(1, phase="Failed", containers=[], reason="Evicted",
                   message="The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi.")]
    s = state(job, pods)
    assert s.phase == "failed"
    assert s.reason == ("1/2 workers are evicted; pod bench-x-worker-1 evicted: The node was low on resource: "
                        "memory. Threshold quantity: 100Mi, available: 42Mi.")


def test_a_failed_condition_without_a_pod_cause_is_the_operators_message_alone():
    job = pytorchjob(PT_CREATED, cond("Failed", "True", "PyTorchJobFailed", "PyTorchJob bench-x is failed because "
                                      "1 Master replica(s) failed."))
    assert job_state(job, [], 0, 600) == JobState("failed", "PyTorchJob bench-x is failed because 1 Master "
                                                            "replica(s) failed")


def test_the_newest_of_failed_and_succeeded_wins():
    # mpi-operator's filterOutCondition sets an earlier Failed to False when Succeeded comes, but a later Failed
    # (workers evicted after the launcher succeeded) leaves Succeeded True: the operators append, the last is newest.
    succeeded = cond("Succeeded", "True", "MPIJobSucceeded", "MPIJob default/bench-x successfully completed.")
    evicted = cond("Failed", "True", "MPIJobEvicted", "2/2 workers are evicted", "2025-03-01T11:00:00Z")
    assert state(mpijob(MPI_CREATED, succeeded, evicted)).phase == "failed"
    old_failed = cond("Failed", "False", "MPIJobEvicted", "1/2 workers are evicted")
    assert state(mpijob(MPI_CREATED, old_failed, succeeded)) == JobState("succeeded")


def test_succeeded_is_final_whatever_the_pods_left():
    job = mpijob(MPI_CREATED, cond("Succeeded", "True", "MPIJobSucceeded", "done"))
    pods = [worker(0, phase="Failed", containers=[container("worker", terminated=("OOMKilled", 137, None))])]
    assert state(job, pods) == JobState("succeeded")


# --- 2. containers stuck waiting --------------------------------------------------------------------------------------
STUCK_MESSAGES = {  # the kubelet's wording
    "ErrImagePull": 'failed to pull and unpack image "docker.io/bench/horovod:nope": not found',
    "ImagePullBackOff": 'Back-off pulling image "docker.io/bench/horovod:nope"',
    "InvalidImageName": 'Failed to apply default image tag "bench/Horovod:x": couldn\'t parse image name',
    "CreateContainerConfigError": 'secret "hf-token" not found',
    "CreateContainerError": "failed to generate container spec: failed to mkdir /data: permission denied",
    "CrashLoopBackOff": "back-off 40s restarting failed container=worker pod=bench-x-worker-0_default(0b1c)",
}


@pytest.mark.parametrize("reason", STUCK_WAITING)
def test_a_container_stuck_waiting_fails_the_job_at_once_naming_pod_container_and_why(reason):
    pods = [launcher(), worker(0, phase="Pending", containers=[container("worker", waiting=(reason,
                                                                                           STUCK_MESSAGES[reason]))])]
    s = state(mpijob(MPI_CREATED), pods)
    assert s.phase == "failed"
    assert s.reason.startswith(f"pod bench-x-worker-0 container worker: {reason}: {STUCK_MESSAGES[reason]}")


def test_a_crash_loop_names_how_the_container_last_ended():
    crash = container("launcher", waiting=("CrashLoopBackOff", "back-off 20s restarting failed container=launcher "
                                           "pod=bench-x-launcher-abcde_default(9f2e)"), last=("Error", 1), restarts=3)
    s = state(mpijob(MPI_CREATED), [launcher(containers=[crash])])
    assert s.phase == "failed"
    assert s.reason.endswith("; last exit: Error (exit code 1)")
    assert s.reason.startswith("pod bench-x-launcher-abcde container launcher: CrashLoopBackOff")


def test_a_stuck_init_container_fails_the_job_too():
    # The trainer's PyTorchJob workers wait for the master in an init container: its image can fail to pull.
    init = container("init-pytorch", waiting=("ImagePullBackOff", 'Back-off pulling image "alpine:3.10"'))
    pods = [pod("bench-x-worker-0", pt_labels("worker", 0), phase="Pending", init=[init],
                containers=[container("pytorch", waiting=("PodInitializing", None))])]
    s = state(pytorchjob(PT_CREATED), pods)
    assert s == JobState("failed", 'pod bench-x-worker-0 container init-pytorch: ImagePullBackOff: Back-off pulling '
                                   'image "alpine:3.10"')


# --- 3. out of memory, evicted: before the operator says so -----------------------------------------------------------
def test_an_oom_killed_container_fails_the_job_before_the_operator_does():
    pods = [launcher(), worker(0),
            worker(1, phase="Failed", containers=[container("worker", terminated=("OOMKilled", 137, None))])]
    s = state(mpijob(MPI_CREATED, MPI_RUNNING), pods)
    assert s == JobState("failed", "pod bench-x-worker-1 container worker: OOMKilled (exit code 137)")


def test_an_oom_kill_before_a_restart_still_counts():
    restarted = container("pytorch", running=True, last=("OOMKilled", 137), restarts=1)
    pods = [pod("bench-x-master-0", pt_labels("master", 0), containers=[restarted])]
    s = state(pytorchjob(PT_CREATED, PT_RUNNING), pods)
    assert s == JobState("failed", "pod bench-x-master-0 container pytorch: OOMKilled (exit code 137)")


def test_an_evicted_pod_fails_the_job_before_the_operator_does():
    pods = [pod("bench-x-master-0", pt_labels("master", 0), phase="Failed", reason="Evicted",
                message="Pod ephemeral local storage usage exceeds the total limit of containers 1Gi.")]
    s = state(pytorchjob(PT_CREATED, PT_RUNNING), pods)
    assert s == JobState("failed", "pod bench-x-master-0 evicted: Pod ephemeral local storage usage exceeds the total "
                                   "limit of containers 1Gi.")


# --- 4. unschedulable ---------------------------------------------------------------------------------------------
def test_an_unschedulable_pod_is_pending_until_the_limit_then_the_job_fails_with_the_schedulers_words():
    pods = [launcher(), worker(0), worker(1, phase="Pending", containers=[], conditions=[unschedulable()])]
    job = mpijob(MPI_CREATED)
    waiting = state(job, pods, pending_for_s=120, pending_limit_s=300)
    assert waiting.phase == "pending"
    assert waiting.reason.startswith("pod bench-x-worker-1 unschedulable for 120 s: 0/3 nodes are available: "
                                     "3 Insufficient nvidia.com/gpu.")
    over = state(job, pods, pending_for_s=301, pending_limit_s=300)
    assert over.phase == "failed"
    assert over.reason.startswith("pod bench-x-worker-1 unschedulable for 301 s: 0/3 nodes are available: "
                                  "3 Insufficient nvidia.com/gpu.")


def test_a_running_pytorchjob_with_a_worker_that_cannot_be_placed_is_not_running():
    # The trainer sets Running as soon as the master runs; the training waits for every worker.
    pods = [pod("bench-x-master-0", pt_labels("master", 0), containers=[container("pytorch", running=True)]),
            pod("bench-x-worker-0", pt_labels("worker", 0), phase="Pending", containers=[],
                conditions=[unschedulable("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/"
                                          "selector.")])]
    s = state(pytorchjob(PT_CREATED, PT_RUNNING), pods, pending_for_s=10)
    assert s.phase == "pending" and "node affinity" in s.reason and "bench-x-worker-0" in s.reason


# --- 5. suspended, restarting, running -----------------------------------------------------------------------------
def test_a_suspended_job_is_pending_and_says_so():
    # mpi-operator: Suspended True (MPIJobSuspended, "MPIJob suspended") and Running False while suspended.
    job = mpijob(MPI_CREATED, cond("Suspended", "True", "MPIJobSuspended", "MPIJob suspended"),
                 cond("Running", "False", "MPIJobSuspended", "MPIJob default/bench-x is suspended."))
    assert state(job) == JobState("pending", "suspended: MPIJob suspended")


def test_a_resumed_running_job_is_running():
    job = mpijob(MPI_CREATED, cond("Suspended", "False", "MPIJobResumed", "MPIJob resumed"), MPI_RUNNING)
    assert state(job, [launcher(), worker(0)]) == JobState("running")


def test_a_restarting_pytorchjob_counts_as_running_and_says_why():
    # The trainer drops Running when it sets Restarting (filterOutCondition), and the other way round.
    job = pytorchjob(PT_CREATED, cond("Restarting", "True", "PyTorchJobRestarting",
                                      "PyTorchJob bench-x is restarting because 1 Worker replica(s) failed."))
    assert state(job) == JobState("running", "restarting: PyTorchJob bench-x is restarting because 1 Worker "
                                             "replica(s) failed.")


def test_running_with_every_pod_up_is_running():
    assert state(mpijob(MPI_CREATED, MPI_RUNNING), [launcher(), worker(0), worker(1)]) == JobState("running")
    assert state(pytorchjob(PT_CREATED, PT_RUNNING)) == JobState("running")


# --- 6. otherwise pending ------------------------------------------------------------------------------------------
def test_pending_says_what_the_pods_wait_for():
    pods = [launcher(), worker(0, phase="Pending", containers=[container("worker", waiting=("ContainerCreating",
                                                                                           None))])]
    assert state(mpijob(MPI_CREATED), pods) == JobState("pending", "pod bench-x-worker-0 container worker: "
                                                                   "ContainerCreating")
    gated = k8s().V1PodCondition(type="PodScheduled", status="False", reason="SchedulingGated",
                                 message="Scheduling is blocked due to non-empty scheduling gates")
    s = state(mpijob(MPI_CREATED), [worker(0, phase="Pending", containers=[], conditions=[gated])])
    assert s == JobState("pending", "pod bench-x-worker-0 not scheduled: SchedulingGated")


def test_a_job_the_operator_never_answered_names_the_operator():
    assert state(mpijob()) == JobState("pending", "no status from the operator yet: is the mpi-operator running in "
                                                  "the cluster?")
    assert "training-operator" in state(pytorchjob()).reason
    assert state(mpijob(MPI_CREATED)) == JobState("pending", None)


# --- the pod with rank 0's log -------------------------------------------------------------------------------------
def test_the_mpijob_launcher_is_the_newest_launcher_pod():
    retried = pod("bench-x-launcher-fghij", mpi_labels("launcher"), created=30)
    pods = [worker(0), launcher(phase="Failed", created=1), retried, worker(1)]
    assert launcher_pod("MPIJob", pods)["metadata"]["name"] == "bench-x-launcher-fghij"
    assert launcher_pod("MPIJob", [worker(0), worker(1)]) is None


def test_the_pytorchjob_master_holds_rank_0_else_worker_0():
    master = pod("bench-x-master-0", pt_labels("master", 0))
    workers = [pod(f"bench-x-worker-{i}", pt_labels("worker", i)) for i in (1, 0)]
    assert launcher_pod("PyTorchJob", workers + [master])["metadata"]["name"] == "bench-x-master-0"
    assert launcher_pod("PyTorchJob", workers)["metadata"]["name"] == "bench-x-worker-0"
    assert launcher_pod("PyTorchJob", []) is None
    with pytest.raises(ValueError, match="TFJob"):
        launcher_pod("TFJob", workers)


# --- records in a log ----------------------------------------------------------------------------------------------
def test_records_are_read_from_marked_lines_whatever_tag_the_launcher_put_before_them():
    log = "\n".join([
        "Warning: Permanently added 'bench-x-worker-0.bench-x' to the list of known hosts.",
        'BENCH_RECORD {"rank": 0, "repeat": 0}',
        '[1,0]<stdout>:BENCH_RECORD {"rank": 0, "repeat": 1}',  # Open MPI --tag-output
        '[0]<stdout>:BENCH_RECORD {"rank": 0, "repeat": 2}',  # horovodrun
        '[default0]:BENCH_RECORD {"rank": 0, "repeat": 3}',  # torchrun --tee
        "bench worker: repeat 3: 812.4 img/s",
        'echo "BENCH_RECORD {}" is how a record is written',  # mentions the marker: not a record
    ])
    records, bad = records_from_log(log)
    assert bad is None
    assert [r["repeat"] for r in records] == [0, 1, 2, 3]


def test_a_bad_record_line_stops_the_reading_and_says_where():
    log = 'BENCH_RECORD {"repeat": 0}\n[1,0]<stdout>:BENCH_RECORD {"repeat": 1, "img_s"\nBENCH_RECORD {"repeat": 2}'
    records, bad = records_from_log(log)
    assert records == [{"repeat": 0}]
    assert bad.startswith("record on log line 2 is not valid JSON") and "truncated" in bad
    records, bad = records_from_log("BENCH_RECORD [1, 2]")
    assert (records, bad) == ([], "record on log line 1 is not a JSON object")


def test_no_records_and_another_marker():
    assert records_from_log("") == ([], None)
    assert records_from_log('R: {"a": 1}\nBENCH_RECORD {"b": 2}', marker="R: ") == ([{"a": 1}], None)
