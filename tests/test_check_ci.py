"""The CI regression check: run the small CPU matrix (ci/matrix-cpu.yaml) for real and check it against the
committed baseline (baselines/ci-cpu.json), normalised by the 1-worker cell of the same run so that a CI machine
faster or slower than the one the baseline was made on does not matter. Unchanged tree: no regression (exit 0). The
same real run, saved as a baseline, against itself with the 2-worker cell at a quarter of its speed: caught (exit 1).
How often this check cries wolf, and what it catches, is measured in docs/regression-checks.md."""
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, bench_cli

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

MATRIX = ROOT / "ci" / "matrix-cpu.yaml"
BASELINE = ROOT / "baselines" / "ci-cpu.json"
# What CI runs; docs/regression-checks.md says why these (false alarms measured against detection).
SLOWED = 0.25  # the 2-worker cell at a quarter of its speed: caught whatever the load (docs/regression-checks.md)
CHECK = ["--baseline", str(BASELINE), "--normalize", "ratio-to:gpus=1", "--min-effect", "0.30"]


@pytest.fixture(scope="module")
def ci_run():
    d = Path(tempfile.mkdtemp(prefix="bench-ci-check-"))
    # --no-probe: the check compares the 2-worker cell with the 1-worker one of the same run, not with an expected
    # value, so the 2-worker cell's compute and engine probes (and their re-probes) would only add to its time
    run = bench_cli("run", str(MATRIX), "--store", "results/ci.db", "--no-probe", cwd=d, timeout=1200)
    yield d, run
    shutil.rmtree(d, ignore_errors=True)


def test_the_committed_baseline_is_readable_and_matches_the_ci_matrix():
    listed = bench_cli("baseline", "list", "--baselines-dir", str(BASELINE.parent), cwd=ROOT)
    assert listed.returncode == 0 and "ci-cpu" in listed.stdout and "unreadable" not in listed.stdout
    plan = bench_cli("plan", str(MATRIX), "--format", "json", cwd=ROOT)
    import json

    planned = {c["cell_id"] for c in json.loads(plan.stdout) if c["status"] == "planned"}
    baseline = {c["cell_id"] for c in json.loads(BASELINE.read_text())["cells"]}
    assert planned == baseline, "ci/matrix-cpu.yaml changed: make a new baseline (docs/regression-checks.md)"


def test_unchanged_tree_passes_the_check(ci_run):
    d, run = ci_run
    assert run.returncode == 0, run.stderr[-3000:]
    check = bench_cli("check", *CHECK, "--store", "results/ci.db", cwd=d)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "0 regressed" in check.stdout.splitlines()[-1]


def test_a_slower_two_worker_cell_is_caught(ci_run):
    # Against this very run saved as a baseline: the load the run saw is then the same on both sides, so the
    # verdict rests on the slowdown alone (against the committed baseline, load swings of 2-4x on a shared machine
    # make the size of what is caught vary; docs/regression-checks.md measures that).
    d, run = ci_run
    assert run.returncode == 0, run.stderr[-3000:]
    saved = bench_cli("baseline", "save", "this-run", "--store", "results/ci.db", "-o", str(d / "this-run.json"),
                      cwd=d)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    slowed = d / "results" / "slowed.db"
    with sqlite3.connect(d / "results" / "ci.db") as src, sqlite3.connect(slowed) as dst:
        src.backup(dst)
        # The run as it would be with the 2-worker cell at SLOWED of its speed.
        assert dst.execute("UPDATE records SET samples_per_sec = samples_per_sec * ? WHERE gpus = 2",
                           (SLOWED,)).rowcount
    check = bench_cli("check", "--baseline", str(d / "this-run.json"), *CHECK[2:], "--store", str(slowed), cwd=d)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "1 regressed" in check.stdout.splitlines()[-1]
