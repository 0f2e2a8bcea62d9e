"""Paired A/B statistics (bench/analysis/paired.py) and the side specs of `bench ab` (bench/ab/spec.py)."""
import math
import random

import pandas as pd
import pytest

from bench.ab.spec import parse_side
from bench.analysis import AnalysisError
from bench.analysis.paired import DECIDED, PairedSettings, decision, pair_order, pair_values, paired_verdict
from bench.analysis.stats.mean_tests import confidence_sequence_half_width, t_cdf, t_quantile
from bench.core.errors import BenchInputError


@pytest.mark.parametrize("p,df,expected", [  # Student's t table values
    (0.95, 1, 6.3138), (0.95, 3, 2.3534), (0.975, 10, 2.2281), (0.90, 4, 1.5332), (0.99, 30, 2.4573),
    (0.5, 7, 0.0), (0.05, 5, -2.0150)])
def test_t_quantiles_match_the_table(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, abs=2e-4)
    assert t_cdf(expected, df) == pytest.approx(p, abs=1e-4)


def test_clear_slowdown_is_regressed_and_equal_sides_are_unchanged():
    a = [20.0, 21.0, 19.5, 20.5, 20.2, 20.1]
    slow = paired_verdict(a, [x * 0.85 * (1 + 0.004 * (-1) ** i) for i, x in enumerate(a)])
    assert slow.verdict == "regressed" and slow.ratio == pytest.approx(0.85, abs=0.005), slow
    assert slow.ci_low < 0.85 < slow.ci_high < 1 and slow.p_change < 0.01 and slow.level == pytest.approx(0.95)
    assert slow.why.startswith("B slower by 15") and slow.pairs_to_decide is None
    same = paired_verdict(a, [x * (1 + 0.004 * (-1) ** i) for i, x in enumerate(a)])
    assert same.verdict == "unchanged" and 0.9 < same.ci_low <= 1 <= same.ci_high < 1.1, same
    assert same.why.startswith("no change larger than 10%")
    fast = paired_verdict(a, [x * 1.2 for x in a])
    assert fast.verdict == "improved"


def test_noisy_pairs_are_undecided_with_how_many_more_would_decide_and_one_pair_is_insufficient():
    noisy = paired_verdict([20, 20, 20, 20], [16, 24, 15, 23])
    assert noisy.verdict == "undecided" and noisy.pairs_to_decide and noisy.pairs_to_decide > 1, noisy
    assert f"about {noisy.pairs_to_decide} more pairs would decide" in noisy.why
    assert paired_verdict([20], [10]).verdict == "insufficient-data"


def test_a_real_slowdown_smaller_than_the_minimum_effect_is_no_change_larger_than_it():
    a = [20.0, 20.1, 19.9, 20.0, 20.05]
    b = [x * 0.97 * (1 + 0.002 * (-1) ** i) for i, x in enumerate(a)]
    small = paired_verdict(a, b)
    assert small.verdict == "unchanged" and small.ci_high < 1 and "B is slower, by less than 10%" in small.why
    assert paired_verdict(a, b, PairedSettings(min_effect=0.02)).verdict == "regressed"


def test_bad_input_is_an_analysis_error():
    with pytest.raises(AnalysisError, match="differ in length"):
        paired_verdict([1, 2, 3], [1, 2])
    with pytest.raises(AnalysisError, match="positive"):
        paired_verdict([1, 2, 0], [1, 2, 3])
    with pytest.raises(AnalysisError):
        PairedSettings(min_effect=1.5)


def _sequential(slowdown: float, sd: float, max_pairs: int, tries: int, seed: int) -> tuple[dict, float]:
    """Sessions as `bench ab` runs them: a pair at a time, stopping at the first decided verdict (or max_pairs).
    Returns how often each verdict ended a session, and the median number of pairs run."""
    rng = random.Random(seed)
    ends, used = {}, []
    for _ in range(tries):
        a, b = [], []
        for n in range(1, max_pairs + 1):
            a.append(20 * math.exp(rng.gauss(0, 0.2)))  # machine drift, shared by the pair
            b.append(a[-1] * (1 - slowdown) * math.exp(rng.gauss(0, sd)))
            verdict = paired_verdict(a, b).verdict if n >= 2 else "insufficient-data"
            if verdict in DECIDED:
                break
        ends[verdict] = ends.get(verdict, 0) + 1
        used.append(n)
    return {k: v / tries for k, v in ends.items()}, sorted(used)[len(used) // 2]


def test_looking_after_every_pair_keeps_false_alarms_within_alpha():
    # Same against same, noise like the development VM's (sd of log B/A 0.07), up to 40 pairs looked at one by one.
    ends, _ = _sequential(0.0, 0.07, 40, 1000, seed=1)
    assert ends.get("regressed", 0) + ends.get("improved", 0) <= 0.05, ends
    assert ends.get("unchanged", 0) >= 0.9, ends  # and it ends by saying so, not by running out


def test_a_ten_percent_slowdown_is_called_regressed_almost_always():
    ends, median_pairs = _sequential(0.10, 0.07, 40, 1000, seed=2)
    assert ends.get("regressed", 0) >= 0.95 and ends.get("unchanged", 0) <= 0.05, ends
    assert median_pairs <= 12, median_pairs


def test_the_projection_of_pairs_to_decide_is_what_the_interval_needs():
    res = paired_verdict([20, 20, 20, 20], [18.5, 21.0, 19.0, 20.5])
    assert res.verdict == "undecided"
    more = res.pairs_to_decide
    n = res.n_pairs + more  # at that n, the same mean and spread decide; one pair fewer does not
    for pairs, decided in ((n, True), (n - 1, False)):
        half = confidence_sequence_half_width(pairs, (pairs - 1) * res.sd_log ** 2, 0.05)
        mean = math.log(res.ratio)
        assert (decision(mean - half, mean + half, PairedSettings()) != "undecided") is decided


def test_interleaving_alternates_which_side_goes_first():
    assert [(k, side) for k in range(3) for side in pair_order(k)] == [(0, "A"), (0, "B"), (1, "B"), (1, "A"),
                                                                        (2, "A"), (2, "B")]


def test_pair_values_matches_cells_by_keys_and_takes_each_runs_median_or_peak():
    rows = []
    for run, (pair, side), rates in (("r1", (0, "A"), [10, 12, 11]), ("r2", (0, "B"), [9, 8, 10]),
                                     ("r3", (1, "B"), [9, 9, 9]), ("r4", (1, "A"), [11, 10, 13])):
        for i, rate in enumerate(rates):
            rows.append({"run_id": run, "status": "ok", "samples_per_sec": float(rate), "gpus": 1, "data": None,
                         "cell_id": f"id-{run}"})  # ids differ per run: a git ref's workload version may
    rows.append({"run_id": "r4", "status": "failed", "samples_per_sec": None, "gpus": 1, "data": None,
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
