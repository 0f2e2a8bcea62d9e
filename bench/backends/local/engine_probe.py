"""The engine probe, run: a co-located cell's own launch — its launcher, its engine, its N ranks — with the engine
up and a few floats a step but no gradient traffic (models/probes/engine_probe.py), in short windows; the rate each
rank computes at beside the engine and the other ranks, stored beside the compute probe under the same rules
(bench/analysis/probe.py: same machine, same settings, under 7 days old, measured on a quiet machine) with the stack
(flavour and engine) in its key. The cell's expected value rests on it (bench/analysis/expected.py): what the engine's
threads cost on shared cores is measured apart from the cell, so a first run slowed by something else is not
absorbed as "the engine".

Workloads whose worker has the probe mode (ENGINE_PROBE_FRAMEWORKS) are probed; the others keep the compute probe's
rule. A probe that must be measured runs first in the cell's own launch (`first_or_stored`, `first_env`,
`from_first`; the worker's side is models/probes/engine_probe.first_then): its windows before the cell's, in the same
processes, so it costs its steps and no launch of its own (a launch took 2-8 s more a probe here:
interpreter, imports, the launcher's and the engine's start), and it measures the engine as that launch has it. A
probe measured again after a cell (`again`) is a launch of its own. Stored probes are reused for 7 days.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.analysis.probe import (ProbeResult, engine_key, engine_words, fresh, from_entry, key_text, stale_reason,
                                  summarize)
from bench.backends.local.compute_probe import ProbeOutcome, busy_cpu_s, children_cpu_s, identity, kept, load
from bench.cells.units import format_rate
from bench.planning.cell import PlannedCell
from models.probes.engine_probe import ENV, FIRST_ENV, PHASE_KIND, SYNC_STEPS

CACHE = Path("probes") / "engine.json"  # under the results folder, beside the compute probes
FIRST_FILE = "engine-probe.jsonl"  # in the cell's job folder: what the probe run first in its launch wrote
ENGINE_WARMUP, ENGINE_STEPS, ENGINE_REPEATS = 2, 3, 3
# Windows of at least this long where the compute probe says how long a step takes (a tiny transformer's 0.04 s
# steps in windows of 3 read 12,042 and 10,584 tokens/s a rank in two probes of one setting); at most MAX_STEPS
WINDOW_S, MAX_STEPS = 1.0, 50
ENGINE_TIMEOUT_S = 240.0
# Launches more at most for a cell that ran faster than its engine probe allowed (again): MPICH's probe caught the
# engine spinning in about 4 launches of 10 here while it pinged once a step (pinging once per gradient, in none of
# 6), but slow launches came in runs, so three more brought back 3 of 4 slow first runs of 6 (docs/diagnose.md);
# each is one launch, 8-11 s for that cell
AGAIN_AT_MOST = 3
# The worker programs with the probe mode (models/workloads/resnet50/pytorch_worker.py and
# models/workloads/transformer/engines.py under Horovod, DDP and FSDP2; models/workloads/resnet50/tensorflow_worker.py
# and models/workloads/resnet50/keras_worker.py under Horovod).
ENGINE_PROBE_FRAMEWORKS = ("pytorch", "tensorflow", "keras")


def cache_path(results_dir: Path | str) -> Path:
    return Path(results_dir) / CACHE


def probed(cell: dict[str, Any]) -> bool:
    """Whether the cell's worker can run as its engine probe."""
    return str(cell.get("framework")) in ENGINE_PROBE_FRAMEWORKS


def steps_for(step_s: float | None) -> int:
    """Steps a window: enough for WINDOW_S at the compute probe's step time, ENGINE_STEPS at least."""
    if not step_s or step_s <= 0:
        return ENGINE_STEPS
    return max(ENGINE_STEPS, min(MAX_STEPS, math.ceil(WINDOW_S / step_s)))


def probe_cell(planned: PlannedCell, repeats: int = ENGINE_REPEATS, steps: int = ENGINE_STEPS) -> PlannedCell:
    cell = {**planned.cell, "warmup_steps": ENGINE_WARMUP, "steps": steps, "repeats": repeats, "jobs": 1}
    return replace(planned, cell=cell, cell_id=f"engine-probe-{planned.cell_id}")


@dataclass
class First:
    """An engine probe to run first in its cell's launch: why it is measured, its window's steps, and (once the
    launch is started) the file its windows go to."""
    why: str
    steps: int
    path: Path | None = None


def first_or_stored(planned: PlannedCell, results_dir: Path, now: float | None = None,
                    step_s: float | None = None) -> ProbeOutcome | First:
    """The stored engine probe for the cell's settings and stack while it stands (its outcome), else a First: the
    probe to run in the cell's launch, before its windows, in windows sized by `step_s` (the compute probe's)."""
    from bench.cells.units import IMAGES, unit_of_cell

    key = engine_key(planned.cell)
    unit = unit_of_cell(planned.cell) or IMAGES
    me, now = identity(), time.time() if now is None else now
    entries = load(cache_path(results_dir))
    hit = fresh(entries, key, me, now)
    if hit is not None:
        r = from_entry(hit)
        return ProbeOutcome(r, 0.0, True, f"engine: reused ({(now - r.measured_unix) / 3600:.1f} h old): "
                                          f"{engine_words(r, unit)}")
    older = [e for e in entries if key_text(e.get("key") or {}) == key_text(key)]
    return First(stale_reason(max(older, key=lambda e: e["measured_unix"]), me, now) if older else "none stored",
                 steps_for(step_s))


def first_env(first: First) -> dict[str, str]:
    """What the cell's launch adds to its environment for the probe first (models/probes/engine_probe.FIRST_ENV)."""
    return {FIRST_ENV: f"{ENGINE_WARMUP},{first.steps},{ENGINE_REPEATS},{first.path}"}


def from_first(planned: PlannedCell, results_dir: Path, first: First) -> ProbeOutcome:
    """The probe run first in the cell's launch, read from its file, summarised and stored as a probe launched
    apart is. Quiet or not is what the cell's ranks sampled beside its windows (models/probes/host_load.py)."""
    from bench.backends.shared.records import read_records
    from bench.cells.units import IMAGES, unit_of_cell

    unit = unit_of_cell(planned.cell) or IMAGES
    records = read_records(first.path)[0] if first.path is not None and first.path.exists() else []
    phase = next((r for r in reversed(records) if r.get("kind") == PHASE_KIND), None)
    seconds = float(phase["ended_unix"]) - float(phase["started_unix"]) if phase else 0.0
    ok = [r for r in records if r.get("kind") == "measurement" and r.get("status") == "ok"]
    result, raw, problem = None, [], "no window measured in the cell's launch"
    if ok:
        started = float(phase["started_unix"]) if phase else min(float(r["start_unix"]) for r in ok)
        result, raw, problem = summarized(planned, records, ok, started, identity(), outside_load(ok))
    outcome = kept(cache_path(results_dir), engine_key(planned.cell), result, raw, seconds,
                   f"{first.why}; run first in the cell's launch", lambda r: engine_words(r, unit),
                   f"{problem}; the expected value rests on the compute probe", prefix="engine: ")
    return replace(outcome, in_cell_launch=True)


def outside_load(windows: list[dict]) -> float | None:
    """CPU-s per second processes outside the cell used beside its windows, as its ranks sampled them (the busiest
    rank's figure a window, their mean); None where no window was sampled."""
    each = [max(float((r.get("outside") or {}).get("cpu_s_per_s") or 0.0) for r in w["per_rank"])
            for w in windows if any("outside" in r for r in w.get("per_rank") or [])]
    return statistics.fmean(each) if each else None


def again(planned: PlannedCell, backend, results_dir: Path, above: Any, started_unix: float,
          timeout_s: float = ENGINE_TIMEOUT_S, step_s: float | None = None) -> ProbeOutcome:
    """The engine probe measured once more, right after its cell ran faster than the probe allowed (`above`: the
    cell's Expected, bench/analysis/expected_probes.py ran_faster_than_probe) or slower with nothing outside the cell
    named (ran_slower_than_probe), and stored as the probe for that run of the cell (`started_unix`: its first
    window's start) and for later runs (the newest). One launch more, only for a cell that disagreed: an engine whose
    idle loop settles differently from launch to launch (MPICH's: slow in 7 of 17 launches here) is likelier caught in
    the cell's state the next time, and a probe that still disagrees leaves the cell above expected."""
    from bench.cells.units import IMAGES, unit_of_cell

    unit = unit_of_cell(planned.cell) or IMAGES
    first = above.engine_probe
    slower = above.gap > 0  # ran_slower_than_probe: measured again once, and the verdict may rest on the two
    why = (f"the cell ran {100 * abs(above.gap):.0f}% {'below' if slower else 'above'} what the "
           f"{_ago(first.measured_unix)} probe allowed, {format_rate(first.rate, unit)} a rank")
    started = time.monotonic()
    result, raw, problem = measure(planned, backend, results_dir, timeout_s, identity(), steps_for(step_s))
    if result is not None:
        result = replace(result, again_for={"cell_id": planned.cell_id, "started_unix": started_unix, "why": why,
                                            **({"slower": True} if slower else {})})
    return kept(cache_path(results_dir), engine_key(planned.cell), result, raw, time.monotonic() - started,
                why, lambda r: engine_words(replace(r, again_for={}), unit),
                f"{problem}; the cell stays judged against the probe before it",
                prefix="engine, again: ")


def _ago(unix: float) -> str:
    return time.strftime("%H:%M UTC", time.gmtime(unix)) if unix else "earlier"


def measure(planned: PlannedCell, backend, results_dir: Path, timeout_s: float, me: dict[str, Any],
            steps: int = ENGINE_STEPS) -> tuple[ProbeResult | None, list[list[dict]], str]:
    """Launches the cell as its engine probe (the backend's own launch, ENV=1 added), waits for it (or kills it at
    the deadline), and summarises each rank's windows."""
    from bench.backends.shared import launcher_job
    from bench.backends.shared.cell_launch import Placement, launch_for
    from bench.backends.shared.outcome import classify
    from models.measure.faults import FAULT_VAR

    probe = probe_cell(planned, steps=steps)
    run_id = f"engine-probe-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    # The cell's own launch, its job directory under the probes' folder (results/runs holds the cells' jobs only).
    launch = launch_for(probe, run_id, 0, where=Placement(Path(results_dir) / "probes", backend.python,
                                                           cores=os.cpu_count() or 1, data_dir=backend.imagenet_dir))
    rendered = launch.render()
    # The worker test hooks (models/measure/faults.py) are planted in the cell, never in the probe that measures the
    # machine.
    rendered = replace(rendered, env={**rendered.env, ENV: "1", FAULT_VAR: ""})
    measured_at = time.time()
    busy0, mine0, t0 = busy_cpu_s(), children_cpu_s(), time.monotonic()
    handle = launcher_job.start(probe, rendered, launch.dir, timeout_s, launch.runtime.bin_dirs)
    try:
        while not launcher_job.poll(handle, launcher_job.kill):
            time.sleep(0.1)
    except BaseException:  # Ctrl-C or SIGTERM during the probe: none of its processes outlives it
        handle.stopped = "interrupted"
        launcher_job.kill(handle)
        launcher_job.finish(handle, launcher_job.kill)
        raise
    end = launcher_job.finish(handle, launcher_job.kill)
    busy1, mine1, wall = busy_cpu_s(), children_cpu_s(), time.monotonic() - t0
    outcome = classify(end, probe.cell["repeats"], timeout_s, "the engine probe was killed")
    ok = [r for r in end.records if r.get("kind") == "measurement" and r.get("status") == "ok"]
    if not ok:
        return None, [], (outcome.reason or "no window measured")[:200]
    others = None if busy0 is None or busy1 is None or wall <= 0 else \
        max(0.0, (busy1 - busy0) - (mine1 - mine0)) / wall
    return summarized(planned, end.records, ok, measured_at, me, others)


def summarized(planned: PlannedCell, records: list[dict], ok: list[dict], measured_at: float, me: dict[str, Any],
               others: float | None) -> tuple[ProbeResult | None, list[list[dict]], str]:
    """A probe's result from its launch's records (`ok`: its measured windows): each rank's windows summarised,
    and one step's gradient collectives as the worker timed them."""
    raw = per_rank_windows(ok)
    result = summarize(raw, int(planned.cell["batch_per_gpu"]), measured_unix=measured_at, identity=me,
                       other_load=others)
    if result is None:
        return None, raw, "no window had every rank"
    timed = [r for r in records if r.get("kind") == "engine_probe" and r.get("allreduce_s")]
    if timed:
        result = replace(result, allreduce_s=float(timed[-1]["allreduce_s"]),
                         sync_steps=timed[-1].get("how") == SYNC_STEPS)
    return result, raw, ""


def per_rank_windows(records: list[dict]) -> list[list[dict]]:
    """Each rank's windows, as the compute probe's processes' are: the window's rate per worker (barrier-bounded:
    every rank's), that rank's phases, the window's bounds."""
    ranks: dict[int, list[dict]] = {}
    for rec in records:
        per = rec.get("per_rank") or []
        n = max(len(per), 1)
        for r in per:
            ranks.setdefault(int(r["rank"]), []).append(
                {"samples_per_sec": float(rec["samples_per_sec"]) / n, "per_rank": [r],
                 "measured_steps": rec.get("measured_steps"), "start_unix": rec["start_unix"],
                 "end_unix": rec["end_unix"]})
    return [ranks[k] for k in sorted(ranks)]
