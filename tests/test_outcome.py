"""One ladder turns how a job ended into an Outcome on every backend (bench/backends/shared/outcome.py): each rung, the
order between them, and the reasons the backends have always given."""
import pytest

from bench.backends.shared.outcome import JobEnd, classify

RECORDS = [{"repeat": 0}, {"repeat": 1}]
OMPI_DIED = ("--------------------------------------------------------------------------\n"
             "mpirun noticed that process rank 1 with PID 761 on node node2 exited on signal 9 (Killed).\n")


def ladder(end: JobEnd, **kw):
    kw = {"repeats": 2, "timeout_s": 60, "ended_by": "the process group was killed", **kw}
    o = classify(end, **kw)
    return o.status, o.reason


def test_a_clean_job_with_every_record_is_ok_and_keeps_its_tail_and_exit_status():
    o = classify(JobEnd(RECORDS, tail="last lines", rc=0), 2, 60, "the process group was killed")
    assert (o.status, o.reason, o.records, o.log_tail, o.returncode) == ("ok", None, RECORDS, "last lines", 0)


def test_a_clean_job_is_judged_by_its_records():
    assert ladder(JobEnd(RECORDS[:1], rc=0)) == ("failed", "expected 2 records, got 1")
    assert ladder(JobEnd(RECORDS, bad="record line 2 is not valid JSON", rc=0)) == \
        ("failed", "record line 2 is not valid JSON")
    assert ladder(JobEnd(RECORDS)) == ("ok", None)  # Azure ML: no exit status, the records decide


def test_a_non_zero_exit_names_the_code_and_the_logs_most_telling_line():
    log = "noise\nValueError: bad shape\n"
    assert ladder(JobEnd(RECORDS, log=log, rc=3)) == ("failed", "exit code 3: ValueError: bad shape")
    assert ladder(JobEnd(RECORDS, log="nothing useful\n", rc=3)) == ("failed", "exit code 3: see log.txt")
    hosts = ("node1", "node2")
    assert ladder(JobEnd(RECORDS, log=log, rc=3), hosts=hosts, per_node=1) == \
        ("failed", "exit code 3 (on node1, node2): ValueError: bad shape")


def test_a_process_dead_on_a_node_names_the_node():
    end = JobEnd(RECORDS[:1], log=OMPI_DIED, rc=137)
    status, reason = ladder(end, ended_by="the cell's processes on node1, node2 were killed", hosts=("node1", "node2"),
                            per_node=1)
    assert status == "failed"
    assert reason == ("node2: rank 1 exited on signal 9 (Killed) (exit code 137; the cell's processes on node1, node2 "
                      "were killed): mpirun noticed that process rank 1 with PID 761 on node node2 exited on signal 9 "
                      "(Killed).")
    assert ladder(end)[1].startswith("exit code 137: ")  # no hosts given (one machine): no node to name


def test_a_backends_own_failure_wording_and_fallback():
    end = JobEnd(RECORDS, log="", rc=0, failure="Slurm job 7 NODE_FAIL, exit code 0")
    assert ladder(end, fallback="Slurm reason NodeDown") == \
        ("failed", "Slurm job 7 NODE_FAIL, exit code 0: Slurm reason NodeDown")
    azure = JobEnd(log="x\nRuntimeError: CUDA out of memory\n", tail="t", failure="Azure ML job j ended Failed")
    assert ladder(azure) == ("failed", "Azure ML job j ended Failed: RuntimeError: CUDA out of memory")


def test_stopped_lost_and_time_limit_come_before_the_exit_status():
    assert ladder(JobEnd(RECORDS, rc=-9, stopped="timeout")) == \
        ("timeout", "timed out after 60 s; the process group was killed")
    assert ladder(JobEnd(RECORDS, rc=-15, stopped="interrupted"), ended_by="Slurm job 7 was cancelled") == \
        ("interrupted", "interrupted; Slurm job 7 was cancelled")
    assert ladder(JobEnd(RECORDS, rc=255, lost="node2 stopped answering")) == ("failed", "node2 stopped answering")
    assert ladder(JobEnd(RECORDS, rc=0, time_limit="Slurm job 7 reached its Slurm time limit",
                         failure="Slurm job 7 TIMEOUT, exit code 0")) == \
        ("timeout", "Slurm job 7 reached its Slurm time limit")
    # bench's own stop outranks what it then lost sight of (a job cancelled at its timeout, then purged by Slurm).
    assert ladder(JobEnd(stopped="timeout", lost="Slurm job 7: Slurm no longer knows the job"))[0] == "timeout"
    assert ladder(JobEnd(lost="gone", time_limit="limit"))[1] == "gone"


@pytest.mark.parametrize("end", [JobEnd(RECORDS, rc=0, error="node check failed: node3: unreachable"),
                                 JobEnd(RECORDS, rc=1, stopped="timeout",
                                        error="node check failed: node3: unreachable")])
def test_an_error_before_the_job_ran_is_the_whole_reason(end):
    o = classify(end, 2, 60, "ignored")
    assert (o.status, o.reason, o.records, o.log_tail, o.returncode) == \
        ("failed", "node check failed: node3: unreachable", [], None, None)
