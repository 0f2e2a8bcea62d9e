"""`bench check` with one run a side (bench/analysis/regress.py between_runs): the windows of one run say nothing
about the next run, so the noise between runs (RUN_NOISE) is added, and the cells so judged share one false-alarm
rate. An unchanged re-run's usual difference is not a regression; a large drop is; a GPU cell's 8% is."""
import random

import numpy as np
import pandas as pd

from bench.analysis.regress import RUN_NOISE, CheckSettings, between_runs, compare, observations
from tests.factories import cell as make_cell


def one_run(rates_by_cell: dict[str, tuple[str, list[float]]], run_id: str) -> pd.DataFrame:
    rows = []
    for cell_id, (gpu, rates) in rates_by_cell.items():
        c = make_cell(gpus=2, gpu=gpu)
        for repeat, rate in enumerate(rates):
            rows.append({"cell_id": cell_id, **c, "run_id": run_id, "job": 0, "repeat": repeat, "status": "ok",
                         "samples_per_sec": rate})
    return pd.DataFrame(rows)


def windows_at(center: float, seed: int, spread: float = 0.01) -> list[float]:
    rng = random.Random(seed)
    return [center * (1 + rng.uniform(-spread, spread)) for _ in range(5)]


def verdicts(base: dict, cand: dict) -> dict[str, str]:
    result = compare(observations(one_run(base, "b")), observations(one_run(cand, "c")), CheckSettings())
    return dict(zip(result["cell_id"], result["verdict"]))


def test_an_unchanged_cpu_cell_a_run_apart_is_not_regressed():
    # 9% slower, tight windows: the Mann-Whitney test on windows alone calls this regressed (p = 0.004)
    v = verdicts({"a": ("cpu", windows_at(45.9, 1))}, {"a": ("cpu", windows_at(41.8, 2))})
    assert v["a"] != "regressed"


def test_a_large_cpu_drop_and_a_gpu_cells_8_percent_are_regressed():
    v = verdicts({"a": ("cpu", windows_at(45.9, 1)), "g": ("H100", windows_at(2400, 3))},
                 {"a": ("cpu", windows_at(23.6, 2)), "g": ("H100", windows_at(2200, 4))})
    assert v == {"a": "regressed", "g": "regressed"}


def test_the_cells_share_one_false_alarm_rate():
    # 20 unchanged CPU cells whose second run drew the between-run noise: over 50 such checks, at most a few fail
    rng = np.random.default_rng(7)
    failed = 0
    for trial in range(50):
        base, cand = {}, {}
        for i in range(20):
            shift = float(np.exp(rng.normal(0, RUN_NOISE["cpu"] * np.sqrt(2))))
            base[f"c{i}"] = ("cpu", windows_at(40.0, 100 * trial + i))
            cand[f"c{i}"] = ("cpu", windows_at(40.0 * shift, 100 * trial + i + 50))
        failed += "regressed" in verdicts(base, cand).values()
    assert failed <= 5  # alpha = 0.05 over the family: ~2.5 expected at most, one-sided


def test_the_interval_widens_with_the_noise_between_runs():
    b, c = np.array(windows_at(40, 1)), np.array(windows_at(40, 2))
    _, _, lo0, hi0, _ = between_runs(b, c, 0.0, 0.95)
    _, _, lo1, hi1, _ = between_runs(b, c, RUN_NOISE["cpu"], 0.95)
    assert lo1 < lo0 < 1 < hi0 < hi1
