"""Check speed: `bench check` over 10,000 cells must decide in ≤ 5 s (issue 5).

Measured: window-level rows of both sides (10,000 cells × 3 jobs × 3 windows each) → observations → verdicts, i.e.
everything `check` does after reading its two sources. Run: make bench (or .venv/bin/python -m pytest
benchmarks/test_check_speed.py --benchmark-only)
"""
import numpy as np
import pandas as pd

from bench.analysis.regress import compare, observations
from tests.factories import cell as make_cell

CELLS, JOBS, WINDOWS = 10_000, 3, 3


def side(run_id: str, slowdown: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    settings = make_cell()
    n = CELLS * JOBS * WINDOWS
    cell_index = np.repeat(np.arange(CELLS), JOBS * WINDOWS)
    rates = 100.0 * (1 + cell_index % 7) * rng.normal(1.0, 0.02, n)
    rates[cell_index % 10 == 0] *= slowdown  # every tenth cell slower on this side
    frame = pd.DataFrame({"cell_id": [f"{i:012x}" for i in cell_index], "run_id": run_id,
                          "job": np.tile(np.repeat(np.arange(JOBS), WINDOWS), CELLS),
                          "repeat": np.tile(np.arange(WINDOWS), CELLS * JOBS), "status": "ok",
                          "samples_per_sec": rates})
    for key, value in settings.items():
        frame[key] = value
    frame["batch_per_gpu"] = cell_index  # cells differ in a setting, like a real matrix
    return frame


def check_10k(base: pd.DataFrame, cand: pd.DataFrame) -> pd.DataFrame:
    return compare(observations(base), observations(cand))


def test_check_10k_cells(benchmark):
    base, cand = side("base", 1.0, 1), side("cand", 0.7, 2)
    result = benchmark.pedantic(check_10k, args=(base, cand), rounds=3, iterations=1)
    assert len(result) == CELLS
    counts = result["verdict"].value_counts()
    assert counts["regressed"] == CELLS // 10  # the slowed cells, and only they
    assert benchmark.stats.stats.median <= 5.0


def test_check_verb_10k_cells_from_baseline_files(benchmark, tmp_path, capsys):
    """The whole verb minus the interpreter's start: two 10,000-cell baseline files read, validated, compared,
    the table and summary printed."""
    import argparse

    from bench.checks.baseline import build_baseline, save_baseline
    from bench.commands.check import run as cmd_check

    for name, slowdown, seed in (("a", 1.0, 1), ("b", 0.7, 2)):
        save_baseline(build_baseline(name, side(name, slowdown, seed), []), tmp_path / f"{name}.json")
    args = argparse.Namespace(baseline=str(tmp_path / "a.json"), candidate=str(tmp_path / "b.json"),
                              store=str(tmp_path / "none.db"), baselines_dir=str(tmp_path), min_effect=0.05,
                              normalize="none", all=False)
    code = benchmark.pedantic(cmd_check, args=(args,), rounds=3, iterations=1)
    assert code == 1
    assert f"{CELLS} cells: {CELLS // 10} regressed" in capsys.readouterr().out
    assert benchmark.stats.stats.median <= 5.0
