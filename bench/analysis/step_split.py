"""Where a co-located cell's step went, part by part, each with what was measured for it (pure: a cell's row, its
compute probe and its windows in; a Split out).

Co-located cells (workers sharing one CPU node) with a compute probe (bench/analysis/probe.py: the cell's own
workload as N plain processes at once on that node, no communication library). N workers on one node share more
than their cores (memory bandwidth, caches, hyperthreads), so the compute rate to expect is the probe's, not X(1)'s:

    expected X(N) = N · (the probe's per-process rate beside N − 1 others)       interval: its slowest, fastest window

The measured step is then split into parts (`Split`), each with what was measured for it (seconds per step):
    node sharing     the probe's step − batch / X(1) (compute alone vs beside N − 1 others: the probe)
    engine           the least-slowed rank's compute − the probe's compute: the engine's own threads on shared cores
                     (Horovod's background loop, the MPI library's progress and polling), measured by the cell
    imbalance        the slowest rank's compute − the least-slowed rank's; what was measured for it is the probe's
                     spread between N plain processes (at least TOLERANCE of its compute)
    communication    the slowest-computing rank's wait for the allreduce (the others' longer wait is the imbalance)
    rest             the step less the probe's step and the parts above (update, bookkeeping); TOLERANCE of the step
Where the worker does not time compute and communication apart (TensorFlow and Keras: one graph call; DDP: the wait
is inside backward) the step less the probe's step is one part, the engine and its communication together, and the
text says it is not measured apart. A part with earlier runs of the same cell (`history`: in the store; `stored`: kept
beside the probe by earlier runs, bench/backends/local/compute_probe.py) was measured before: it is explained up to the
least of those figures plus TOLERANCE of the step; growth beyond is unexplained. The verdict:
    below expected   the cell's interval top is more than TOLERANCE under the rate it would reach without the
                     unexplained seconds (`verdict` with that rate): "below expected by U% (…), unexplained: …"
    as expected      otherwise, naming the measured parts ("Intel MPI's threads cost 38% of compute on shared cores
                     (measured)")
    not measured apart   a one-part split with no earlier run to compare: neither verdict, and the text says why
Cells with no probe (not co-located, a GPU cell, `--no-probe`, none within its age) keep the rule above.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from bench.analysis.flavours import FlavourFacts
from bench.analysis.traffic import samples_per_step
from bench.cells.units import IMAGES, format_rate, format_value, unit_of_cell
from models.registry.engines import ENGINES, TORCH_DISTRIBUTED_ENGINES

FRAMEWORK_WORDS = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "keras": "Keras"}


@dataclass(frozen=True)
class Part:
    """One part of a co-located cell's step: its seconds per step, what measured it, how much of it what was
    measured for it accounts for (`explained`), and that earlier figure (`reference`, when there is one)."""

    name: str  # "node sharing", "engine", "imbalance", "communication", "rest", "engine and communication"
    seconds: float
    source: str  # "probe", "measured", "not measured apart"
    explained: float
    reference: float | None = None
    words: str = ""  # how it reads when named
    grown: str = ""  # how it reads when it grew beyond what was measured for it

    @property
    def unexplained(self) -> float:
        return max(0.0, self.seconds - self.explained)


@dataclass(frozen=True)
class Split:
    step_s: float  # the cell's step: N · batch / its median rate
    probe_step_s: float  # batch / the probe's per-process rate
    probe_rate: float
    alone_step_s: float | None  # batch / X(1), when the store has a 1-worker cell
    parts: tuple[Part, ...]
    modelled: bool  # compute and communication not timed apart (TensorFlow, Keras, DDP)

    @property
    def unexplained_s(self) -> float:
        return sum(p.unexplained for p in self.parts)

    def part(self, name: str) -> Part | None:
        return next((p for p in self.parts if p.name == name), None)

    def named(self) -> str:
        """The measured parts that make the gap, most first (parts under 1% of the step are left out)."""
        shown = sorted((p for p in self.parts if p.words and p.seconds > 0.01 * self.step_s),
                       key=lambda p: -p.seconds)
        return "; ".join(p.words + (f" ({p.unexplained:.3f} s of it beyond what was measured for it)"
                                    if p.unexplained > 0.005 else "") for p in shown)

    def unexplained_words(self) -> str:
        grown = sorted((p for p in self.parts if p.unexplained > 0.025 * self.step_s and p.grown),
                       key=lambda p: -p.unexplained)
        return "; ".join(p.grown for p in grown)


def rank_phases(windows: list[list[Mapping[str, Any]]]) -> dict[int, dict[str, float]]:
    """rank → phase → seconds per step (median over windows), for ranks that timed their phases."""
    per: dict[int, dict[str, list[float]]] = {}
    for window in windows:
        for r in window:
            phases, steps = r.get("phases_s") or {}, r.get("steps") or 0
            if not phases or steps <= 0:
                continue
            d = per.setdefault(int(r["rank"]), {})
            for p in ("input", "compute", "comm_wait", "update", "other"):
                if p in phases:
                    d.setdefault(p, []).append(phases[p] / steps)
    return {rank: {p: statistics.median(v) for p, v in d.items()} for rank, d in per.items()}


def window_step(windows: list[list[Mapping[str, Any]]]) -> float | None:
    """A run's step from its windows: median over windows of the longest rank window over its steps."""
    steps = []
    for window in windows:
        timed = [r for r in window if r.get("window_s") and r.get("steps")]
        if timed:
            steps.append(max(r["window_s"] / r["steps"] for r in timed))
    return statistics.median(steps) if steps else None


def _engine_name(row: Mapping[str, Any], flavours: FlavourFacts) -> str:
    """Who runs the allreduce beside the compute, as the split names it: Horovod's background loop over the flavour
    (its words are the flavour's own), or DDP's or FSDP2's Gloo process group."""
    engine = ENGINES.get(str(row.get("engine")))
    if engine and engine["torch_distributed"]:
        return f"{engine['label']}'s Gloo threads"
    return flavours.threads_of(row.get("mpi"))


def _timed_apart(row: Mapping[str, Any], phases: Mapping[int, Mapping[str, float]]) -> bool:
    """Compute and the allreduce's wait timed apart on every rank (PyTorch under Horovod)."""
    return row.get("engine") not in TORCH_DISTRIBUTED_ENGINES and len(phases) >= 2 and \
        all("compute" in p and "comm_wait" in p for p in phases.values())


def measured_parts(row: Mapping[str, Any], probe, windows: list[list[Mapping[str, Any]]], step: float
                   ) -> dict[str, float] | None:
    """Seconds per step of each measured part of one run (engine, imbalance, communication, rest; or the engine and
    communication together where they are not timed apart), or None with no phases."""
    phases = rank_phases(windows)
    if _timed_apart(row, phases) and probe.compute_s:
        compute = {rank: p["compute"] for rank, p in phases.items()}
        slow = max(compute, key=compute.get)
        fast = min(compute.values())
        engine = fast - probe.compute_s
        imbalance = compute[slow] - fast
        comm = phases[slow]["comm_wait"]
        rest = step - probe.step_s - engine - imbalance - comm
        return {"engine": engine, "imbalance": imbalance, "communication": comm, "rest": rest,
                "slow_rank": slow, "slow_compute": compute[slow], "fast_compute": fast}
    return {"engine and communication": step - probe.step_s}


def split_step(row: Mapping[str, Any], probe, windows: list[list[Mapping[str, Any]]],
               earlier: list[list[list[Mapping[str, Any]]]], step: float, x1: float | None,
               tolerance: float, flavours: FlavourFacts, stored: Iterable[Mapping[str, float]] = ()) -> Split:
    """The parts of a co-located cell's step (see the module's docstring), each with what was measured for it."""
    n, batch = int(row["gpus"]), samples_per_step(row)
    unit = unit_of_cell(row) or IMAGES
    alone = batch / x1 if x1 else None
    parts: list[Part] = []
    if alone is not None:
        node = probe.step_s - alone
        parts.append(Part("node sharing", node, "probe", node,
                          words=f"node sharing: {n} plain processes compute at {format_rate(probe.rate, unit)} each, "
                                f"{format_value(x1, unit)} alone "
                                f"({probe.rate / x1:.2f}×, compute probe)"))
    now = measured_parts(row, probe, windows, step)
    before = [m for w in earlier if (s := window_step(w)) is not None
              and (m := measured_parts(row, probe, w, s)) is not None] + [dict(m) for m in stored]
    slack = tolerance * step

    def reference(name: str) -> float | None:
        # The least earlier figure: other load on the machine only ever adds to a part, so one slowed earlier run
        # does not make the next slowdown look normal (the median of a healthy and a slowed run would).
        xs = [m[name] for m in before if name in m]
        return min(xs) if xs else None

    engine = _engine_name(row, flavours)
    if "engine" in now:
        c = probe.compute_s
        ref = reference("engine")
        eng = now["engine"]
        allowed = eng if ref is None else min(eng, max(ref, 0.0) + slack)
        parts.append(Part("engine", eng, "measured", allowed, ref,
                          words="" if eng <= 0 else
                          f"{engine} cost {100 * eng / c:.0f}% of compute on shared cores (measured)",
                          grown=f"the ranks' compute on shared cores grew to {100 * eng / c:.0f}% over the compute "
                                f"probe's, where {_runs(before)} of this cell measured {100 * (ref or 0) / c:.0f}% "
                                f"({engine}): {eng - (ref or 0):.3f} s a step more, on every rank"))
        imb, spread = now["imbalance"], max(probe.spread, tolerance) * c
        slow = now["slow_rank"]
        parts.append(Part("imbalance", imb, "measured", min(imb, spread), spread,
                          words="" if imb <= 0 else f"ranks' compute differs by {imb:.3f} s a step (the probe "
                                f"measured up to {spread:.3f} s between {n} plain processes)",
                          grown=f"rank {slow} computed {now['slow_compute']:.3f} s a step, {imb:.3f} s more than the "
                                f"fastest rank, where {n} plain processes differed by {probe.spread * c:.3f} s "
                                f"(compute probe): something beside rank {slow} on its cores"))
        comm, ref = now["communication"], reference("communication")
        parts.append(Part("communication", comm, "measured", comm if ref is None else min(comm, max(ref, 0) + slack),
                          ref, words="" if comm <= 0 else f"exposed communication {comm:.3f} s a step (measured)",
                          grown=f"exposed communication grew to {comm:.3f} s a step, where {_runs(before)} of this "
                                f"cell measured {ref or 0:.3f} s"))
        rest = now["rest"]
        parts.append(Part("rest", rest, "measured", min(rest, slack),
                          words="" if rest < slack else f"the rest of the step (update, bookkeeping) {rest:.3f} s",
                          grown=f"{rest:.3f} s a step beyond compute and communication (update, bookkeeping, waits)"))
        modelled = False
    else:
        both, ref = now["engine and communication"], reference("engine and communication")
        how = {"native": "DDP waits for the allreduce inside backward",
               "fsdp2": "FSDP2 gathers and reduce-scatters inside forward and backward"}.get(
            str(row.get("engine")),
            f"{FRAMEWORK_WORDS.get(str(row.get('framework')), row.get('framework'))} runs its step as one call")
        pct = 100 * both / step
        parts.append(Part("engine and communication", both, "not measured apart",
                          both if ref is None else min(both, max(ref, 0) + slack), ref,
                          words="" if both <= 0 else
                          f"{engine} and exposed communication together {pct:.0f}% of the step "
                          f"(modelled, not measured apart: {how})",
                          grown=f"{engine} and exposed communication together grew to {both:.3f} s a step, where "
                                f"{_runs(before)} of this cell measured {ref or 0:.3f} s (modelled, not measured "
                                f"apart: {how})"))
        modelled = True
    return Split(step, probe.step_s, probe.rate, alone, tuple(parts), modelled)


def _runs(before: list) -> str:
    return "1 earlier run" if len(before) == 1 else f"the least of {len(before)} earlier runs"
