"""Every framework path measures the same way: the same step timings give the same record numbers.

PyTorch and TensorFlow drive the window through `measure_windows`; Keras' model.fit drives the same `WindowLoop`
from a callback (open at a window's first batch, step_done after each batch, close after its last). Both are fed
the same fake clock here, and the records must agree to the last digit.
"""
import json
from types import SimpleNamespace

import pytest

import models.measure.meter as meter
from models.measure.common import WindowLoop, measure_windows, single_process_comm

STEP_TIMES = [0.50, 0.52, 0.49, 0.61, 0.50, 0.48]  # seconds, for 2 windows of 3 steps


def fake_clock(monkeypatch):
    state = {"t": 0.0}

    def clock():
        return state["t"]

    def advance(seconds):  # time passes only in training steps
        state["t"] += seconds

    monkeypatch.setattr(meter.time, "perf_counter", clock)
    monkeypatch.setattr(meter.time, "time", lambda: 1_000_000.0 + state["t"])
    return advance


def args(tmp_path, name):
    return SimpleNamespace(warmup_steps=0, steps=3, repeats=2, batch_size=32, cell_id="c", run_id="r",
                           out=str(tmp_path / f"{name}.jsonl"))


def records(path):
    return [json.loads(line) for line in open(path)]


def test_loop_and_callback_paths_give_identical_numbers(tmp_path, monkeypatch):
    advance = fake_clock(monkeypatch)
    steps = iter(STEP_TIMES)

    def train_step(batch):
        advance(next(steps))
        return 1.0

    a = args(tmp_path, "loop")
    assert measure_windows(a, single_process_comm(), train_step, float, lambda: None, {"framework": "pytorch"}) == 0

    advance = fake_clock(monkeypatch)
    b = args(tmp_path, "callback")
    loop = WindowLoop(b, single_process_comm(), lambda: None, {"framework": "keras"})
    steps = iter(STEP_TIMES)
    for batch in range(b.steps * b.repeats):  # what the Keras callback does around model.fit's batches
        if batch % b.steps == 0:
            loop.open()
        advance(next(steps))
        loop.step_done(b.batch_size)
        if (batch + 1) % b.steps == 0:
            assert loop.close(batch // b.steps, 1.0)

    for x, y in zip(records(a.out), records(b.out), strict=True):
        for key in ("samples", "window_s", "samples_per_sec", "samples_per_sec_per_gpu", "step_time_s"):
            assert x[key] == y[key], key
        assert x["samples_per_sec"] == pytest.approx(3 * 32 / x["window_s"])
    windows = [r["window_s"] for r in records(a.out)]
    assert windows == [pytest.approx(sum(STEP_TIMES[:3])), pytest.approx(sum(STEP_TIMES[3:]))]
