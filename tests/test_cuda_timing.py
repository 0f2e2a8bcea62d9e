"""The CUDA-event cross-check's arithmetic (models/gpu/cuda_timing.py), without a GPU."""
import pytest

from models.gpu.cuda_timing import EventTimer, cross_check, worst


def test_equal_timings_agree():
    c = cross_check([0.100, 0.101, 0.099], [0.099, 0.100, 0.098])
    assert c["verdict"] == "agree"
    assert c["ratio"] == pytest.approx(0.100 / 0.099)
    assert c["steps"] == 3


def test_wall_clock_well_above_the_events_is_host_bound():
    c = cross_check([0.150] * 5, [0.100] * 5)
    assert c["verdict"] == "host_bound" and c["ratio"] == pytest.approx(1.5)


def test_events_longer_than_the_wall_clock_are_inconsistent():
    assert cross_check([0.100] * 5, [0.120] * 5)["verdict"] == "inconsistent"


def test_the_tolerance_decides_the_edge():
    assert cross_check([0.104], [0.100], tolerance=0.05)["verdict"] == "agree"
    assert cross_check([0.106], [0.100], tolerance=0.05)["verdict"] == "host_bound"


@pytest.mark.parametrize("wall,event", [([], []), ([0.1, 0.1], [0.1]), ([0.1], [0.0])])
def test_mismatched_or_empty_timings_are_refused(wall, event):
    with pytest.raises(ValueError):
        cross_check(wall, event)


def test_the_job_verdict_is_the_rank_furthest_from_agreement():
    checks = [{**cross_check([0.1], [0.1]), "rank": 0}, {**cross_check([0.13], [0.1]), "rank": 1},
              {**cross_check([0.1], [0.104]), "rank": 2}]
    assert worst(checks)["rank"] == 1


class ClockEvent:
    """A stand-in for torch.cuda.Event (no GPU here): records the host clock; elapsed_time in milliseconds."""

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.t = None

    def record(self):
        import time
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.t - self.t) * 1000.0


def test_the_event_timer_pairs_each_step():
    import time

    timer = EventTimer(ClockEvent)
    for pause in (0.01, 0.02):
        timer.before()
        time.sleep(pause)
        timer.after()
    a, b = timer.step_times_s()
    assert a >= 0.01 and b >= 0.02  # each step's own pause (a loaded machine may stretch either)
    timer.reset()
    assert timer.step_times_s() == []
