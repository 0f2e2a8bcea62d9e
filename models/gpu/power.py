"""Energy per image from sampled GPU power: the arithmetic (pure, tested on a machine with no GPU) and the sampler.

A sampler thread reads the board power of one GPU every `interval_s` — through NVML (the nvidia-ml-py package) when
it loads, else from a streaming `nvidia-smi --query-gpu=power.draw,clocks.sm -lms N` — with its SM clock, stamping
each reading with this process's monotonic clock, the clock the measured window is timed with. Where neither answers
(this machine), it records nothing and says so (`source` None, `note`): a missing power figure is never a zero.

The energy of a window is the trapezoid integral of those readings over [t0, t1], the power at each edge
interpolated between the readings either side; J/img is the energy of every GPU in the job over the images they
trained in the window. NVML's and nvidia-smi's power.draw on A100/H100 is a one-second average (the driver's
documentation of `power.draw.average`), so windows much longer than a second are what give a meaningful figure.

The SM clock read with each power reading says what the GPU ran at: a GPU at its power limit lowers its clock
(an H200 training GPT-2 at 700 W ran at ~1,550 MHz of its 1,980, docs/gpu-results.md), which the MFU's peak, taken at
the boost clock, does not show. A window's clock is the median of the readings inside it.
"""
from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Sequence

DEFAULT_INTERVAL_S = 0.1
MAX_GAP_S = 2.0  # a longer silence inside a window (the sampler stalled): no energy rather than a guess


@dataclass(frozen=True)
class Sample:
    t: float  # time.perf_counter() when read
    watts: float
    sm_mhz: float | None = None  # the SM clock read with it, where the reader gives one


@dataclass(frozen=True)
class WindowEnergy:
    joules: float | None
    mean_watts: float | None
    samples: int  # readings inside the window
    note: str | None = None  # why joules is None
    sm_mhz: float | None = None  # the median SM clock of the readings inside the window (None: none read)


def _power_at(samples: Sequence[Sample], t: float) -> float:
    """Power at `t`, linear between the two readings that bracket it (callers check that two do)."""
    for a, b in zip(samples, samples[1:]):
        if a.t <= t <= b.t:
            return a.watts if b.t == a.t else a.watts + (b.watts - a.watts) * (t - a.t) / (b.t - a.t)
    raise ValueError(f"no readings bracket t={t}")


def window_energy(samples: Sequence[Sample], t0: float, t1: float, max_gap_s: float = MAX_GAP_S) -> WindowEnergy:
    """Joules drawn over [t0, t1] from readings in time order; None (with the reason) unless readings bracket both
    edges and none of the window lies more than `max_gap_s` from a reading."""
    if not t1 > t0:
        raise ValueError(f"empty window [{t0}, {t1}]")
    ordered = sorted(samples, key=lambda s: s.t)
    inside = [s for s in ordered if t0 < s.t < t1]
    clocks = [s.sm_mhz for s in inside if s.sm_mhz is not None]
    clock = statistics.median(clocks) if clocks else None
    if not ordered or ordered[0].t > t0 or ordered[-1].t < t1:
        return WindowEnergy(None, None, len(inside), "power readings do not cover the measured window", clock)
    points = [Sample(t0, _power_at(ordered, t0)), *inside, Sample(t1, _power_at(ordered, t1))]
    before = max(s.t for s in ordered if s.t <= t0)
    after = min(s.t for s in ordered if s.t >= t1)
    gaps = [b.t - a.t for a, b in zip(points, points[1:])] + [t0 - before, after - t1]
    if max(gaps) > max_gap_s:
        return WindowEnergy(None, None, len(inside), f"a {max(gaps):.1f} s gap between power readings", clock)
    joules = sum((a.watts + b.watts) / 2 * (b.t - a.t) for a, b in zip(points, points[1:]))
    return WindowEnergy(joules, joules / (t1 - t0), len(inside), None, clock)


def joules_per_image(per_gpu_joules: Sequence[float | None], images: int) -> float | None:
    """The job's J/img for one window: every GPU's energy over every image; None if any GPU's energy is unknown."""
    if images <= 0:
        raise ValueError(f"images must be positive, got {images}")
    if not per_gpu_joules or any(j is None for j in per_gpu_joules):
        return None
    return sum(per_gpu_joules) / images


def parse_power_line(line: str) -> float | None:
    """One line of `nvidia-smi --query-gpu=power.draw[,clocks.sm] --format=csv,noheader,nounits`: the watts, or None
    ("[N/A]")."""
    return _field(line, 0)


def parse_clock_line(line: str) -> float | None:
    """The SM clock (MHz) of the same line, its second field; None where absent or "[N/A]"."""
    return _field(line, 1)


def _field(line: str, index: int) -> float | None:
    fields = line.split(",")
    try:
        return float(fields[index].strip()) if index < len(fields) else None
    except ValueError:
        return None


def nvml_uuid(uuid: str) -> str:
    """NVML and nvidia-smi name a GPU "GPU-<uuid>"; torch's device properties give the bare UUID."""
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


class PowerSampler:
    """Samples one GPU's power in a thread from start() to stop(). `gpu` is its UUID (as NVML and nvidia-smi -i
    take it: CUDA_VISIBLE_DEVICES renumbers devices, a UUID names the physical one) or an index."""

    def __init__(self, gpu: str, interval_s: float = DEFAULT_INTERVAL_S, smi: str = "nvidia-smi"):
        self.gpu, self.interval_s, self.smi = gpu, interval_s, smi
        self.samples: list[Sample] = []
        self.source: str | None = None
        self.note: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen | None = None

    def start(self) -> "PowerSampler":
        read = self._nvml_reader()
        if read is not None:
            self.source = "nvml"
            self._thread = threading.Thread(target=self._poll, args=(read,), daemon=True)
        elif shutil.which(self.smi):
            self.source = "nvidia-smi"
            self._proc = subprocess.Popen(
                [self.smi, "--query-gpu=power.draw,clocks.sm", "--format=csv,noheader,nounits", "-i", self.gpu,
                 f"-lms={max(1, int(self.interval_s * 1000))}"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self._thread = threading.Thread(target=self._stream, daemon=True)
        else:
            self.note = "power not sampled: neither NVML (nvidia-ml-py) nor nvidia-smi is available"
            return self
        self._thread.start()
        return self

    def _nvml_reader(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            gpu = self.gpu
            handle = (pynvml.nvmlDeviceGetHandleByIndex(int(gpu)) if gpu.isdigit()
                      else pynvml.nvmlDeviceGetHandleByUUID(gpu))
        except Exception:  # noqa: BLE001 - no package, no driver, no such GPU: try nvidia-smi
            return None

        def read() -> tuple[float, float | None]:
            watts = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # milliwatts
            try:
                return watts, float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
            except Exception:  # noqa: BLE001 - a GPU that will not say its clock still has its power read
                return watts, None

        return read

    def _poll(self, read) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(Sample(time.perf_counter(), *read()))
            except Exception as e:  # noqa: BLE001 - a reading error ends sampling, it does not end training
                self.note = f"power sampling stopped: {type(e).__name__}: {e}"
                return
            self._stop.wait(self.interval_s)

    def _stream(self) -> None:
        for line in self._proc.stdout:
            watts = parse_power_line(line)
            if watts is not None:
                self.samples.append(Sample(time.perf_counter(), watts, parse_clock_line(line)))
            if self._stop.is_set():
                return

    def wait_past(self, t: float, timeout_s: float | None = None) -> None:
        """Waits (briefly) until a reading later than `t` exists, so a window ending at t is bracketed."""
        if self.source is None:
            return
        deadline = time.perf_counter() + (timeout_s if timeout_s is not None else 5 * self.interval_s + 1.0)
        while time.perf_counter() < deadline and not (self.samples and self.samples[-1].t > t):
            time.sleep(self.interval_s / 4)

    def energy(self, t0: float, t1: float) -> WindowEnergy:
        if self.source is None:
            return WindowEnergy(None, None, 0, self.note)
        self.wait_past(t1)
        return window_energy(list(self.samples), t0, t1)

    def stop(self) -> None:
        self._stop.set()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        if self._thread is not None:
            self._thread.join(timeout=5)
