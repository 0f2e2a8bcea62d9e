"""Paired A/B statistics (bench/analysis/paired.py) and the side specs of `bench ab` (bench/ab/spec.py)."""
import math
import random

import pandas as pd
import pytest

from bench.ab.spec import parse_side
from bench.analysis import AnalysisError
from bench.analysis.paired import PairedSettings, detectable_slowdown, interleave, pair_values, paired_verdict, power_at
from bench.analysis.stats import t_cdf, t_quantile
from bench.core.errors import BenchInputError


@pytest.mark.parametrize("p,df,expected", [  # Student's t table values
    (0.95, 1, 6.3138), (0.95, 3, 2.3534), (0.975, 10, 2.2281), (0.90, 4, 1.5332), (0.99, 30, 2.4573),
    (0.5, 7, 0.0), (0.05, 5, -2.0150)])
def test_t_quantiles_match_the_table(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, abs=2e-4)
    assert t_cdf(expected, df) == pytest.approx(p, abs=1e-4)


def test_clear_slowdown_is_regressed_and_equal_sides_are_unchanged():
    a = [20.0, 21.0, 19.5, 20.5, 20.2]
    slow = paired_verdict(a, [x * 0.9 * (1 + 0.004 * (-1) ** i) for i, x in enumerate(a)])
    assert slow.verdict == "regressed" and slow.ratio == pytest.approx(0.9, abs=0.005)
    assert slow.ci_low < 0.9 < slow.ci_high < 1 and slow.p_slower < 0.01 and slow.level == pytest.approx(0.9)
    same = paired_verdict(a, [x * (1 + 0.004 * (-1) ** i) for i, x in enumerate(a)])
    assert same.verdict == "unchanged" and 0.95 <= same.ci_low <= 1 <= same.ci_high <= 1.05
    fast = paired_verdict(a, [x * 1.2 for x in a])
    assert fast.verdict == "improved"


def test_noisy_pairs_are_inconclusive_and_two_pairs_are_insufficient():
    assert paired_verdict([20, 20, 20, 20], [16, 24, 15, 23]).verdict == "inconclusive"
    assert paired_verdict([20, 20], [10, 10]).verdict == "insufficient-data"


def test_a_slowdown_below_the_minimum_effect_is_not_a_regression():
    a = [20.0, 20.1, 19.9, 20.0, 20.05]
    b = [x * 0.97 for x in a]
    assert paired_verdict(a, b).verdict != "regressed"
    assert paired_verdict(a, b, PairedSettings(min_effect=0.02)).verdict == "regressed"


def test_bad_input_is_an_analysis_error():
    with pytest.raises(AnalysisError, match="differ in length"):
        paired_verdict([1, 2, 3], [1, 2])
    with pytest.raises(AnalysisError, match="positive"):
        paired_verdict([1, 2, 0], [1, 2, 3])
    with pytest.raises(AnalysisError):
        PairedSettings(min_effect=1.5)


def _simulate(slowdown: float, sd: float, n: int, tries: int, seed: int) -> float:
    rng = random.Random(seed)
    hits = 0
    for _ in range(tries):
        a = [20 * math.exp(rng.gauss(0, 0.2)) for _ in range(n)]  # machine drift, shared by the pair
        b = [x * (1 - slowdown) * math.exp(rng.gauss(0, sd)) for x in a]
        hits += paired_verdict(a, b, PairedSettings(min_effect=0.01)).verdict == "regressed"
    return hits / tries


def test_false_alarms_on_equal_sides_stay_near_alpha_whatever_the_drift():
    # Pairs share the drift (sd 0.2 between pairs) and differ by noise alone: the paired test cancels the drift.
    assert _simulate(0.0, 0.05, 5, 2000, seed=1) <= 0.065


def test_the_stated_detectable_slowdown_is_caught_about_ninety_percent_of_the_time():
    sd, n = 0.04, 6
    d = detectable_slowdown(sd, n)
    assert 0.05 < d < 0.15
    assert power_at(d, sd, n) == pytest.approx(0.90, abs=0.01)
    simulated = _simulate(d, sd, n, 2000, seed=2)
    assert 0.84 <= simulated <= 0.96, simulated  # the shifted-t approximation of the noncentral t


def test_interleaving_alternates_which_side_goes_first():
    assert interleave(3) == [(0, "A"), (0, "B"), (1, "B"), (1, "A"), (2, "A"), (2, "B")]


def test_pair_values_matches_cells_by_keys_and_takes_each_runs_median_or_peak():
    rows = []
    for run, (pair, side), rates in (("r1", (0, "A"), [10, 12, 11]), ("r2", (0, "B"), [9, 8, 10]),
                                     ("r3", (1, "B"), [9, 9, 9]), ("r4", (1, "A"), [11, 10, 13])):
        for i, rate in enumerate(rates):
            rows.append({"run_id": run, "status": "ok", "images_per_sec": float(rate), "gpus": 1, "data": None,
                         "cell_id": f"id-{run}"})  # ids differ per run: a git ref's workload version may
    rows.append({"run_id": "r4", "status": "failed", "images_per_sec": None, "gpus": 1, "data": None,
                 "cell_id": "id-r4"})
    run_side = {"r1": (0, "A"), "r2": (0, "B"), "r3": (1, "B"), "r4": (1, "A")}
    med = pair_values(pd.DataFrame(rows), run_side, ["gpus", "data"])
    assert med[["pair", "A", "B"]].values.tolist() == [[0, 11.0, 9.0], [1, 11.0, 9.0]]
    peak = pair_values(pd.DataFrame(rows), run_side, ["gpus", "data"], "peak")
    assert peak[["A", "B"]].values.tolist() == [[12.0, 10.0], [13.0, 9.0]]


@pytest.mark.parametrize("text,expect", [
    ("current", {}),
    ("cpus=0.9", {"cpus": 0.9}),
    ("python=/x/bin/python,env.MKL_NUM_THREADS=2", {"python": "/x/bin/python", "env": {"MKL_NUM_THREADS": "2"}}),
    ("git=v1.2,cpus=1.5", {"git": "v1.2", "cpus": 1.5}),
])
def test_side_specs(text, expect):
    spec = parse_side("B", text)
    for key, value in expect.items():
        assert getattr(spec, key) == value


@pytest.mark.parametrize("text,message", [
    ("cpus=fast", "cpus must be a number"), ("cpus=0", "between"), ("env.1X=2", "not an environment variable"),
    ("image=foo:1,python=/usr", "does not combine"), ("image=a b", "not an image name"),
    ("colour=red", "unknown item"), ("python", "KEY=VALUE")])
def test_bad_side_specs_are_one_clear_error(text, message):
    with pytest.raises(BenchInputError, match=message):
        parse_side("B", text)
