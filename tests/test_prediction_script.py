"""benchmarks/prediction_shaped.py without the cluster: with --sweep-once the later rounds measure the very training
cells the first round did (same ids, no collective cell), each round with a sweep of its own is predicted from it,
and bad arguments get one line and exit 2 before anything runs."""
import subprocess
import sys
from pathlib import Path

import pytest

from bench.planning.cell import cell_id
from bench.planning.matrix import load_matrix
from bench.records.schema import parse_record
from bench.store import Store
from benchmarks.prediction_shaped import MATRIX, compare_condition, markdown, step_parts, training_matrix
from models.registry.collectives import COLLECTIVES
from tests.factories import record
from tests.report_stores import sweep_record

ROOT = Path(__file__).resolve().parent.parent


def test_the_training_rounds_measure_the_same_training_cells(tmp_path):
    full = {cell_id(c) for c in load_matrix(MATRIX).cells() if c["model"] not in COLLECTIVES}
    rounds = load_matrix(training_matrix(tmp_path)).cells()
    assert full and {cell_id(c) for c in rounds} == full
    assert not [c for c in rounds if c["model"] in COLLECTIVES]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prediction_shaped.py"), *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.slow
def test_bad_arguments_get_one_line_and_exit_2(tmp_path):
    for args, says in ((["--rounds", "0"], "--rounds must be at least 1"),
                       (["--rates", "0mbit"], "is not a positive tc rate"),
                       (["--from", str(tmp_path)], f"--from {tmp_path}: no unshaped/bench.db there")):
        done = run(*args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and says in done.stderr
    assert not list(tmp_path.iterdir())  # nothing written


def write_rounds(path: Path, sweeps: dict[str, float]) -> None:
    """Two rounds (runs r1, r2) of the two launchers' series, 1 worker and 2 workers on 2 nodes, E = 0.8 in both;
    `sweeps`: run id → the link's β (bytes/s) of the allreduce sweeps measured in that round (none for a run left
    out)."""
    with Store(path) as store:
        for mpi in ("gloo", "openmpi"):
            for run in ("r1", "r2"):
                for gpus, scale in ((1, 1.0), (2, 0.8)):
                    store.write_many(parse_record({**record(run_id=run, repeat=i, rate_scale=scale, repeats=3,
                                                            gpus=gpus, mpi=mpi, workers_per_node=1), "nodes": gpus})
                                     for i in range(3))
            for run, beta in sweeps.items():
                store.write_many(parse_record({**sweep_record(run, i, 1e-3, beta, gpu="cpu", mpi=mpi,
                                                              workers_per_node=1), "nodes": 2}) for i in range(3))


def test_each_round_is_predicted_from_its_own_sweeps(tmp_path):
    # Round 1's link carried 40 MB/s, round 2's 400 MB/s: the same training, two machine states.
    write_rounds(tmp_path / "bench.db", {"r1": 40e6, "r2": 400e6})
    rows = compare_condition(tmp_path / "bench.db", "unshaped")
    assert sorted(r["mpi"] for r in rows) == ["gloo", "openmpi"]
    for row in rows:
        slow, fast = row["round_calibrated_errors"]
        assert row["round_efficiencies"] == pytest.approx([0.8, 0.8])
        assert slow <= row["calibrated_error_points"] <= fast  # the pooled fit lies within the rounds' own
        assert fast - slow > 10  # 102 MB at 40 MB/s is 2.6 s a step against 0.26 s at 400 MB/s


def test_a_round_without_a_sweep_gets_no_error_of_its_own(tmp_path):
    write_rounds(tmp_path / "bench.db", {"r1": 40e6})
    rows = compare_condition(tmp_path / "bench.db", "unshaped")
    for row in rows:
        assert len(row["round_efficiencies"]) == 2
        assert row["round_calibrated_errors"] == [pytest.approx(row["calibrated_error_points"]), None]
        assert "| " + f"{row['calibrated_error_points']:+.1f}, — |" in markdown([row])


def window(first: tuple[float, float], second: tuple[float, float], steps: int = 3) -> list[dict]:
    """One window's per_rank: each rank's (compute, wait) per step, timed over `steps` steps."""
    return [{"rank": i, "steps": steps,
             "phases_s": {"compute": c * steps, "comm_wait": w * steps, "update": 0.01 * steps}}
            for i, (c, w) in enumerate((first, second))]


def test_step_parts_takes_each_windows_slower_rank():
    # The slower rank alternates: rank by rank, both medians are 1.1 and the 0.2 s gap would vanish.
    parts = step_parts([window((1.0, 0.2), (1.2, 0.0)), window((1.2, 0.0), (1.0, 0.2)),
                        window((1.0, 0.2), (1.2, 0.0))])
    assert parts["windows"] == 3
    assert parts["slower_compute_s"] == pytest.approx(1.2) and parts["faster_compute_s"] == pytest.approx(1.0)
    assert parts["gap_s"] == pytest.approx(0.2)
    assert parts["faster_wait_s"] == pytest.approx(0.2) and parts["slower_wait_s"] == pytest.approx(0.0)
    assert parts["update_s"] == pytest.approx(0.01)


def test_step_parts_needs_two_ranks_that_timed_their_phases():
    assert step_parts([]) is None
    assert step_parts([window((1.0, 0.0), (1.0, 0.0))[:1]]) is None  # one rank
    assert step_parts([[{"rank": 0, "steps": 3, "phases_s": None}, {"rank": 1, "steps": 3}]]) is None


def test_the_table_shows_where_the_step_went():
    row = {"condition": "1500mbit", "mpi": "gloo", "step_s": 1.321, "calibrated_step_s": 1.238,
           "bucket_charged_step_s": 1.259,
           "parts": step_parts([window((1.25, 0.05), (1.28, 0.02))]), "calibrated_error_points": 5.0,
           "data_sheet_error_points": 20.0, "calibrated_comm_s": 0.6, "baseline_samples_per_sec": 32.0,
           "samples_per_sec": 48.0, "measured_efficiency": 0.75, "calibrated_efficiency": 0.8,
           "data_sheet_efficiency": 0.95, "compute_s": 0.99, "data_sheet_comm_s": 0.5, "fit": "α"}
    text = markdown([row])
    assert ("| 1500mbit | gloo/horovod | 1 | 1.321 | 1.238 | 1.259 | 1.280 / 0.020 | 1.250 / 0.050 | 0.030 | 0.010 |"
            in text)
