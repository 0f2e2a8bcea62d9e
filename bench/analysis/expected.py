"""Is this number normal? For each measured multi-worker cell, the throughput it should reach given what was measured
on the same machines, the verdict, the slow rank, and where each cell's step time went (pure: frames in, rows out).

Expected value. X(1) is the 1-worker (compute-only) rate of the same series (every setting equal but the worker
count), measured in the same store. Where the store has no such twin, a 1-worker cell that differs only in settings
one worker's rate does not depend on (STAND_IN_KEYS: the MPI flavour, the engine, the fabric, how often the rate was
measured) stands in for it, and the row names it (`stand_in`); with none either, the row says why (`why`: "no
1-worker cell with real data", ...). N workers each compute at X(1), and the step grows by the allreduce that the
backward pass does not hide — from the cell's own stack's measured α-β fit when the store has a usable one
(bench/analysis/collectives.py), else from the data sheet (bench/analysis/whatif.py's LINKS), and the row says which
(`links`). That is whatif.predict(), the same arithmetic as the what-if model:

    expected X(N) = N · batch / step(N)        step(N) = batch / X(1) + exposed allreduce(N)

Interval: the 95% bootstrap interval of X(1) carried through (low: X(1)'s low end with the fit's slow end, α high and
β low; high: the other ends). The data sheet has no interval of its own: its interval is X(1)'s only.

Verdict (measured median M with its 95% interval [M−, M+], expected E with [E−, E+]):
    below expected   M+ < E− · (1 − TOLERANCE)       "below expected by 1 − M/E (interval 1 − M+/E− … 1 − M−/E+)"
    above expected   M− > E+ · (1 + TOLERANCE)
    as expected      otherwise
TOLERANCE is what the expected value does not hold: the machine's other load between the 1-worker cell and this one
(on a shared 2-core machine a 1-worker cell's rate moves by ~10% between runs: docs/diagnose.md), and the engine's
idle loop's cost on shared cores where no contention was measured (ρ_idle 0.77–0.93 beside Horovod's Gloo loop,
docs/scaling-model.md).

Straggler. A synchronous allreduce makes every rank's step as long as the slowest one's, so per-rank step times and
rates are alike; what differs is how long each rank computed before it had to wait. Each rank times its phases
(models/phases.py); the rank whose compute per step is longest, with a compute rate under STRAGGLER_BELOW × the median
of the other ranks', is named (rank, host, ratio).

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
beside the probe by earlier runs, bench/backends/compute_probe.py) was measured before: it is explained up to the least
of those figures plus TOLERANCE of the step; growth beyond is unexplained. The verdict:
    below expected   the cell's interval top is more than TOLERANCE under the rate it would reach without the
                     unexplained seconds (`verdict` with that rate): "below expected by U% (…), unexplained: …"
    as expected      otherwise, naming the measured parts ("Intel MPI's threads cost 38% of compute on shared cores
                     (measured)")
    not measured apart   a one-part split with no earlier run to compare: neither verdict, and the text says why
Cells with no probe (not co-located, a GPU cell, `--no-probe`, none within its age) keep the rule above.

Breakdown. Per step, averaged over ranks, median over windows: input (measured by every worker), compute and exposed
communication (measured where the worker waits for the allreduce apart from backward: PyTorch under Horovod; modelled
elsewhere: compute = batch / X(1) — the probe's per-process rate for a co-located cell with one —, exposed
communication from the model above), and the rest (the step's measured time
less those). `sources` names which parts were measured.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from bench.analysis import AnalysisError
from bench.cell_keys import INPUT_KEYS

TOLERANCE = 0.10
STRAGGLER_BELOW = 0.80
PARTS = ("input", "compute", "communication", "rest")

# The settings in which a 1-worker cell may differ from a multi-worker cell and still give it X(1), because one
# worker's compute does not depend on them; each value tuple is the order of preference when several 1-worker cells
# qualify (the one differing in fewest settings wins first). Everything else must be equal: the GPU, framework,
# precision, batch, image size, memory layout, threads, warm-up and steps per window change the step or what a window
# measures, and so does the data (real data adds decoding and loading to every step: a synthetic 1-worker cell is no
# X(1) for a real-data cell).
STAND_IN_KEYS: dict[str, tuple] = {
    # The MPI flavour (or Gloo) carries the allreduce between workers; one worker exchanges nothing, so the flavour
    # never touches its step. MPI flavours first (a worker started by an MPI launcher, like the cell's own), Open MPI
    # (Horovod's usual build) first of them.
    "mpi": ("openmpi", "intelmpi", "mpich", "gloo"),
    # Horovod or PyTorch's native DDP: the engine wraps the allreduce; one worker's forward, backward and update are
    # the framework's own either way (an allreduce over one rank is no exchange).
    "engine": ("horovod", "native"),
    # The fabric carries traffic between nodes; one worker sends nothing over it.
    "ib": (False, True),
    # How many windows and separate launches measured the rate: more of them narrow X(1)'s interval (which is
    # carried through), they do not move the rate. No preference.
    "repeats": (),
    "jobs": (),
}


@dataclass(frozen=True)
class Straggler:
    rank: int
    host: str
    ratio: float  # its compute rate over the median of the other ranks'

    def describe(self) -> str:
        return f"rank {self.rank} ({self.host}): compute {self.ratio:.2f}× the other ranks' median"


@dataclass(frozen=True)
class Expected:
    cell_id: str
    workers: int
    measured: float
    measured_low: float
    measured_high: float
    expected: float | None  # None: no 1-worker cell in the series (then `why`)
    expected_low: float | None = None
    expected_high: float | None = None
    links: str = ""  # "measured fit" or "data sheet"
    verdict: str = "no expected value"
    gap: float | None = None  # 1 − measured / expected
    gap_low: float | None = None
    gap_high: float | None = None
    straggler: Straggler | None = None
    why: str = ""
    baseline_id: str | None = None  # the 1-worker cell whose rate is X(1)
    stand_in: str = ""  # when that cell is not this one's twin: which it is, e.g. "the openmpi 1-worker cell"
    split: "Split | None" = None  # co-located cells with a compute probe: the step's parts (then links = "compute probe")
    note: str = ""  # why a co-located cell has no probe-based value (e.g. "no compute probe for these settings")

    @property
    def below(self) -> bool:
        return self.verdict.startswith("below")

    def describe(self) -> str:
        if self.expected is None:
            return f"no expected value: {self.why}"
        if self.split is not None:
            sp = self.split
            source = f"compute probe: {self.workers} × {sp.probe_rate:,.1f} img/s, {self.workers} plain processes at once"
        else:
            source = self.links + (f"; X(1) from {self.stand_in} {self.baseline_id}" if self.stand_in else "") \
                + (f"; {self.note}" if self.note else "")
        text = (f"measured {self.measured:,.1f} img/s, expected {self.expected:,.1f} "
                f"[{self.expected_low:,.1f}, {self.expected_high:,.1f}] ({source}): {self.verdict}")
        if self.split is not None and not self.below:
            named = self.split.named()
            text += f": {named}" if named else ""
        return text + (f"; slow: {self.straggler.describe()}" if self.straggler else "")


def verdict(measured: float, low: float, high: float, e: float, e_low: float, e_high: float,
            tolerance: float = TOLERANCE) -> tuple[str, float, float, float]:
    """(verdict text, gap, gap low, gap high) of a measured median and interval against an expected one."""
    gap, gap_low, gap_high = 1 - measured / e, 1 - high / e_low, 1 - low / e_high
    if high < e_low * (1 - tolerance):
        return (f"below expected by {100 * gap:.0f}% ({100 * gap_low:.0f}–{100 * gap_high:.0f}%)",
                gap, gap_low, gap_high)
    if low > e_high * (1 + tolerance):
        return (f"above expected by {-100 * gap:.0f}% ({-100 * gap_high:.0f}–{-100 * gap_low:.0f}%)",
                gap, gap_low, gap_high)
    return "as expected", gap, gap_low, gap_high


def _slow_end(fit, fast: bool):
    """The fit at one end of its intervals (α low and β high when `fast`)."""
    if fit is None or fit.alpha_ci is None:
        return fit
    a = fit.alpha_ci[0] if fast else fit.alpha_ci[1]
    b = fit.beta_ci[1] if fast else fit.beta_ci[0]
    return replace(fit, alpha_s=max(0.0, a), beta_Bps=b)


def expected_rate(row: Mapping[str, Any], x1: float, fit=None) -> tuple[Any, str]:
    """whatif.predict() for one cell at 1-worker rate x1: (Prediction, links)."""
    from bench.analysis.whatif import predict

    gpus, nodes = int(row["gpus"]), int(row.get("nodes") or 1)
    per_node = math.ceil(gpus / nodes) if nodes > 1 else None
    p = predict(row["gpu"], gpus, x1, int(row["batch_per_gpu"]), fabric="ib" if row.get("ib") else "tcp",
                precision=row.get("precision") or "fp32", gpus_per_node=per_node,
                measured=fit if fit is not None and fit.usable else None)
    return p, "measured fit" if p.links.startswith("measured") else "data sheet"


def straggler(ranks_by_window: Iterable[list[Mapping[str, Any]]], below: float = STRAGGLER_BELOW) -> Straggler | None:
    """The rank whose compute per step is longest, when its compute rate is under `below` × the other ranks'
    median; None when no rank timed its compute or none is that slow."""
    per_rank: dict[int, list[float]] = {}
    hosts: dict[int, str] = {}
    for window in ranks_by_window:
        for r in window:
            phases, steps = r.get("phases_s") or {}, r.get("steps") or 0
            if "compute" in phases and steps > 0 and phases["compute"] > 0:
                per_rank.setdefault(int(r["rank"]), []).append(phases["compute"] / steps)
                hosts[int(r["rank"])] = str(r.get("host", "?"))
    if len(per_rank) < 2:
        return None
    compute = {rank: statistics.median(ts) for rank, ts in per_rank.items()}
    slow = max(compute, key=compute.get)
    others = statistics.median(t for rank, t in compute.items() if rank != slow)
    ratio = others / compute[slow]
    return Straggler(slow, hosts[slow], ratio) if ratio < below else None


def expected_with_probes(table, ok, fits: Mapping[tuple, Any], windows, ranks: list[dict],
                         probes: Mapping[str, list[dict]] | None):
    """Each multi-worker cell's Expected (expected_cells), co-located cells' resting on the stored compute probe each
    ran with and on what earlier runs of its stack measured beyond it. `probes`: {"entries": [...], "costs": [...]}
    as bench/backends/compute_probe.py stores them; None = not looked up. Returns (cell_id → ProbeResult or None,
    the Expected list): `bench status` and the report read both from here."""
    from bench.analysis.probe import cell_sites, costs_for, probes_for

    found = probes_for(table, ok, windows, probes["entries"]) if probes is not None else None
    stored = costs_for(table, windows, ranks, found, probes["costs"], cell_sites(ok, windows)) if found else {}
    return found, list(expected_cells(table, fits, windows, found, earlier_windows(ranks, ok), stored))


def expected_cells(table, fits: Mapping[tuple, Any] | None = None,
                   ranks: Mapping[str, list[list[dict]]] | None = None, probes: Mapping[str, Any] | None = None,
                   history: Mapping[str, list[list[list[dict]]]] | None = None,
                   stored: Mapping[str, list[Mapping[str, float]]] | None = None) -> list[Expected]:
    """One Expected per multi-worker cell of `table` (analysis.scaling.scaling() rows, with boot_low/boot_high);
    `fits`: collectives.fit_stacks() of the same store; `ranks`: cell_id → its windows' per_rank lists;
    `probes`: cell_id → the probe.ProbeResult that stands for it (probe.probes_for); `history`: cell_id → the
    windows of each earlier run of the cell (earlier_windows); `stored`: cell_id → the parts earlier runs of its
    stack measured with the same probe, from the probe cache (probe.costs_for), for runs the store does not hold."""
    from bench.analysis.collectives import stack_of
    from bench.analysis.probe import colocated

    out = []
    rows = table.to_dict("records")
    find = OneWorker(rows)
    for r in rows:
        if int(r["gpus"]) < 2:
            continue
        lead = Expected(r["cell_id"], int(r["gpus"]), float(r["images_per_sec"]), _low(r), _high(r),
                        None, straggler=straggler((ranks or {}).get(r["cell_id"], [])))
        one, differs = find.baseline(r)
        probe = (probes or {}).get(r["cell_id"])
        if probe is not None:
            x1 = float(one["images_per_sec"]) if one is not None else None
            lead = replace(lead, baseline_id=one["cell_id"] if one is not None else None,
                           stand_in=stand_in_words(one, differs) if one is not None else "")
            out.append(probed(lead, r, probe, (ranks or {}).get(r["cell_id"], []),
                              (history or {}).get(r["cell_id"], []), x1, stored=(stored or {}).get(r["cell_id"], ())))
            continue
        if colocated({**r, "nodes": r.get("nodes") or 1}) and probes is not None:
            lead = replace(lead, note="no compute probe for these settings on this machine: N × X(1)")
        if one is None:
            out.append(replace(lead, why=find.why_none(r)))
            continue
        lead = replace(lead, baseline_id=one["cell_id"], stand_in=stand_in_words(one, differs))
        fit = (fits or {}).get(stack_of(r)) if all(k in r for k in ("engine", "nodes")) else None
        try:
            mid, links = expected_rate(r, float(one["images_per_sec"]), fit)
            lo, _ = expected_rate(r, _low(one), _slow_end(fit, fast=False))
            hi, _ = expected_rate(r, _high(one), _slow_end(fit, fast=True))
        except (AnalysisError, KeyError, ValueError) as e:
            out.append(replace(lead, why=f"the model cannot predict it ({e})"))
            continue
        e, e_lo, e_hi = mid.images_per_sec, min(lo.images_per_sec, mid.images_per_sec), \
            max(hi.images_per_sec, mid.images_per_sec)
        text, gap, g_lo, g_hi = verdict(lead.measured, lead.measured_low, lead.measured_high, e, e_lo, e_hi)
        out.append(replace(lead, expected=e, expected_low=e_lo, expected_high=e_hi, links=links, verdict=text,
                           gap=gap, gap_low=g_lo, gap_high=g_hi))
    return out


# --- co-located cells: the compute probe and the step's parts ---------------------------------------------------

# Who runs the allreduce beside the compute, as the split names it: Horovod's background loop over the flavour (the MPI
# library's progress and polling threads, or Gloo's), or DDP's Gloo process group. Analysis sits below bench/launch
# (docs/architecture.md, "Layers"), so it cannot ask the flavour; tests/test_compute_probe.py keeps one entry per
# registered flavour.
ENGINE_WORDS = {"gloo": "Horovod's Gloo threads", "openmpi": "Open MPI's threads", "intelmpi": "Intel MPI's threads",
                "mpich": "MPICH's threads"}
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


def _engine_name(row: Mapping[str, Any]) -> str:
    if row.get("engine") == "native":
        return "DDP's Gloo threads"
    return ENGINE_WORDS.get(str(row.get("mpi")), f"{row.get('mpi')}'s threads")


def _timed_apart(row: Mapping[str, Any], phases: Mapping[int, Mapping[str, float]]) -> bool:
    """Compute and the allreduce's wait timed apart on every rank (PyTorch under Horovod)."""
    return row.get("engine") != "native" and len(phases) >= 2 and \
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


def probed(lead: Expected, row: Mapping[str, Any], probe, windows: list[list[Mapping[str, Any]]],
           earlier: list[list[list[Mapping[str, Any]]]], x1: float | None, tolerance: float = TOLERANCE,
           stored: Iterable[Mapping[str, float]] = ()) -> Expected:
    """A co-located cell's expected value from its compute probe, the split of its step, and the verdict on the part
    no measurement accounts for."""
    n, batch = lead.workers, int(row["batch_per_gpu"])
    e, e_lo, e_hi = n * probe.rate, n * probe.rate_low, n * probe.rate_high
    step = n * batch / lead.measured
    split = split_step(row, probe, windows, earlier, step, x1, tolerance, stored)
    gap = 1 - lead.measured / e
    base = replace(lead, expected=e, expected_low=min(e_lo, e), expected_high=max(e_hi, e), links="compute probe",
                   split=split, gap=gap, gap_low=1 - lead.measured_high / max(e_lo, 1e-12),
                   gap_high=1 - lead.measured_low / max(e_hi, 1e-12))
    text, *_ = verdict(lead.measured, lead.measured_low, lead.measured_high, e, base.expected_low, base.expected_high,
                       tolerance)
    if not text.startswith("below"):
        return replace(base, verdict=text)
    u = split.unexplained_s
    reach = n * batch / max(step - u, 1e-12)  # the rate without the unexplained seconds
    text, g, g_lo, g_hi = verdict(lead.measured, lead.measured_low, lead.measured_high, reach, reach, reach, tolerance)
    if text.startswith("below"):
        why = split.unexplained_words() or f"{u:.3f} s a step no measured part accounts for"
        return replace(base, verdict=f"{text}, unexplained: {why}", gap=g, gap_low=g_lo, gap_high=g_hi)
    if not split.modelled:
        return replace(base, verdict=f"as expected ({100 * gap:.0f}% under the probe's rate, all of it measured)")
    whole = split.parts[-1]
    if whole.reference is None:  # one part, and nothing measured for it before: not judged either way
        return replace(base, verdict=f"not measured apart ({100 * gap:.0f}% under the probe's rate; no earlier run "
                                     f"of this cell to compare)")
    return replace(base, verdict=f"as expected ({100 * gap:.0f}% under the probe's rate, as in earlier runs)")


def split_step(row: Mapping[str, Any], probe, windows: list[list[Mapping[str, Any]]],
               earlier: list[list[list[Mapping[str, Any]]]], step: float, x1: float | None,
               tolerance: float = TOLERANCE, stored: Iterable[Mapping[str, float]] = ()) -> Split:
    """The parts of a co-located cell's step (see the module's docstring), each with what was measured for it."""
    n, batch = int(row["gpus"]), int(row["batch_per_gpu"])
    alone = batch / x1 if x1 else None
    parts: list[Part] = []
    if alone is not None:
        node = probe.step_s - alone
        parts.append(Part("node sharing", node, "probe", node,
                          words=f"node sharing: {n} plain processes compute at {probe.rate:,.1f} img/s each, "
                                f"{x1:,.1f} alone ({probe.rate / x1:.2f}×, compute probe)"))
    now = measured_parts(row, probe, windows, step)
    before = [m for w in earlier if (s := window_step(w)) is not None
              and (m := measured_parts(row, probe, w, s)) is not None] + [dict(m) for m in stored]
    slack = tolerance * step

    def reference(name: str) -> float | None:
        # The least earlier figure: other load on the machine only ever adds to a part, so one slowed earlier run
        # does not make the next slowdown look normal (the median of a healthy and a slowed run would).
        xs = [m[name] for m in before if name in m]
        return min(xs) if xs else None

    engine = _engine_name(row)
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
                          words="" if imb <= 0 else f"ranks' compute differs by {imb:.3f} s a step (the probe measured up to "
                                f"{spread:.3f} s between {n} plain processes)",
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
        how = ("DDP waits for the allreduce inside backward" if row.get("engine") == "native" else
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


def cost_entry(cell: Mapping[str, Any], probe, records: list[Mapping[str, Any]], run_id: str,
               identity: Mapping[str, Any]) -> dict[str, Any] | None:
    """One measured cell's parts beyond its probe (measured_parts), as the cache keeps
    them: for later runs of the same stack with the same probe to compare with. None with no phases."""
    from bench.analysis.probe import compute_key, stack_of

    rates = [float(r["images_per_sec"]) for r in records if r.get("images_per_sec")]
    windows = [list(r.get("per_rank") or []) for r in records]
    if not rates or not any(windows):
        return None
    step = int(cell["gpus"]) * int(cell["batch_per_gpu"]) / statistics.median(rates)
    parts = measured_parts(cell, probe, windows, step)
    if parts is None:
        return None
    keep = {k: float(v) for k, v in parts.items() if k in ("engine", "communication", "engine and communication")}
    return {"key": compute_key(cell), "stack": stack_of(cell), "identity": dict(identity), "run_id": run_id,
            "measured_unix": max(float(r.get("end_unix") or 0.0) for r in records),
            "probe_measured_unix": probe.measured_unix, "parts": keep}


def _runs(before: list) -> str:
    return "1 earlier run" if len(before) == 1 else f"the least of {len(before)} earlier runs"


def earlier_windows(ranks: list[dict], ok) -> dict[str, list[list[list[dict]]]]:
    """cell_id → the windows of each run of the cell before the one the table shows (run ids start with their UTC
    start time, so they sort in time): what was measured for its parts before."""
    if ok.empty or not ranks:
        return {}
    shown = dict(zip(ok["cell_id"], ok["run_id"]))
    runs: dict[str, dict[str, list[list[dict]]]] = {}
    for r in ranks:
        current = shown.get(r["cell_id"])
        if current is not None and str(r["run_id"]) < str(current):
            runs.setdefault(r["cell_id"], {}).setdefault(r["run_id"], []).append(r["per_rank"])
    return {cell: [w for _, w in sorted(by_run.items())] for cell, by_run in runs.items()}


def windows_of(ranks: list[dict], ok) -> dict[str, list[list[dict]]]:
    """cell_id → the per_rank lists of its windows in the run the table shows (the latest complete one)."""
    if ok.empty or not ranks:
        return {}
    shown = set(zip(ok["cell_id"], ok["run_id"]))
    out: dict[str, list[list[dict]]] = {}
    for r in ranks:
        if (r["cell_id"], r["run_id"]) in shown:
            out.setdefault(r["cell_id"], []).append(r["per_rank"])
    return out


class OneWorker:
    """Finds the 1-worker cell whose rate is a multi-worker cell's X(1) among `rows` (cell_summary rows): its twin
    (every setting equal but the worker count), else the best stand-in (STAND_IN_KEYS); and, when there is neither,
    why not, in words a reader can act on."""

    def __init__(self, rows: list[Mapping[str, Any]]):
        from bench.analysis.scaling import SERIES_KEYS

        self.keys = list(SERIES_KEYS)
        self.ones = [r for r in rows if int(r["gpus"]) == 1]
        self.twins = {_series(r): r for r in self.ones}
        self.by_rest: dict[tuple, list[Mapping[str, Any]]] = {}
        for r in self.ones:
            self.by_rest.setdefault(_rest(r), []).append(r)

    def baseline(self, row: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, tuple[str, ...]]:
        """(the 1-worker cell, the STAND_IN_KEYS it differs in: () for the twin), or (None, ())."""
        twin = self.twins.get(_series(row))
        if twin is not None:
            return twin, ()
        best = None
        for one in self.by_rest.get(_rest(row), ()):
            differs = tuple(k for k in STAND_IN_KEYS if _value(one, k) != _value(row, k))
            rank = (len(differs), tuple(_preference(k, _value(one, k)) for k in STAND_IN_KEYS), str(one["cell_id"]))
            if best is None or rank < best[0]:
                best = (rank, one, differs)
        return (best[1], best[2]) if best else (None, ())

    def why_none(self, row: Mapping[str, Any]) -> str:
        """Why `row` has no X(1): no 1-worker cell at all, none with its data, or what the nearest one differs in."""
        if not self.ones:
            return "no 1-worker cell in this store"
        import numpy as np

        mine = np.array([_value(row, k) for k in self.keys], dtype=object)
        theirs = np.array([[_value(r, k) for k in self.keys] for r in self.ones], dtype=object)
        free = np.array([k in STAND_IN_KEYS for k in self.keys])
        differ = (theirs != mine) & ~free
        nearest = differ[int(np.argmin(differ.sum(axis=1)))]
        keys = [k for k, d in zip(self.keys, nearest) if d]
        if "data" in keys and set(keys) <= set(INPUT_KEYS):
            return f"no 1-worker cell with {'real' if row.get('data') == 'imagenet' else 'synthetic'} data"
        if keys == ["gpu"]:
            return f"no 1-worker cell on {row.get('gpu')}"
        if set(keys) <= set(INPUT_KEYS):
            return f"no 1-worker cell with the same input pipeline (the nearest differs in {', '.join(keys)})"
        return f"no 1-worker cell with the same compute settings (the nearest differs in {', '.join(keys)})"


_STAND_IN_WORDS = {"engine": {"horovod": "Horovod", "native": "DDP"}, "ib": {True: "IB on", False: "IB off"}}
_COUNT_WORDS = {"repeats": "repeat", "jobs": "job"}


def stand_in_words(one: Mapping[str, Any], differs: tuple[str, ...]) -> str:
    """"the openmpi 1-worker cell": the stand-in named by the settings it differs in; "" for a twin."""
    if not differs:
        return ""
    words = [f"{_value(one, k)}-{_COUNT_WORDS[k]}" if k in _COUNT_WORDS else
             str(_STAND_IN_WORDS.get(k, {}).get(_value(one, k), _value(one, k))) for k in differs]
    return f"the {' · '.join(words)} 1-worker cell"


def _value(row: Mapping[str, Any], key: str):
    v = row.get(key)
    if _missing(v):
        return None
    return bool(v) if key in ("ib", "channels_last") else v


def _preference(key: str, value) -> int:
    order = STAND_IN_KEYS[key]
    return order.index(value) if value in order else len(order)


def _series(row: Mapping[str, Any]) -> tuple:
    from bench.analysis.scaling import SERIES_KEYS

    return tuple(None if _missing(row.get(k)) else row.get(k) for k in SERIES_KEYS)


def _rest(row: Mapping[str, Any]) -> tuple:
    """The series less STAND_IN_KEYS: what a stand-in must share."""
    from bench.analysis.scaling import SERIES_KEYS

    return tuple(_value(row, k) for k in SERIES_KEYS if k not in STAND_IN_KEYS)


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _low(r: Mapping[str, Any]) -> float:
    v = r.get("boot_low")
    return float(r["images_per_sec"] if _missing(v) else v)


def _high(r: Mapping[str, Any]) -> float:
    v = r.get("boot_high")
    return float(r["images_per_sec"] if _missing(v) else v)


# --- where the time went -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Breakdown:
    cell_id: str
    step_s: float
    parts: dict[str, float]  # PARTS → seconds per step
    sources: dict[str, str]  # PARTS → "measured" | "modelled"


def breakdown(row: Mapping[str, Any], windows: list[list[Mapping[str, Any]]], x1: float | None = None,
              exposed_s: float | None = None) -> Breakdown | None:
    """One cell's step split into PARTS from its windows' per-rank phases; compute and communication are modelled
    (compute = batch / x1, communication = exposed_s) where the worker did not time them apart. None when no window
    carries phases."""
    per_window = []
    for window in windows:
        timed = [r for r in window if r.get("phases_s") and r.get("steps")]
        if not timed:
            continue
        mean = {p: statistics.fmean((r["phases_s"].get(p, 0.0)) / r["steps"] for r in timed)
                for p in ("input", "compute", "comm_wait", "update", "other")}
        mean["step"] = statistics.fmean(sum(r["phases_s"].values()) / r["steps"] for r in timed)
        mean["split"] = all("compute" in r["phases_s"] for r in timed)
        per_window.append(mean)
    if not per_window:
        return None
    med = {k: statistics.median(w[k] for w in per_window) for k in per_window[0] if k != "split"}
    step = med["step"]
    if all(w["split"] for w in per_window):
        parts = {"input": med["input"], "compute": med["compute"], "communication": med["comm_wait"]}
        sources = dict.fromkeys(PARTS, "measured")
    else:
        compute = int(row["batch_per_gpu"]) / x1 if x1 else 0.0
        comm = exposed_s if exposed_s is not None and int(row["gpus"]) > 1 else 0.0
        parts = {"input": med["input"], "compute": min(compute, step - med["input"]),
                 "communication": comm}
        sources = {"input": "measured", "compute": "modelled", "communication": "modelled", "rest": "measured"}
    parts["rest"] = max(0.0, step - sum(parts.values()))
    return Breakdown(row["cell_id"], step, {p: parts[p] for p in PARTS}, sources)


def breakdowns(table, ranks: Mapping[str, list[list[dict]]], fits: Mapping[tuple, Any] | None = None,
               probes: Mapping[str, Any] | None = None) -> list[Breakdown]:
    """A Breakdown per cell of `table` that has per-rank phases; where compute is modelled, a co-located cell's
    compute is its probe's (`probes`: cell_id → probe.ProbeResult), not the 1-worker rate's."""
    from bench.analysis.collectives import stack_of

    rows = table.to_dict("records")
    find = OneWorker(rows)
    out = []
    for r in rows:
        windows = ranks.get(r["cell_id"])
        if not windows:
            continue
        one = r if int(r["gpus"]) == 1 else find.baseline(r)[0]
        x1 = float(one["images_per_sec"]) if one is not None else None
        exposed = None
        if x1 and int(r["gpus"]) > 1:
            fit = (fits or {}).get(stack_of(r)) if all(k in r for k in ("engine", "nodes")) else None
            try:
                exposed = expected_rate(r, x1, fit)[0].exposed_s
            except (AnalysisError, KeyError, ValueError):
                exposed = None
        probe = (probes or {}).get(r["cell_id"])
        b = breakdown(r, windows, probe.rate if probe is not None else x1, exposed)
        if b is not None:
            out.append(b)
    return out
