"""The GPU worker's measured windows without a GPU: models/gpu/window.py driven through the same measure_windows
loop as the PyTorch worker, with a stand-in for torch.cuda.Event (the host clock) and power readings given to the
sampler; the record it writes must carry the cross-check and J/img and pass bench's record schema."""
import json
from types import SimpleNamespace

import pytest

import models.measure.meter as meter
from bench.records.schema import parse_record
from models.gpu.cuda_timing import EventTimer
from models.gpu.power import PowerSampler, Sample
from models.gpu.window import GpuWindow
from models.measure.common import measure_windows, single_process_comm
from tests.test_cuda_timing import ClockEvent


@pytest.fixture
def clock(monkeypatch):
    state = {"t": 0.0}
    monkeypatch.setattr(meter.time, "perf_counter", lambda: state["t"])  # meter, events and sampler share it

    def advance(seconds):
        state["t"] += seconds
    return advance


def given_readings(watts: float, sm_mhz=None) -> PowerSampler:
    """A sampler holding readings every 0.1 s of the fake timeline (what NVML would have read on a GPU); `sm_mhz`:
    the SM clock of reading number t (a function of it), or None for a reader that gives none."""
    sampler = PowerSampler("0")
    sampler.source = "given"
    sampler.samples = [Sample(t / 10, watts, sm_mhz(t) if sm_mhz else None) for t in range(0, 1000)]
    return sampler


def run(tmp_path, clock, sampler, input_wait_s=0.0):
    args = SimpleNamespace(warmup_steps=1, steps=4, repeats=2, batch_size=32, cell_id="c", run_id="r",
                           out=str(tmp_path / "records.jsonl"))

    def train_step(batch):
        clock(0.5)
        return 1.0

    def next_batch():
        clock(input_wait_s)
        return None

    window = GpuWindow(EventTimer(ClockEvent), sampler)
    code = measure_windows(args, single_process_comm(), train_step, float, lambda: None, {"framework": "pytorch"},
                           next_batch if input_wait_s else None, instruments=window)
    window.close()
    assert code == 0
    return [json.loads(line) for line in open(args.out)]


def test_events_agree_and_joules_per_image_is_power_times_window_over_images(tmp_path, clock):
    records = run(tmp_path, clock, given_readings(400.0))
    assert len(records) == 2
    for r in records:
        assert r["cuda_events"]["verdict"] == "agree" and r["cuda_events"]["steps"] == 4
        assert r["cuda_events"]["ratio"] == pytest.approx(1.0)
        assert r["power"]["joules"] == pytest.approx(400.0 * r["window_s"])
        assert r["power"]["joules_per_image"] == pytest.approx(400.0 * 2.0 / 128)
        assert r["power"]["mean_watts_per_gpu"] == pytest.approx(400.0)
        assert r["power"]["sm_clock_mhz"] is None  # this reader gave no clock: none is made up
        parse_record({**r, "cell": {"model": "resnet50"}})


def test_the_window_records_the_median_sm_clock_its_readings_saw(tmp_path, clock):
    # A GPU at its power limit: one reading in four at the 1,980 MHz boost clock, the rest pulled down to 1,500. The
    # window's figure is the median of its readings (1,500), not the boost clock and not the mean (1,620).
    records = run(tmp_path, clock, given_readings(700.0, sm_mhz=lambda t: 1980.0 if t % 4 == 0 else 1500.0))
    for r in records:
        assert r["power"]["samples"] >= 8
        assert r["power"]["sm_clock_mhz"] == 1500.0
        parse_record({**r, "cell": {"model": "resnet50"}})


def test_input_waits_outside_the_events_make_the_verdict_host_bound(tmp_path, clock):
    records = run(tmp_path, clock, given_readings(400.0), input_wait_s=0.25)
    assert {r["cuda_events"]["verdict"] for r in records} == {"host_bound"}
    assert records[0]["cuda_events"]["ratio"] == pytest.approx(1.5)


def test_without_power_readings_the_record_says_why_and_has_no_energy(tmp_path, clock, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    records = run(tmp_path, clock, PowerSampler("0", smi="nvidia-smi-absent").start())
    for r in records:
        assert r["power"]["source"] is None
        assert r["power"]["joules"] is None and r["power"]["joules_per_image"] is None
        assert "power not sampled" in r["power"]["note"]
        parse_record({**r, "cell": {"model": "resnet50"}})
