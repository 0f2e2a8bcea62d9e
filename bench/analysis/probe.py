"""The compute probe, as data: what N workers sharing a node compute when nothing else runs there — no launcher, no
communication library — and when such a measurement may stand for a cell (pure: dicts in, results out; running the
probe and its cache file are bench/backends/local/compute_probe.py's).

Key. A probe answers for every cell with the same compute settings on the same machine: every cell key but
PROBE_FREE_KEYS (who carries the allreduce and how often the cell is measured, none of which changes what one worker
computes), the worker count on the node, and the workload's version. A key added to the cell (bench/cells/keys.py)
is a compute setting until it is listed here: a probe is never shared across a setting nobody has judged.

Stale. A stored probe stands for a cell on the machine it was measured on (hostname, cores this process may use,
kernel release, bench version and PROBE_VERSION: `identity`) for MAX_AGE_S (7 days), if it was measured on a quiet
machine (other processes under LOADED_PER_CORE CPU-s/s per core meanwhile). A run measures it again when any of those
differ, it is older or was measured beside other load (`stale_reason`); the analysis takes, for each cell, the newest
probe of its key on the cell's host measured before the cell ran and at most MAX_AGE_S before it (`match`).

Windows. The N processes start together but do not start computing at one instant (imports, tracing) nor end
together; a window counts only while every process was inside its measured windows (`overlapping`): the rate of a
process working beside N−1 others, not beside N−1 imports or alone after they ended.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from bench.analysis.traffic import samples_per_step
from bench.cells.keys import BOOL_KEYS, CELL_KEYS
from bench.cells.units import IMAGES, RateUnit, format_rate, format_value

PROBE_VERSION = 4  # 2: FSDP2's engine probe times its gradient sync as steps with it on less off; 3: Horovod's engine
# probe pings one 1-element tensor per gradient a step (PyTorch: models/probes/engine_probe.ping; TensorFlow: grouped);
# 4: TensorFlow's pings are made from the gradients, so they wait for the backward pass as the cell's allreduce does
MAX_AGE_S = 7 * 24 * 3600
# A probe measured while other processes used more than this many CPU-seconds per second per core measured the node
# as that load left it: the cells it stood for then keep it, but a later run measures it again (on this project's
# shared 2-core VM a probe beside other jobs' builds read 13.4 img/s a process where the same cell's workers later
# computed at 15.9 on the quiet machine).
LOADED_PER_CORE = 0.25
# Settings a cell may differ in and still share a probe (each with why): the MPI flavour, the engine and the fabric
# carry the allreduce, which the probe leaves out on purpose (it measures compute beside the other workers); repeats,
# jobs, warm-up and steps say how often and how long the cell is measured; the worker count is the probe's own
# `workers`; workers_per_node places workers on nodes (the probe is one node's); max_message_bytes is a collective
# sweep's (no compute).
PROBE_FREE_KEYS = ("mpi", "engine", "ib", "repeats", "jobs", "warmup_steps", "steps", "gpus", "workers_per_node",
                   "max_message_bytes")
COMPUTE_KEYS = tuple(k for k in CELL_KEYS if k not in PROBE_FREE_KEYS)
IDENTITY_KEYS = ("hostname", "cores", "kernel", "bench_version", "probe_version")


def _plain(key: str, v: Any) -> Any:
    """A cell value as JSON keeps it: None for missing (None, NaN), bool for flags, int for integral numbers."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if key in BOOL_KEYS:
        return bool(v)
    if hasattr(v, "item"):  # numpy scalars
        v = v.item()
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def compute_key(cell: Mapping[str, Any], workload_version: str | None = None) -> dict[str, Any]:
    """The settings a probe is measured for: the cell's compute settings, its workers on one node, the workload's
    version (models/registry/workloads.py; taken from the registry when not given)."""
    if workload_version is None:
        from models.registry.workloads import workload_spec

        spec = workload_spec(str(cell.get("model") or "resnet50"), str(cell.get("framework")))
        workload_version = (spec or {}).get("version")
    key = {k: _plain(k, cell.get(k)) for k in COMPUTE_KEYS}
    return {**key, "workers": int(cell["gpus"]), "workload_version": workload_version}


def engine_key(cell: Mapping[str, Any]) -> dict[str, Any]:
    """What an engine probe is measured for (bench/backends/local/engine_probe.py): the compute probe's key and the
    stack that carries the allreduce (the flavour and the engine), whose threads it measures."""
    return {**compute_key(cell), "stack": stack_of(cell)}


def key_text(key: Mapping[str, Any]) -> str:
    """One key as a stable string (the cache's index)."""
    return json.dumps(dict(key), sort_keys=True, separators=(",", ":"))


def colocated(cell: Mapping[str, Any]) -> bool:
    """A multi-worker CPU cell whose workers all share one node: the cells a probe is for."""
    nodes = _plain("nodes", cell.get("nodes")) or 1
    from models.registry.collectives import COLLECTIVES

    return str(cell.get("gpu")) == "cpu" and int(cell.get("gpus") or 1) >= 2 and int(nodes) == 1 \
        and (cell.get("model") or "resnet50") not in COLLECTIVES \
        and _plain("layout", cell.get("layout")) is None  # data parallel training; a sweep or a layout: no N × X(1)


def stale_reason(entry: Mapping[str, Any], identity: Mapping[str, Any], now: float,
                 max_age_s: float = MAX_AGE_S) -> str | None:
    """Why a stored probe no longer stands for this machine (None: it does): another identity, or too old."""
    theirs = entry.get("identity") or {}
    changed = [k for k in IDENTITY_KEYS if theirs.get(k) != identity.get(k)]
    if changed:
        return "; ".join(f"{k} {theirs.get(k)} → {identity.get(k)}" for k in changed)
    load = entry.get("other_load")
    if load is None:
        return "the load beside it was not recorded"
    if load > LOADED_PER_CORE * float(identity.get("cores") or 1):
        return f"measured beside other processes' {load:.1f} CPU-s/s"
    age = now - float(entry.get("measured_unix") or 0.0)
    if age < -60:
        return "measured in the future (the clock moved back)"
    if age > max_age_s:
        return f"{age / 86400:.1f} days old (a probe stands for {max_age_s / 86400:.0f} days)"
    return None


# --- one probe's figures ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProbeResult:
    """N plain processes computing at once on one node: the rate of each, beside the N−1 others."""

    workers: int
    batch: int
    rate: float  # img/s of one process (median over processes of each one's median window)
    rate_low: float  # the slowest and fastest window counted
    rate_high: float
    step_s: float  # batch / rate
    compute_s: float | None  # forward + backward per step (median over processes), where the worker times it
    process_compute_s: tuple[float, ...] = ()  # each process's median compute per step (or its step, if untimed)
    windows: int = 0  # windows counted (all processes)
    measured_unix: float = 0.0
    seconds: float = 0.0  # what measuring it cost (wall)
    identity: dict = field(default_factory=dict)
    other_load: float | None = None  # CPU-s per second other processes used while it ran (None: not known)
    # Engine probes: one step's gradient collectives as the engine sends them, timed alone, the slowest rank's median
    allreduce_s: float | None = None
    # allreduce_s is FSDP2's: its steps with gradient sync on less off (models/probes/engine_probe.py)
    sync_steps: bool = False
    # An engine probe measured again after its cell ran faster than it allowed: {"cell_id", "started_unix" (the
    # cell's first window), "why"} (bench/backends/local/engine_probe.py, again); it stands for that run of the cell
    again_for: dict = field(default_factory=dict)

    @property
    def spread(self) -> float:
        """How unequal N plain processes are on this node: (slowest − fastest) / median of their compute per
        step (of their step where compute is untimed); 0 with one process."""
        xs = self.process_compute_s
        if len(xs) < 2:
            return 0.0
        return (max(xs) - min(xs)) / statistics.median(xs)

    def describe(self, unit: RateUnit = IMAGES) -> str:
        """One line; the rates in the unit users quote for the probed workload (img/s, tokens/s)."""
        others = self.workers - 1
        return (f"{self.workers} plain processes at once: {format_rate(self.rate, unit)} each "
                f"[{format_value(self.rate_low, unit)}, {format_value(self.rate_high, unit)}] "
                f"beside {others} other{'s' if others != 1 else ''}"
                + (f", compute {self.compute_s:.3f} s a step" if self.compute_s else "")
                + f", spread {100 * self.spread:.0f}%"
                + ("" if self.other_load is None else f", other processes {self.other_load:.1f} CPU-s/s"))


def engine_words(r: ProbeResult, unit: RateUnit = IMAGES) -> str:
    """One line for an engine probe (bench/backends/local/engine_probe.py)."""
    return (f"{r.workers} ranks, engine up, no gradient traffic: {format_rate(r.rate, unit)} each "
            f"[{format_value(r.rate_low, unit)}, {format_value(r.rate_high, unit)}]"
            + (f", compute {r.compute_s:.3f} s a step" if r.compute_s else "")
            + ((f"; one step's gradient sync, its steps with it on less off: {r.allreduce_s:.3f} s" if r.sync_steps
                else f"; one step's gradient collectives timed alone: {r.allreduce_s:.3f} s") if r.allreduce_s else "")
            + ("" if r.other_load is None else f", other processes {r.other_load:.1f} CPU-s/s")
            + (f"; measured again: {r.again_for['why']}" if r.again_for.get("why") else ""))


def overlapping(processes: list[list[Mapping[str, Any]]]) -> list[list[Mapping[str, Any]]]:
    """Each process's windows that lie where every process was inside its measured windows: from the latest first
    window's start to the earliest last window's end (a window may start up to SLACK_S before)."""
    live = [p for p in processes if p]
    if len(live) < len(processes) or not live:
        return [[] for _ in processes]
    begin = max(min(w["start_unix"] for w in p) for p in live)
    end = min(max(w["end_unix"] for w in p) for p in live)
    out = []
    for p in processes:
        out.append([w for w in p if w["start_unix"] >= begin - SLACK_S and w["end_unix"] <= end + SLACK_S])
    return out


SLACK_S = 0.25  # a window that starts this much before the last process's first window still counts


def summarize(processes: list[list[Mapping[str, Any]]], batch: int, *, measured_unix: float = 0.0,
              seconds: float = 0.0, identity: Mapping[str, Any] | None = None,
              other_load: float | None = None) -> ProbeResult | None:
    """A ProbeResult from each process's records (one per window); None when a process has no window that overlaps
    every other's (then the probe measured nothing shared)."""
    kept = overlapping(processes) if len(processes) > 1 else processes
    if not kept or any(not p for p in kept):
        return None
    rates, computes, all_rates = [], [], []
    for p in kept:
        # (probes stored before the workload was an axis name the rate images_per_sec)
        r = [float(w.get("samples_per_sec", w.get("images_per_sec"))) for w in p]
        rates.append(statistics.median(r))
        all_rates += r
        c = [_compute_per_step(w) for w in p]
        computes.append(statistics.median(c) if all(x is not None for x in c) else None)
    timed = all(c is not None for c in computes)
    rate = statistics.median(rates)
    per_process = tuple(computes) if timed else tuple(batch / x for x in rates)
    return ProbeResult(workers=len(processes), batch=batch, rate=rate, rate_low=min(all_rates),
                       rate_high=max(all_rates), step_s=batch / rate,
                       compute_s=statistics.median(computes) if timed else None, process_compute_s=per_process,
                       windows=sum(len(p) for p in kept), measured_unix=measured_unix, seconds=seconds,
                       identity=dict(identity or {}), other_load=other_load)


def _compute_per_step(window: Mapping[str, Any]) -> float | None:
    ranks = window.get("per_rank") or []
    phases = (ranks[0].get("phases_s") if ranks else None) or {}
    steps = (ranks[0].get("steps") if ranks else None) or window.get("measured_steps")
    if "compute" not in phases or not steps:
        return None
    return phases["compute"] / steps


def to_entry(key: Mapping[str, Any], result: ProbeResult, raw: list[list[Mapping[str, Any]]]) -> dict[str, Any]:
    """A cache entry: the key, the figures, and each process's windows (rate, compute per step, times) as measured."""
    return {"key": dict(key), "identity": dict(result.identity), "measured_unix": result.measured_unix,
            "seconds": result.seconds, "workers": result.workers, "batch": result.batch, "rate": result.rate,
            "rate_low": result.rate_low, "rate_high": result.rate_high, "compute_s": result.compute_s,
            "process_compute_s": list(result.process_compute_s), "windows": result.windows,
            "other_load": result.other_load, "allreduce_s": result.allreduce_s,
            **({"sync_steps": True} if result.sync_steps else {}),
            **({"again_for": dict(result.again_for)} if result.again_for else {}),
            "processes": [[{"samples_per_sec": w["samples_per_sec"], "compute_s": _compute_per_step(w),
                            "start_unix": w["start_unix"], "end_unix": w["end_unix"]} for w in p] for p in raw]}


def from_entry(entry: Mapping[str, Any]) -> ProbeResult:
    return ProbeResult(workers=int(entry["workers"]), batch=int(entry["batch"]), rate=float(entry["rate"]),
                       rate_low=float(entry["rate_low"]), rate_high=float(entry["rate_high"]),
                       step_s=int(entry["batch"]) / float(entry["rate"]),
                       compute_s=None if entry.get("compute_s") is None else float(entry["compute_s"]),
                       process_compute_s=tuple(float(x) for x in entry.get("process_compute_s") or ()),
                       windows=int(entry.get("windows") or 0), measured_unix=float(entry.get("measured_unix") or 0),
                       seconds=float(entry.get("seconds") or 0), identity=dict(entry.get("identity") or {}),
                       other_load=None if entry.get("other_load") is None else float(entry["other_load"]),
                       allreduce_s=None if entry.get("allreduce_s") is None else float(entry["allreduce_s"]),
                       sync_steps=bool(entry.get("sync_steps")),
                       again_for=dict(entry.get("again_for") or {}))


def fresh(entries: Iterable[Mapping[str, Any]], key: Mapping[str, Any], identity: Mapping[str, Any],
          now: float) -> Mapping[str, Any] | None:
    """The newest entry for `key` that still stands for this machine now (None: measure it)."""
    want = key_text(key)
    mine = [e for e in entries if key_text(e.get("key") or {}) == want and stale_reason(e, identity, now) is None]
    return max(mine, key=lambda e: e["measured_unix"]) if mine else None


def match(entries: Iterable[Mapping[str, Any]], cell: Mapping[str, Any], host: str | None, started: float | None,
          max_age_s: float = MAX_AGE_S, key_of=None) -> ProbeResult | None:
    """The probe that stands for a measured cell: its key (`key_of`: compute_key, or engine_key for engine probes),
    the cell's host, measured before the cell started (a minute's slack) and at most max_age_s before; the newest
    such; but a probe measured again for this run of the cell (ProbeResult.again_for) stands for it first. None for
    cells no probe is for."""
    if not colocated(cell) or host is None or started is None:
        return None
    want = key_text((key_of or compute_key)(cell))
    again = [e for e in entries if e.get("again_for") and key_text(e.get("key") or {}) == want
             and (e.get("identity") or {}).get("hostname") == host
             and e["again_for"].get("cell_id") == cell.get("cell_id")
             and abs(float(e["again_for"].get("started_unix") or 0.0) - started) < 1.0]
    if again:
        return from_entry(max(again, key=lambda e: e["measured_unix"]))
    best = None
    for e in entries:
        if key_text(e.get("key") or {}) != want or (e.get("identity") or {}).get("hostname") != host:
            continue
        t = float(e.get("measured_unix") or 0.0)
        if t <= started + 60 and started - t <= max_age_s and (best is None or t > best["measured_unix"]):
            best = e
    return from_entry(best) if best is not None else None


# --- what co-located cells measured beyond their probe ---------------------------------------------------------------

def stack_of(cell: Mapping[str, Any]) -> str:
    """Who carries the allreduce: the flavour and the engine (what a cost is measured for, besides the key)."""
    return f"{cell.get('mpi')}/{cell.get('engine') or 'horovod'}"


def costs_for(table, windows: Mapping[str, list[list[dict]]], ranks: list[Mapping[str, Any]],
              probes: Mapping[str, ProbeResult], costs: list[Mapping[str, Any]] | None,
              sites: Mapping[str, tuple[str | None, float | None]] | None = None) -> dict[str, list[dict]]:
    """cell_id → the parts earlier runs of the same stack measured with the same probe on the cell's host (from the
    cache: runs this store may no longer hold), leaving out runs the store holds for the cell (those are read from the
    store itself) and any that ended after the cell started."""
    if not costs or table is None or table.empty:
        return {}
    in_store: dict[str, set] = {}
    for r in ranks:
        in_store.setdefault(r["cell_id"], set()).add(r["run_id"])
    out: dict[str, list[dict]] = {}
    for row in table.to_dict("records"):
        probe = probes.get(row["cell_id"])
        if probe is None:
            continue
        host, started = (sites or {}).get(row["cell_id"], (None, None))
        want, stack = key_text(compute_key(row)), stack_of(row)
        mine = [c["parts"] for c in costs
                if key_text(c.get("key") or {}) == want and c.get("stack") == stack
                and c.get("probe_measured_unix") == probe.measured_unix
                and (c.get("identity") or {}).get("hostname") == host
                and c.get("run_id") not in in_store.get(row["cell_id"], set())
                and (started is None or float(c.get("measured_unix") or 0) <= started)]
        if mine:
            out[row["cell_id"]] = mine
    return out


def cell_sites(ok, windows: Mapping[str, list[list[dict]]]) -> dict[str, tuple[str | None, float | None]]:
    """cell_id → (host of its first rank, when its shown run started), for `match`."""
    starts: dict[str, float] = {}
    if ok is not None and not ok.empty and "start_unix" in ok:
        starts = {c: float(s) for c, s in ok.groupby("cell_id")["start_unix"].min().items() if s == s}
    out = {}
    for cell_id in set(starts) | set(windows):
        host = next((str(r.get("host")) for w in windows.get(cell_id, []) for r in w if r.get("host")), None)
        out[cell_id] = (host, starts.get(cell_id))
    return out


def probes_for(table, ok, windows: Mapping[str, list[list[dict]]], entries: list[Mapping[str, Any]] | None,
               key_of=None) -> dict[str, ProbeResult]:
    """cell_id → the probe that stands for it, for every co-located cell of `table` that has one (`key_of`:
    engine_key for engine probes)."""
    if not entries or table is None or table.empty:
        return {}
    sites = cell_sites(ok, windows)
    out = {}
    for r in table.to_dict("records"):
        host, started = sites.get(r["cell_id"], (None, None))
        p = match(entries, r, host, started, key_of=key_of)
        if p is not None:
            out[r["cell_id"]] = p
    return out


def cost_entry(cell: Mapping[str, Any], probe, records: list[Mapping[str, Any]], run_id: str,
               identity: Mapping[str, Any]) -> dict[str, Any] | None:
    """One measured cell's parts beyond its probe (measured_parts), as the cache keeps
    them: for later runs of the same stack with the same probe to compare with. None with no phases."""
    from bench.analysis.step_split import measured_parts

    rates = [float(r["samples_per_sec"]) for r in records if r.get("samples_per_sec")]
    windows = [list(r.get("per_rank") or []) for r in records]
    if not rates or not any(windows):
        return None
    step = int(cell["gpus"]) * samples_per_step(cell) / statistics.median(rates)
    parts = measured_parts(cell, probe, windows, step)
    if parts is None:
        return None
    keep = {k: float(v) for k, v in parts.items() if k in ("engine", "communication", "engine and communication")}
    return {"key": compute_key(cell), "stack": stack_of(cell), "identity": dict(identity), "run_id": run_id,
            "measured_unix": max(float(r.get("end_unix") or 0.0) for r in records),
            "probe_measured_unix": probe.measured_unix, "parts": keep}
