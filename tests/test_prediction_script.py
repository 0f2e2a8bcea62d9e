"""benchmarks/prediction_shaped.py without the cluster: the later rounds measure the very training cells the first
round did (same ids, no collective cell), and bad arguments get one line and exit 2 before anything runs."""
import subprocess
import sys
from pathlib import Path

from bench.cell import cell_id
from bench.matrix import load_matrix
from benchmarks.prediction_shaped import MATRIX, training_matrix
from models.registry import COLLECTIVES

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
