"""What a GPU worker measures beside the meter, window by window: CUDA-event step times and sampled power.

`GpuWindow` plugs into models/measure/common.py's measured-window loop (`instruments=`): events around each step, the
power readings of this rank's GPU over the meter's own window [t0, t1], and on rank 0 the record's `cuda_events`
(the cross-check's verdict, worst rank) and `power` (J/img of the whole job). It makes no CUDA call itself: the
event class and the sampler are handed in, so the CPU test drives all of it with a stand-in event.
"""
from __future__ import annotations

from typing import Any

from models.gpu.cuda_timing import EventTimer, cross_check, worst
from models.gpu.power import PowerSampler, joules_per_image


class GpuWindow:
    def __init__(self, timer: EventTimer, sampler: PowerSampler):
        self.timer, self.sampler = timer, sampler

    def window_open(self) -> None:
        self.timer.reset()

    def before_step(self) -> None:
        self.timer.before()

    def after_step(self) -> None:
        self.timer.after()

    def window_close(self, meter) -> dict[str, Any]:
        """This rank's figures for the window the meter just closed (goes into its summary)."""
        energy = self.sampler.energy(meter.t0, meter.t1)
        return {"event_step_times_s": self.timer.step_times_s(), "energy_j": energy.joules,
                "mean_watts": energy.mean_watts, "power_samples": energy.samples, "power_note": energy.note,
                "power_source": self.sampler.source, "sm_mhz": energy.sm_mhz}

    @staticmethod
    def record_fields(summaries: list[dict[str, Any]], samples: int) -> dict[str, Any]:
        """Rank 0: the record's `cuda_events` and `power` from every rank's summary of the window."""
        checks = [{**cross_check(s["step_times_s"], s["event_step_times_s"]), "rank": s["rank"]} for s in summaries]
        joules = [s["energy_j"] for s in summaries]
        watts = [s["mean_watts"] for s in summaries if s["mean_watts"] is not None]
        notes = sorted({s["power_note"] for s in summaries if s["power_note"]})
        sources = sorted({s["power_source"] for s in summaries if s["power_source"]})
        clocks = [s.get("sm_mhz") for s in summaries]
        power = {"source": sources[0] if len(sources) == 1 else ",".join(sources) or None,
                 "gpus": len(summaries), "samples": min(s["power_samples"] for s in summaries),
                 "joules": sum(joules) if None not in joules else None,
                 "joules_per_image": joules_per_image(joules, samples),
                 "mean_watts_per_gpu": sum(watts) / len(watts) if len(watts) == len(summaries) else None,
                 # The slowest GPU's median SM clock: the one a step waits for.
                 "sm_clock_mhz": min(clocks) if clocks and None not in clocks else None,
                 "note": "; ".join(notes) or None}
        return {"cuda_events": worst(checks), "power": power}

    def close(self) -> None:
        self.sampler.stop()


def gpu_window(torch, device, interval_s: float | None = None) -> GpuWindow:
    """The instruments of a CUDA worker on `device` (CUDA calls: GPU path only)."""
    from models.gpu.power import DEFAULT_INTERVAL_S, nvml_uuid

    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    gpu = nvml_uuid(str(uuid)) if uuid is not None else str(device.index)
    return GpuWindow(EventTimer(torch.cuda.Event), PowerSampler(gpu, interval_s or DEFAULT_INTERVAL_S).start())
