"""A cell slowed on purpose, for real: rank 1 of a 2-worker cell moved onto CPU 1 (models/measure/faults.py's `pin`
hook) while a busy process the test starts holds that core. The cell must come out below the value expected from the
1-worker cell of the same series, with rank 1 named as the slow rank — by `bench status` and in the report."""
import os
import subprocess
import sys

import pytest

from tests.conftest import bench_cli

pytestmark = [pytest.mark.e2e, pytest.mark.diagnose]

MATRIX = """
name: slowed
workload: {batch_per_gpu: 8, image_size: 32, warmup_steps: 1, steps: 4, repeats: 3, threads: 1,
           channels_last: false}
axes: {gpu: [cpu], framework: [pytorch], mpi: [gloo], ib: [false], gpus: [1, 2]}
backend: {name: local, timeout_s: 600}
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or 1 not in os.sched_getaffinity(0),
                    reason="needs CPUs 0 and 1: one for rank 0, one for rank 1 beside the busy process")
def test_a_worker_on_a_busy_core_is_below_expected_and_named(tmp_path):
    (tmp_path / "m.yaml").write_text(MATRIX, encoding="utf-8")
    # The hog: one busy process on CPU 1, bounded in time, killed when the run is over either way.
    hog = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c",
                            "import time\nend = time.time() + 400\nwhile time.time() < end: pass"])
    try:
        run = bench_cli("run", "m.yaml", cwd=tmp_path, timeout=500,
                        env={"BENCH_FAULT": "pin:rank=1:step=1:cpu=1"})
    finally:
        hog.kill()
        hog.wait()
    assert run.returncode == 0, run.stderr[-3000:]
    status = bench_cli("status", "-v", cwd=tmp_path)  # the table, then the sentences behind it
    assert status.returncode == 0, status.stderr
    lines = [line for line in status.stdout.splitlines() if "/2w " in line and ": measured " in line]
    assert len(lines) == 1, status.stdout
    assert "below expected by" in lines[0] and "slow: rank 1 (" in lines[0], status.stdout
    assert "compute" in status.stdout and "communication" in status.stdout  # the breakdown lines
    report = bench_cli("report", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    summary = (tmp_path / "reports" / "summary.md").read_text(encoding="utf-8")
    assert "below expected by" in summary and "rank 1 (" in summary
    assert (tmp_path / "reports" / "breakdown.png").stat().st_size > 0
