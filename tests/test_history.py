"""History and change points: the pure detector (bench/analysis/history.py) on seeded series, and `bench history`
and the report's history section on a real store of 12 runs (written through the Store API, records from the
worker-side meter) in which one cell drops 20% from run 7, when torch's recorded version changes, and the other
cell stays flat."""
import math
import random
import re

import pytest

from bench.analysis.history import change_points
from bench.records.schema import parse_record
from bench.store import Store
from tests.conftest import bench_cli
from tests.factories import record

N_RUNS, STEP_AT = 12, 6  # 0-based: the 7th run is the first at the new level


def noisy(n, sd, seed, step_at=None, step=1.0):
    rng = random.Random(seed)
    return [20 * math.exp(rng.gauss(0, sd)) * (step if step_at is not None and i >= step_at else 1.0)
            for i in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_a_planted_step_is_found_at_the_right_run(seed):
    values = noisy(N_RUNS, 0.02, seed, STEP_AT, 0.8)
    (cp,) = change_points(values, [f"r{i}" for i in range(N_RUNS)])
    assert cp.index == STEP_AT and (cp.run_before, cp.run_after) == ("r5", "r6")
    assert cp.ratio == pytest.approx(0.8, abs=0.03)


@pytest.mark.parametrize("seed", range(5))
def test_a_flat_series_has_no_change_point(seed):
    assert change_points(noisy(N_RUNS, 0.02, seed)) == []


def test_short_or_constant_series():
    assert change_points([10, 11, 9]) == []
    assert change_points([10.0] * 12) == []
    (cp,) = change_points([10.0] * 6 + [12.0] * 6)
    assert cp.index == 6


def test_a_step_below_the_minimum_shift_is_not_reported():
    values = [20.0, 20.02, 19.98, 20.01, 19.99, 20.0, 19.4, 19.42, 19.38, 19.41, 19.39, 19.4]  # 3% step, no noise
    assert change_points(values) == []
    assert len(change_points(values, min_shift=0.02)) == 1


@pytest.fixture(scope="module")
def history_store(tmp_path_factory):
    d = tmp_path_factory.mktemp("history")
    rng = random.Random(7)
    with Store(d / "results" / "bench.db") as store:
        for i in range(N_RUNS):
            run_id = f"run{i:02d}"
            store.begin_run(run_id, matrix_name="t", matrix_path="m.yaml", backend="local", host="h",
                            bench_version="0.1.0", plan={})
            torch = "2.14.0" if i >= STEP_AT else "2.13.0"
            for gpus in (1, 2):
                slower = 0.8 if gpus == 1 and i >= STEP_AT else 1.0
                for repeat in range(3):
                    data = record(run_id=run_id, repeat=repeat, rate_scale=slower * math.exp(rng.gauss(0, 0.015)),
                                  gpus=gpus)
                    start = 1_700_000_000 + 3600 * i + 10 * repeat
                    data.update(start_unix=start, end_unix=start + 2, env_probe={"packages": {"torch": torch}})
                    store.write(parse_record(data))
            store.finish_run(run_id)
    return d


@pytest.mark.slow  # real bench processes (and a whole report) on the store
def test_bench_history_finds_the_step_and_says_what_changed(history_store):
    r = bench_cli("history", cwd=history_store)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.count("change point at run") == 1, out
    assert f"change point at run {STEP_AT + 1} of {N_RUNS} (run{STEP_AT:02d}" in out
    assert f"after run run{STEP_AT - 1:02d}" in out and "(0.80×)" in out
    assert "what changed: package torch: 2.13.0 → 2.14.0" in out
    # One table line per cell (the title names what they share): the flat 2-worker cell has no change point.
    rows = {line.split()[1]: line for line in out.splitlines() if re.match(r"^[0-9a-f]{12} ", line)}
    assert set(rows) == {"1w", "2w"}
    assert rows["2w"].endswith(" none") and rows["1w"].endswith(f" 0.80× at run {STEP_AT + 1}")
    assert "1 change points" in out.splitlines()[-1]


@pytest.mark.slow  # real bench processes (and a whole report) on the store
def test_bench_history_bad_input(history_store, tmp_path):
    assert bench_cli("history", "--min-shift", "2", cwd=history_store).returncode == 2
    r = bench_cli("history", "--store", str(tmp_path / "none.db"), cwd=history_store)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # real bench processes (and a whole report) on the store
def test_the_report_shows_the_history_with_the_change_point(history_store, tmp_path):
    r = bench_cli("report", "--out", str(tmp_path / "rep"), cwd=history_store, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    md = (tmp_path / "rep" / "summary.md").read_text()
    assert "Throughput over runs" in md
    rows = [line for line in md.splitlines() if line.startswith("|") and "run05" in line]
    assert len(rows) == 1, md
    assert f"{STEP_AT + 1} of {N_RUNS}" in rows[0] and "run06" in rows[0] and "0.80×" in rows[0]
    assert "package torch: 2.13.0 → 2.14.0" in rows[0]
    assert (tmp_path / "rep" / "history-0.png").stat().st_size > 1000
