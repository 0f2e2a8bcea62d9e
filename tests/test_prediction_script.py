"""benchmarks/prediction_shaped.py without the cluster: with --sweep-once the later rounds measure the very training
cells the first round did (same ids, no collective cell), each round with a sweep of its own is predicted from it,
and bad arguments get one line and exit 2 before anything runs."""
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cell import cell_id
from bench.matrix import load_matrix
from bench.record import parse_record
from bench.store import Store
from benchmarks.prediction_shaped import MATRIX, compare_condition, markdown, training_matrix
from models.registry import COLLECTIVES
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
