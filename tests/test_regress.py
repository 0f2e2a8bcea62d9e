"""Regression verdicts (bench/analysis/regress.py), baselines (bench/checks/baseline.py) and `bench check` exit
codes."""
import itertools
import json
import math
import random

import numpy as np
import pandas as pd
import pytest

from bench.analysis import AnalysisError
from bench.analysis.regress import (CheckSettings, compare, mann_whitney, normalize_ratio_to, observations,
                                    ratio_interval, verdict)
from bench.cells.selection import parse_selection
from bench.core.errors import BenchInputError
from bench.planning.matrix import CELL_KEYS
from bench.records.schema import parse_record
from bench.store import Store
from tests.conftest import bench_cli
from tests.factories import cell as make_cell
from tests.factories import record

# --- synthetic window-level frames ------------------------------------------------------------------------------

def windows(rates_by_cell: dict[int, list[list[float]]], run_id="r1") -> pd.DataFrame:
    """{gpus: [[job0 window rates], [job1 ...], ...]} → window-level rows like a store run gives."""
    rows = []
    for gpus, jobs in rates_by_cell.items():
        c = make_cell(gpus=gpus)
        for job, rates in enumerate(jobs):
            for repeat, rate in enumerate(rates):
                rows.append({"cell_id": f"cell{gpus}", **c, "run_id": run_id, "job": job, "repeat": repeat,
                             "status": "ok", "samples_per_sec": rate})
    return pd.DataFrame(rows)


def jobs_around(center: float, n: int = 5, spread: float = 0.01, seed: int = 0) -> list[list[float]]:
    rng = random.Random(seed)
    return [[center * (1 + rng.uniform(-spread, spread)) for _ in range(3)] for _ in range(n)]


def check(base: dict, cand: dict, **settings) -> pd.DataFrame:
    return compare(observations(windows(base, "b")), observations(windows(cand, "c")), CheckSettings(**settings))


def verdict_of(result: pd.DataFrame, gpus: int) -> str:
    return result.set_index("gpus").loc[gpus, "verdict"]


def test_clear_regression_and_clear_improvement():
    result = check({1: jobs_around(100, seed=1), 2: jobs_around(200, seed=2)},
                   {1: jobs_around(80, seed=3), 2: jobs_around(240, seed=4)})
    assert verdict_of(result, 1) == "regressed"
    assert verdict_of(result, 2) == "improved"
    row = result.set_index("gpus").loc[1]
    assert row["ratio"] == pytest.approx(0.8, rel=0.03)
    assert row["ci_low"] <= row["ratio"] <= row["ci_high"] < 0.95
    assert row["p_value"] == pytest.approx(1 / math.comb(10, 5))  # complete separation, 5 vs 5 jobs
    assert row["basis"] == "jobs" and row["n_baseline"] == row["n_candidate"] == 5


def test_noise_only_is_unchanged_and_wide_noise_is_inconclusive():
    quiet = check({1: jobs_around(100, seed=5)}, {1: jobs_around(100.5, seed=6)})
    assert verdict_of(quiet, 1) == "unchanged"
    noisy = check({1: jobs_around(100, spread=0.3, seed=7)}, {1: jobs_around(100, spread=0.3, seed=8)})
    assert verdict_of(noisy, 1) == "inconclusive"


def test_a_significant_change_smaller_than_the_minimum_effect_is_not_a_regression():
    base, cand = {1: jobs_around(100, spread=0.002, seed=9)}, {1: jobs_around(98, spread=0.002, seed=10)}
    result = check(base, cand)
    assert result["p_value"].iloc[0] < 0.01
    assert verdict_of(result, 1) == "unchanged"  # 2% slower, and surely within ±5%
    assert verdict_of(check(base, cand, min_effect=0.01), 1) == "regressed"


def test_one_job_uses_the_windows_and_says_so():
    base = {1: [[100, 101, 99, 100, 102]]}
    cand = {1: [[80, 81, 79, 80, 82]]}
    row = check(base, cand).iloc[0]
    assert row["basis"] == "windows" and row["n_baseline"] == 5
    assert "one job" in row["note"]
    assert row["verdict"] == "regressed"


def test_too_few_observations_and_missing_cells_are_insufficient_data():
    result = check({1: jobs_around(100, n=2), 2: jobs_around(100), 4: jobs_around(100)},
                   {1: jobs_around(50, n=2), 2: jobs_around(100), 8: jobs_around(100)})
    by = result.set_index("gpus")
    assert by.loc[1, "verdict"] == "insufficient-data"  # 2 vs 2 jobs, however large the drop
    assert by.loc[4, "verdict"] == "insufficient-data" and by.loc[4, "note"] == "not in the candidate"
    assert by.loc[8, "verdict"] == "insufficient-data" and by.loc[8, "note"] == "not in the baseline"
    assert by.loc[2, "verdict"] in ("unchanged", "inconclusive")
    assert len(result) == 4


def test_no_overlap_is_an_error():
    with pytest.raises(AnalysisError, match="no overlapping cells"):
        check({1: jobs_around(100)}, {2: jobs_around(100)})


def test_failed_windows_are_not_observations():
    frame = windows({1: jobs_around(100)})
    frame.loc[0, "status"] = "failed"
    frame.loc[0, "samples_per_sec"] = float("nan")
    obs = observations(frame)
    assert len(obs) == 5 and obs["samples_per_sec"].notna().all()


# --- the statistics against brute force -------------------------------------------------------------------------

def brute_force_p(b, c):
    """Enumerate every split of the pooled values: P(candidate rank sum <= / >= observed), midranks for ties."""
    pooled = list(c) + list(b)
    ranks = pd.Series(pooled).rank().to_numpy()
    w = ranks[:len(c)].sum()
    sums = [ranks[list(idx)].sum() for idx in itertools.combinations(range(len(pooled)), len(c))]
    return (np.mean([s <= w + 1e-9 for s in sums]), np.mean([s >= w - 1e-9 for s in sums]))


@pytest.mark.parametrize("seed", range(12))
def test_exact_mann_whitney_matches_enumeration(seed):
    rng = random.Random(seed)
    m, n = rng.randint(2, 6), rng.randint(2, 6)
    b = [rng.choice([1.0, 2.0, 3.0, rng.random()]) for _ in range(n)]  # ties on purpose, some seeds
    c = [rng.choice([1.0, 2.0, 3.0, rng.random()]) for _ in range(m)]
    assert mann_whitney(np.array(b), np.array(c)) == pytest.approx(brute_force_p(b, c))


def test_interval_coverage_for_three_against_three_is_ninety_percent_and_holds():
    low, high, coverage = ratio_interval(np.array([1.0, 1.1, 1.2]), np.array([1.0, 1.05, 1.3]))
    assert coverage == pytest.approx(0.9)
    assert (low, high) == pytest.approx((1.0 / 1.2, 1.3 / 1.0))
    rng = np.random.default_rng(3)
    hits = 0
    for _ in range(1000):
        b = rng.lognormal(0, 0.1, 6)
        c = rng.lognormal(0, 0.1, 6) * 0.9
        lo, hi, cov = ratio_interval(b, c)
        hits += lo <= 0.9 <= hi
    assert cov >= 0.95 and hits / 1000 >= 0.94


def test_false_alarms_on_pure_noise_stay_under_alpha():
    rng = np.random.default_rng(11)
    settings = CheckSettings()
    alarms = 0
    for i in range(2000):
        b, c = rng.normal(100, 8, 5), rng.normal(100, 8, 5)
        p_slower, p_faster = mann_whitney(b, c)
        alarms += verdict(5, 5, float(np.median(c) / np.median(b)), 0.0, 2.0, p_slower, p_faster,
                          settings) == "regressed"
    # The exact 5-vs-5 test at 0.05 rejects with probability 12/252 = 0.048 under no change; allow sampling noise
    # (3 standard errors over 2000 draws), no more.
    assert alarms / 2000 <= 0.048 + 3 * math.sqrt(0.048 * 0.952 / 2000)
    assert alarms > 0  # and it is a real test: the level is used, not avoided


# --- normalisation ----------------------------------------------------------------------------------------------

def test_ratio_to_a_reference_cell_cancels_a_machine_twice_as_fast():
    base = observations(windows({1: jobs_around(50, seed=1), 2: jobs_around(90, seed=2)}, "b"))
    cand = observations(windows({1: jobs_around(100, seed=3), 2: jobs_around(180, seed=4)}, "c"))
    assert set(compare(base, cand)["verdict"]) == {"improved"}
    sel = parse_selection("gpus=1")
    result = compare(normalize_ratio_to(base, sel), normalize_ratio_to(cand, sel))
    assert list(result["gpus"]) == [2]  # the reference itself is not judged
    assert result["verdict"].iloc[0] == "unchanged"
    assert result["candidate_median"].iloc[0] == pytest.approx(1.8, rel=0.03)


def test_the_reference_is_its_fastest_window_so_a_disturbed_reference_job_does_not_move_the_others():
    quiet = {1: [[50, 50.5, 49.5]] * 3, 2: jobs_around(90, seed=2)}
    disturbed = {1: [[50, 50.5, 49.5], [20, 25, 22], [49, 50, 48]], 2: jobs_around(90, seed=2)}
    sel = parse_selection("gpus=1")
    a = normalize_ratio_to(observations(windows(quiet, "a")), sel)
    b = normalize_ratio_to(observations(windows(disturbed, "b")), sel)
    assert a["samples_per_sec"].tolist() == pytest.approx(b["samples_per_sec"].tolist())
    assert a["samples_per_sec"].tolist() == pytest.approx([x / 50.5 for x in
                                                          observations(windows(quiet))["samples_per_sec"][3:]])


def test_selections():
    assert parse_selection("gpus=1,mpi=gloo") == {"gpus": [1], "mpi": ["gloo"]}
    assert parse_selection("abc123") == {"cell_id": ["abc123"]}
    # a layout keeps its own commas, alternatives and the terms after it stay apart
    assert parse_selection("layout=tp=2|pp=2,schedule=1f1b,m=4,mpi=gloo") == {
        "layout": ["tp=2", "pp=2,schedule=1f1b,m=4"], "mpi": ["gloo"]}
    with pytest.raises(BenchInputError):  # outside a layout a piece that is no key stays an error
        parse_selection("mpi=gloo,schedule=1f1b")
    for bad in ("gpu=", "nosuchkey=1", "gpus=one"):
        with pytest.raises(BenchInputError):
            parse_selection(bad, "--normalize")
    obs = observations(windows({1: jobs_around(50), 2: jobs_around(90)}))
    with pytest.raises(AnalysisError, match="no cell matches 'gpus=4'"):
        normalize_ratio_to(obs, {"gpus": [4]})
    with pytest.raises(AnalysisError, match="matches 2 cells"):
        normalize_ratio_to(obs, {"gpu": ["cpu"]})
    # alternatives and typed values: gpus=1|2 names both cells, ib=off every cell (stored as False)
    with pytest.raises(AnalysisError, match="'gpus=1|2' matches 2 cells"):
        normalize_ratio_to(obs, parse_selection("gpus=1|2"))
    assert len(normalize_ratio_to(obs, parse_selection("gpus=1,ib=off"))) > 0


# --- the real CLI on a real store -------------------------------------------------------------------------------

def store_run(store: Store, run_id: str, scales: dict[int, list[float]]):
    """Records from the worker-side meter: per cell (gpus), one job per scale, three windows each."""
    store.begin_run(run_id, matrix_name="t", matrix_path="m.yaml", backend="local", host="h", bench_version="0",
                    plan={})
    for gpus, job_scales in scales.items():
        for job, scale in enumerate(job_scales):
            for repeat in range(3):
                data = record(run_id=run_id, repeat=repeat, rate_scale=scale * (1 + 0.002 * repeat), gpus=gpus,
                              jobs=len(job_scales))
                store.write(parse_record({**data, "job": job}))
    store.finish_run(run_id)


@pytest.fixture
def real_store(tmp_path):
    path = tmp_path / "results" / "bench.db"
    with Store(path) as store:
        store_run(store, "base", {1: [1.0, 1.01, 0.99, 1.0, 1.005], 2: [1.0, 1.01, 0.99, 1.0, 1.005]})
        store_run(store, "same", {1: [1.0, 0.995, 1.006, 1.002, 0.998], 2: [1.003, 0.997, 1.0, 1.001, 0.999]})
        store_run(store, "slow", {1: [1.0, 0.995, 1.006, 1.002, 0.998], 2: [0.8, 0.79, 0.81, 0.8, 0.805]})
    return tmp_path


@pytest.mark.slow
def test_check_exit_codes_on_a_real_store(real_store):
    d = real_store
    ok = bench_cli("check", "--baseline", "base", "--candidate", "same", cwd=d)
    assert ok.returncode == 0, ok.stderr
    assert "0 regressed" in ok.stdout and "2 unchanged" in ok.stdout
    slow = bench_cli("check", "--baseline", "run:base", "--candidate", "slow", cwd=d)
    assert slow.returncode == 1, slow.stderr
    assert "1 regressed" in slow.stdout and "regressed" in slow.stdout
    latest = bench_cli("check", "--baseline", "base", cwd=d)  # candidate defaults to the latest run: "slow"
    assert latest.returncode == 1 and "run slow (latest)" in latest.stdout.replace("\n", " ")
    # Normalised by the 1-worker cell of the same run: the 2-worker cell's 20% drop is still there.
    norm = bench_cli("check", "--baseline", "base", "--candidate", "slow", "--normalize", "ratio-to:gpus=1", cwd=d)
    assert norm.returncode == 1 and "1 cells: 1 regressed" in norm.stdout
    # A 25% minimum effect lets a 20% drop through.
    assert bench_cli("check", "--baseline", "base", "--candidate", "slow", "--min-effect", "0.25",
                     cwd=d).returncode == 0


@pytest.mark.parametrize("args, message", [
    (["--baseline", "nosuch"], "unknown run"),
    (["--baseline", "base", "--candidate", "nosuch"], "unknown run"),
    (["--baseline", "base", "--normalize", "ratio-to:gpus=4"], "no cell matches"),
    (["--baseline", "base", "--normalize", "bogus"], "--normalize"),
    (["--baseline", "base", "--min-effect", "5"], "--min-effect"),
])
def test_bad_input_is_one_line_and_exit_2(real_store, args, message):
    r = bench_cli("check", *args, cwd=real_store)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr


@pytest.mark.slow
def test_empty_store_missing_store_and_no_overlap_exit_2(tmp_path):
    Store(tmp_path / "empty.db").close()
    r = bench_cli("check", "--baseline", "latest", "--store", "empty.db", cwd=tmp_path)
    assert r.returncode == 2 and "no runs" in r.stderr and len(r.stderr.splitlines()) == 1
    r = bench_cli("check", "--baseline", "latest", "--store", "missing.db", cwd=tmp_path)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    with Store(tmp_path / "b.db") as store:
        store_run(store, "a", {1: [1.0, 1.0, 1.0]})
        store_run(store, "b", {2: [1.0, 1.0, 1.0]})
    r = bench_cli("check", "--baseline", "a", "--candidate", "b", "--store", "b.db", cwd=tmp_path)
    assert r.returncode == 2 and "no overlapping cells" in r.stderr and len(r.stderr.splitlines()) == 1


@pytest.mark.slow
def test_baseline_save_list_and_check_round_trip(real_store):
    d = real_store
    saved = bench_cli("baseline", "save", "main", "--run", "base", cwd=d)
    assert saved.returncode == 0, saved.stderr
    doc = json.loads((d / "baselines" / "main.json").read_text())
    assert doc["format"] == "bench-baseline" and doc["name"] == "main" and doc["runs"][0]["run_id"] == "base"
    assert doc["host"] and doc["bench_version"] and doc["created"]
    assert len(doc["cells"]) == 2 and all(set(c["cell"]) == set(CELL_KEYS) for c in doc["cells"])
    assert [len(c["jobs"]) for c in doc["cells"]] == [5, 5]
    job = doc["cells"][0]["jobs"][0]
    assert job["samples_per_sec"] == pytest.approx(sorted(job["windows"])[1])  # the median of three windows
    # The same verdicts from the file as from the run it was made of.
    from_file = bench_cli("check", "--baseline", "main", "--candidate", "slow", cwd=d)
    from_run = bench_cli("check", "--baseline", "base", "--candidate", "slow", cwd=d)
    assert from_file.returncode == from_run.returncode == 1
    assert from_file.stdout.splitlines()[-1] == from_run.stdout.splitlines()[-1]
    # Pooling two runs, and saving `latest` (the default).
    assert bench_cli("baseline", "save", "pooled", "--run", "base", "--run", "same", cwd=d).returncode == 0
    pooled = json.loads((d / "baselines" / "pooled.json").read_text())
    assert [len(c["jobs"]) for c in pooled["cells"]] == [10, 10]
    assert bench_cli("baseline", "save", "last", cwd=d).returncode == 0
    assert json.loads((d / "baselines" / "last.json").read_text())["runs"][0]["run_id"] == "slow"
    listed = bench_cli("baseline", "list", cwd=d)
    assert listed.returncode == 0
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert names == ["last", "main", "pooled"]
    assert "10 jobs" in listed.stdout and "20 jobs" in listed.stdout
    bad_name = bench_cli("baseline", "save", "../x", cwd=d)
    assert bad_name.returncode == 2 and "bad baseline name" in bad_name.stderr


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"format": "something-else"}', "not a bench baseline"),
    ('{"format": "bench-baseline", "format_version": 1, "cells": []}', "non-empty list"),
    ('{"format": "bench-baseline", "format_version": 1, "cells": [{"cell_id": "x", "cell": {"gpu": "cpu"}, '
     '"jobs": [{"run_id": "r", "job": 0, "samples_per_sec": 1.0, "windows": [-1.0]}]}]}', "positive numbers"),
    ('{"format": "bench-baseline", "format_version": 1, "cells": [{"cell_id": "x", "cell": {"gpu": "cpu"}, '
     '"jobs": [{"run_id": "r", "job": 0, "samples_per_sec": NaN, "windows": [1.0]}]}]}', "not valid JSON"),
])
@pytest.mark.slow
def test_corrupt_baseline_is_one_line_and_exit_2(real_store, content, message):
    d = real_store
    (d / "baselines").mkdir(exist_ok=True)
    (d / "baselines" / "broken.json").write_text(content)
    r = bench_cli("check", "--baseline", "broken", "--candidate", "same", cwd=d)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "corrupt baseline" in r.stderr and message in r.stderr
    listed = bench_cli("baseline", "list", cwd=d)
    assert listed.returncode == 0 and "broken" in listed.stdout and "unreadable" in listed.stdout


@pytest.mark.slow
def test_truncated_copy_of_a_real_baseline_is_corrupt(real_store):
    d = real_store
    assert bench_cli("baseline", "save", "main", "--run", "base", cwd=d).returncode == 0
    path = d / "baselines" / "main.json"
    path.write_text(path.read_text()[:200])
    r = bench_cli("check", "--baseline", "main", "--candidate", "same", cwd=d)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "corrupt baseline" in r.stderr
