"""models/measure/phases.py: the per-rank phase clock the workers use for "where the step time went"."""
from __future__ import annotations

import pytest

from models.measure.phases import PhaseClock


def ticking(*times: float):
    """A clock that reads the given times in turn."""
    it = iter(times)
    return lambda: next(it)


def test_marks_sum_into_phases_and_the_rest_is_other():
    syncs = []
    clock = PhaseClock(sync=lambda: syncs.append(1), clock=ticking(0.0, 0.1, 0.5, 0.7, 1.0, 1.0, 1.2, 1.6, 1.65, 2.0))
    for _ in range(2):
        clock.open_step()
        clock.mark("input")
        clock.mark("compute", sync=True)
        clock.mark("update")
        clock.close_step()
    assert clock.summary() == pytest.approx({"input": 0.1 + 0.2, "compute": 0.4 + 0.4, "update": 0.2 + 0.05,
                                             "other": 0.3 + 0.35})
    assert len(syncs) == 2  # one per sync=True mark, none for the others


def test_marks_outside_a_step_count_nothing_and_reset_clears():
    clock = PhaseClock(clock=ticking(0.0, 1.0))
    clock.mark("compute")  # warm-up: no open step
    assert clock.summary() == {}
    clock.open_step()
    clock.mark("compute")
    clock.reset()
    assert clock.summary() == {}


def test_unknown_phase_is_refused():
    clock = PhaseClock(clock=ticking(0.0, 1.0))
    clock.open_step()
    with pytest.raises(ValueError, match="unknown phase 'backward'"):
        clock.mark("backward")


def test_disabled_clock_never_syncs_and_records_nothing():
    """GPU workers: no per-phase device synchronisation (it would lower the throughput being measured)."""
    syncs = []
    clock = PhaseClock(sync=lambda: syncs.append(1), clock=ticking(*range(100)), enabled=False)
    for _ in range(3):
        clock.open_step()
        clock.mark("compute", sync=True)
        clock.mark("comm_wait", sync=True)
        clock.close_step()
    assert syncs == [] and clock.summary() == {}
