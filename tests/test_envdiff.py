"""What changed between two environments (bench/analysis/envdiff.py) and what the worker records of its CPU
(models/probes/cgroup_probe.py: the cgroup quota and the affinity)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench.analysis.envdiff import diff_environments, environment_of
from models.probes.cgroup_probe import compact_cpus, cpu_affinity, quota_v1, quota_v2

ROOT = Path(__file__).resolve().parent.parent


def rec(**probe):
    base = {"packages": {"torch": "2.13.0", "numpy": "2.4.6"}, "mpi_library": "Open MPI v4.1.4",
            "cpu": {"model_name": "AMD EPYC", "features": {"avx2": True, "fma": True}},
            "cpu_quota": {"cpus": None, "source": "v1:/"}, "cpu_affinity": "0-1", "cpu_count": 2,
            "platform": "Linux-6.1.0-x86_64-with-glibc2.36", "tuning_env": {}}
    return {"status": "ok", "env_probe": {**base, **probe}, "launch_env": {"OMP_NUM_THREADS": "1"},
            "workload_version": "3", "cell": {"batch_per_gpu": 8}}


def test_equal_environments_give_nothing():
    assert diff_environments(environment_of([rec(), rec()]), environment_of([rec()])) == []


def test_changes_come_most_relevant_first():
    b = rec(packages={"torch": "2.14.0", "numpy": "2.4.6"}, cpu_quota={"cpus": 0.9, "source": "v1:/x"},
            platform="Linux-6.8.0-x86_64-with-glibc2.36", tuning_env={"MKL_NUM_THREADS": "2"})
    changes = diff_environments(environment_of([rec()]), environment_of([b]))
    assert [c.what for c in changes] == ["package torch", "CPU quota", "kernel", "env MKL_NUM_THREADS"]
    assert (changes[1].before, changes[1].after) == ("none", "0.9 CPUs")
    assert (changes[3].before, changes[3].after) == ("unset", "2")


def test_values_every_run_draws_afresh_are_not_changes():
    """Rendezvous ports and addresses, tokens, scratch paths: different in every run, never what changed (a `bench
    ab` of two git refs once named only HOROVOD_GLOO_RENDEZVOUS_PORT); a real variable beside them still is."""
    def side(port: str, tmp: str, threads: str):
        return rec(tuning_env={"HOROVOD_GLOO_RENDEZVOUS_PORT": port,
                               "HOROVOD_GLOO_RENDEZVOUS_ADDR": f"10.0.0.{port[-1]}", "MASTER_PORT": port,
                               "MASTER_ADDR": "node1", "BENCH_CELL_TOKEN": tmp[-4:],
                               "TMPDIR": tmp, "MKL_NUM_THREADS": threads})
    a = environment_of([side("26387", "/tmp/bench-ab-x1y2", "1"), side("27819", "/tmp/bench-ab-x1y3", "1")])
    assert diff_environments(a, environment_of([side("14126", "/tmp/bench-ab-q9z8", "1")])) == []
    changes = diff_environments(a, environment_of([side("14126", "/tmp/bench-ab-q9z8", "2")]))
    assert [(c.what, c.before, c.after) for c in changes] == [("env MKL_NUM_THREADS", "1", "2")]


def test_what_one_side_never_recorded_is_not_a_change():
    old = rec()
    del old["env_probe"]["cpu_quota"], old["env_probe"]["packages"]
    b = rec(cpu_quota={"cpus": 0.5, "source": "v1:/x"}, packages={"torch": "9"})
    assert diff_environments(environment_of([old]), environment_of([b])) == []


def test_environment_of_a_dataframe_and_of_disagreeing_records():
    df = pd.DataFrame({"record_json": [json.dumps(rec()), json.dumps(rec(cpu_affinity="0"))]})
    env = environment_of(df, ["0.1.0"])
    assert env["CPU affinity"] == "0 | 0-1" and env["bench version"] == "0.1.0"


def test_compact_cpu_lists():
    assert compact_cpus({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8" and compact_cpus([3]) == "3"
    assert cpu_affinity() == compact_cpus(os.sched_getaffinity(0))


def test_quota_is_the_tightest_over_the_ancestors(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "cpu.cfs_quota_us").write_text("400000")  # 4 CPUs at the top, 1.5 below: 1.5 binds
    (tmp_path / "cpu.cfs_period_us").write_text("100000")
    (tmp_path / "a" / "cpu.cfs_quota_us").write_text("150000")
    (tmp_path / "a" / "cpu.cfs_period_us").write_text("100000")
    (tmp_path / "a" / "b" / "cpu.cfs_quota_us").write_text("-1")
    (tmp_path / "a" / "b" / "cpu.cfs_period_us").write_text("100000")
    assert quota_v1(tmp_path, "/a/b") == 1.5
    assert quota_v1(tmp_path, "/") == 4.0
    assert quota_v1(tmp_path / "a" / "b", "/") is None
    (tmp_path / "cpu.max").write_text("max 100000")
    (tmp_path / "a" / "cpu.max").write_text("50000 100000")
    assert quota_v2(tmp_path, "/a/b") == 0.5 and quota_v2(tmp_path, "/") is None


V1_CPU = Path("/sys/fs/cgroup/cpu")


@pytest.mark.skipif(not (V1_CPU / "cpu.cfs_quota_us").exists() or not os.access(V1_CPU, os.W_OK),
                    reason="needs a writable cgroup v1 cpu controller (root)")
def test_a_real_quota_is_recorded_by_the_worker_probe():
    from bench.ab.cpuquota import make_group

    group = make_group(f"bench-test-{os.getpid()}", 0.45)
    try:
        code = ("import json; from models.probes.envprobe import base_probe; "
                "print(json.dumps(base_probe()['cpu_quota']))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             cwd=ROOT, preexec_fn=group.add_self, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {"cpus": 0.45, "source": f"v1:/{group.path.name}"}
    finally:
        group.remove()
