"""The registry is the one place a workload is declared (issue 47): a workload from a test package
(tests/workloads/regression.py, named in BENCH_WORKLOADS) is planned, run under torchrun, stored with its own unit and
reported in a section of its own, with nothing under bench/ knowing it; without the registration the matrix is
refused with one line."""
import re
import sqlite3

import pytest

from tests.conftest import ROOT, bench_cli

pytestmark = pytest.mark.e2e

MATRIX = """
name: registered
workload: {model: regression-test, engine: native, batch_per_gpu: 32, warmup_steps: 2, steps: 5, repeats: 3,
           threads: 1}
axes: {gpu: [cpu], mpi: [gloo], gpus: [1, 2]}
"""
REGISTERED = {"BENCH_WORKLOADS": "tests.workloads.regression", "PYTHONPATH": str(ROOT)}


def test_a_workload_registered_outside_bench_is_planned_run_stored_and_reported(tmp_path):
    (tmp_path / "m.yaml").write_text(MATRIX, encoding="utf-8")
    plan = bench_cli("plan", "m.yaml", cwd=tmp_path, env=REGISTERED)
    assert plan.returncode == 0 and "2 cells, 2 planned" in plan.stdout, plan.stdout + plan.stderr
    assert "cpu/regression-test:pytorch+ddp/gloo/ib=off/2w" in plan.stdout
    run = bench_cli("run", "m.yaml", cwd=tmp_path, env=REGISTERED, timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert len(re.findall(r"^ok .* [\d,.]+ rows/s", out, re.M)) == 2 and "img/s" not in out
    with sqlite3.connect(tmp_path / "results" / "bench.db") as conn:
        rows = conn.execute("SELECT status, sample_unit, rate_unit, units_per_sample, samples_per_sec, world_size "
                            "FROM records").fetchall()
    assert len(rows) == 6 and {r[:4] for r in rows} == {("ok", "row", "rows/s", 1)}
    assert all(r[4] > 0 for r in rows) and {r[5] for r in rows} == {1, 2}
    status = bench_cli("status", "-v", cwd=tmp_path, env=REGISTERED)
    assert status.returncode == 0 and re.search(r"2w .*: measured [\d,.]+ rows/s, expected", status.stdout), \
        status.stdout + status.stderr
    report = bench_cli("report", cwd=tmp_path, env=REGISTERED)
    assert report.returncode == 0, report.stderr
    md = (tmp_path / "reports" / "summary.md").read_text()
    [section] = [s for s in re.split(r"^## ", md, flags=re.M) if s.startswith("Linear regression (rows/s)")]
    assert len(re.findall(r"^\| cpu/regression-test:pytorch\+ddp", section, re.M)) == 2
    assert re.search(r"\| [\d,.]+ rows/s \|", section) and "| rows/s per worker |" in section


def test_without_the_registration_the_model_is_unknown(tmp_path):
    (tmp_path / "m.yaml").write_text(MATRIX, encoding="utf-8")
    plan = bench_cli("plan", "m.yaml", cwd=tmp_path, env={"BENCH_WORKLOADS": ""})
    assert plan.returncode == 2 and "unknown model 'regression-test'" in plan.stderr
    assert len(plan.stderr.strip().splitlines()) == 1


def test_a_registration_missing_a_key_names_it():
    import types

    from models.registry import workloads

    fake = types.ModuleType("fake_workloads")
    fake.WORKLOADS = {"half-done": {"script": "x.py", "version": "1"}}
    import sys

    sys.modules["fake_workloads"] = fake
    try:
        with pytest.raises(ValueError, match="fake_workloads's workload 'half-done' lacks frameworks, engines"):
            workloads.load_plugins("fake_workloads")
    finally:
        del sys.modules["fake_workloads"]
    assert "half-done" not in workloads.MODEL_WORKLOADS
