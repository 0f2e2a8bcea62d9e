"""J/img from sampled power (models/gpu/power.py): the integral over the measured window, its refusals, and the sampler
where no GPU answers (this machine) or a stand-in nvidia-smi streams readings."""
import time
from pathlib import Path

import pytest

from models.gpu.power import (PowerSampler, Sample, joules_per_image, nvml_uuid, parse_clock_line, parse_power_line,
                              window_energy)

DATA = Path(__file__).parent / "data" / "nvidia_smi"


def test_constant_power_over_a_window_is_power_times_time():
    samples = [Sample(t / 10, 300.0) for t in range(0, 101)]  # 0..10 s, 300 W
    e = window_energy(samples, 2.0, 7.0)
    assert e.joules == pytest.approx(1500.0)
    assert e.mean_watts == pytest.approx(300.0)
    assert e.samples == 49


def test_the_window_edges_are_interpolated_between_readings():
    # a ramp 0 W at t=0 to 100 W at t=10, read only at 0 and 10: energy over [2, 4] is the ramp's area there
    e = window_energy([Sample(0.0, 0.0), Sample(10.0, 100.0)], 2.0, 4.0, max_gap_s=10)
    assert e.joules == pytest.approx((20 + 40) / 2 * 2)


def test_readings_that_do_not_bracket_the_window_give_no_energy():
    samples = [Sample(t, 200.0) for t in (1.0, 1.5, 2.0, 2.5)]
    assert window_energy(samples, 0.5, 2.2).joules is None
    e = window_energy(samples, 1.2, 3.0)
    assert e.joules is None and "do not cover" in e.note


def test_a_gap_in_the_readings_gives_no_energy():
    e = window_energy([Sample(0.0, 200.0), Sample(0.1, 200.0), Sample(5.0, 200.0), Sample(5.1, 200.0)], 0.05, 5.05)
    assert e.joules is None and "gap" in e.note


def test_joules_per_image_is_every_gpus_energy_over_every_image():
    assert joules_per_image([1000.0, 1200.0], 4400) == pytest.approx(0.5)
    assert joules_per_image([1000.0, None], 4400) is None
    with pytest.raises(ValueError):
        joules_per_image([1.0], 0)


def test_nvidia_smi_power_lines_and_uuids():
    lines = [ln for ln in (DATA / "power_draw_stream.txt").read_text().splitlines() if not ln.startswith("#")]
    assert [parse_power_line(ln) for ln in lines] == [612.34, None, 655.10]
    # With the SM clock beside the power (the sampler asks for both): each read from its own field.
    assert [(parse_power_line(ln), parse_clock_line(ln)) for ln in ("612.34, 1545", "[N/A], [N/A]", "655.1")] == [
        (612.34, 1545.0), (None, None), (655.1, None)]
    assert nvml_uuid("3e1c26d3-23ef-423e-a848-f808f54d35bf") == "GPU-3e1c26d3-23ef-423e-a848-f808f54d35bf"
    assert nvml_uuid("GPU-3e1c") == "GPU-3e1c"


def test_without_nvml_or_nvidia_smi_the_sampler_records_nothing_and_says_so(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    sampler = PowerSampler("0", smi="nvidia-smi-absent").start()
    try:
        e = sampler.energy(0.0, 1.0)
    finally:
        sampler.stop()
    assert sampler.source is None and sampler.samples == []
    assert e.joules is None and "power not sampled" in e.note


def test_the_sampler_reads_a_streaming_nvidia_smi(tmp_path):
    # A stand-in for nvidia-smi (no GPU here): prints a reading every 20 ms as `-lms` does, and its arguments once.
    smi = tmp_path / "nvidia-smi"
    args = tmp_path / "args"
    smi.write_text(f'#!/bin/sh\necho "$@" > {args}\nwhile true; do echo 250.5, 1755; sleep 0.02; done\n')
    smi.chmod(0o755)
    sampler = PowerSampler("GPU-abc", interval_s=0.02, smi=str(smi)).start()
    try:
        time.sleep(0.3)
        t0 = time.perf_counter()
        time.sleep(0.5)
        t1 = time.perf_counter()
        e = sampler.energy(t0, t1)
    finally:
        sampler.stop()
    assert sampler.source == "nvidia-smi"
    assert args.read_text().split() == ["--query-gpu=power.draw,clocks.sm", "--format=csv,noheader,nounits",
                                        "-i", "GPU-abc", "-lms=20"]
    assert e.joules == pytest.approx(250.5 * (t1 - t0))
    assert e.samples >= 1  # one reading a sleep apart; a loaded machine stretches the stand-in's 20 ms
    assert e.sm_mhz == 1755.0
