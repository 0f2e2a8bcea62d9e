"""The median's confidence interval."""
import random

import pytest

from bench.analysis.stats import median_ci


def test_small_samples_get_min_max_with_their_true_coverage():
    ci = median_ci([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (ci.median, ci.low, ci.high) == (3.0, 1.0, 5.0)
    assert ci.coverage == pytest.approx(1 - 2 / 32)  # 93.75%: five values cannot give 95%


def test_larger_samples_use_inner_order_statistics_with_at_least_95_percent():
    values = list(range(1, 21))  # n = 20: the sign-test interval is [x6, x15]
    ci = median_ci(values)
    assert (ci.low, ci.high) == (6, 15)
    assert 0.95 <= ci.coverage < 0.99


def test_coverage_holds_in_simulation():
    rng = random.Random(7)
    hits = 0
    for _ in range(2000):
        ci = median_ci([rng.gauss(100, 10) for _ in range(12)])
        hits += ci.low <= 100 <= ci.high
    assert hits / 2000 >= 0.94


def test_single_value_and_no_value():
    assert median_ci([7.0]).low == median_ci([7.0]).high == 7.0
    with pytest.raises(ValueError):
        median_ci([])
