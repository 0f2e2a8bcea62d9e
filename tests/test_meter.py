"""The throughput definition: Σ samples of all ranks / barrier-bounded window, never rank 0 × N."""
import pytest

from models.measure.meter import EmptyWindowError, WindowMeter, combine
from tests.factories import rank


def test_global_rate_is_total_samples_over_the_window_not_rank0_times_n():
    # Rank 0 is fast (busy 1 s), rank 1 slow (busy 2 s); the window lasts until the slowest finishes.
    ranks = [rank(0, 100, window_s=2.0, busy_s=1.0), rank(1, 100, window_s=2.0, busy_s=2.0)]
    out = combine(ranks)
    assert out["samples_per_sec"] == pytest.approx(200 / 2.0)
    assert out["samples_per_sec"] != pytest.approx(2 * 100 / 1.0)      # rank 0's rate × N would say 200
    assert out["samples_per_sec_per_gpu"] == pytest.approx(50.0)
    assert out["slowest_rank"] == 1
    assert [r["samples_per_sec"] for r in out["per_rank"]] == [pytest.approx(100.0), pytest.approx(50.0)]


def test_window_is_the_longest_rank_window_and_not_a_mean_of_step_rates():
    ranks = [rank(0, 60, 3.0), rank(1, 60, 2.9)]
    ranks[0]["step_times_s"] = [0.1, 0.1, 2.8]  # one slow step: a mean of per-step rates would be far higher
    out = combine(ranks)
    assert out["window_s"] == 3.0
    assert out["samples_per_sec"] == pytest.approx(120 / 3.0)
    assert out["step_time_s"]["max"] == 2.8


@pytest.mark.parametrize("ranks", [[], [rank(0, 0, 1.0, steps=0)], [rank(0, 10, 0.0)]])
def test_empty_window_is_an_error_not_a_zero(ranks):
    with pytest.raises(EmptyWindowError):
        combine(ranks)


def test_meter_with_a_fake_clock():
    ticks = iter([10.0, 10.5, 11.0, 11.25, 11.3])  # begin, step, step, busy_end, end
    meter = WindowMeter(clock=lambda: next(ticks), wall=lambda: 1e9)
    meter.begin()
    meter.step(32)
    meter.step(32)
    meter.busy_end()
    meter.end()
    s = meter.rank_summary(0, "h")
    assert s["samples"] == 64 and s["step_times_s"] == [0.5, 0.5]
    assert s["window_s"] == pytest.approx(1.3) and s["busy_s"] == pytest.approx(1.25)
    assert combine([s])["samples_per_sec"] == pytest.approx(64 / 1.3)


def test_ranks_on_hosts_with_unrelated_clocks_give_the_same_figures():
    """Across hosts, each rank's clocks are its own: a monotonic clock 10^6 s ahead (another boot time) and a wall
    clock an hour off change nothing but the wall-clock bounds, which are kept, never subtracted from each other."""
    def summary(rank_no, host, mono0, wall0, span):
        ticks = iter([mono0, mono0 + span / 2, mono0 + span, mono0 + span, mono0 + span + 0.01])
        walls = iter([wall0, wall0 + span + 0.01])
        meter = WindowMeter(clock=lambda: next(ticks), wall=lambda: next(walls))
        meter.begin()
        meter.step(8)
        meter.step(8)
        meter.busy_end()
        meter.end()
        return meter.rank_summary(rank_no, host)

    same = combine([summary(0, "a", 50.0, 1e9, 2.0), summary(1, "b", 50.0, 1e9, 1.5)])
    skewed = combine([summary(0, "a", 50.0, 1e9, 2.0), summary(1, "b", 1e6 + 7.0, 1e9 + 3600, 1.5)])
    for key in ("window_s", "samples_per_sec", "samples", "slowest_rank"):
        assert skewed[key] == pytest.approx(same[key]), key
    assert skewed["step_time_s"] == pytest.approx(same["step_time_s"])
    for a, b in zip(skewed["per_rank"], same["per_rank"]):
        assert a["host"] == b["host"] and a["window_s"] == pytest.approx(b["window_s"])
    assert skewed["window_s"] == pytest.approx(2.01)
