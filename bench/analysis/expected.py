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

Breakdown. Per step, averaged over ranks, median over windows: input (measured by every worker), compute and exposed
communication (measured where the worker waits for the allreduce apart from backward: PyTorch under Horovod; modelled
elsewhere: compute = batch / X(1), exposed communication from the model above), and the rest (the step's measured time
less those). `sources` names which parts were measured.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from bench.analysis import AnalysisError

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
# The settings of the input pipeline: a 1-worker cell differing only in these is "no 1-worker cell with real data".
DATA_KEYS = ("data", "data_layout", "loader_workers")


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

    @property
    def below(self) -> bool:
        return self.verdict.startswith("below")

    def describe(self) -> str:
        if self.expected is None:
            return f"no expected value: {self.why}"
        source = self.links + (f"; X(1) from {self.stand_in} {self.baseline_id}" if self.stand_in else "")
        text = (f"measured {self.measured:,.1f} img/s, expected {self.expected:,.1f} "
                f"[{self.expected_low:,.1f}, {self.expected_high:,.1f}] ({source}): {self.verdict}")
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


def expected_cells(table, fits: Mapping[tuple, Any] | None = None,
                   ranks: Mapping[str, list[list[dict]]] | None = None) -> list[Expected]:
    """One Expected per multi-worker cell of `table` (analysis.scaling.scaling() rows, with boot_low/boot_high);
    `fits`: collectives.fit_stacks() of the same store; `ranks`: cell_id → its windows' per_rank lists."""
    from bench.analysis.collectives import stack_of

    out = []
    rows = table.to_dict("records")
    find = OneWorker(rows)
    for r in rows:
        if int(r["gpus"]) < 2:
            continue
        lead = Expected(r["cell_id"], int(r["gpus"]), float(r["images_per_sec"]), _low(r), _high(r),
                        None, straggler=straggler((ranks or {}).get(r["cell_id"], [])))
        one, differs = find.baseline(r)
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
        if "data" in keys and set(keys) <= set(DATA_KEYS):
            return f"no 1-worker cell with {'real' if row.get('data') == 'imagenet' else 'synthetic'} data"
        if keys == ["gpu"]:
            return f"no 1-worker cell on {row.get('gpu')}"
        if set(keys) <= set(DATA_KEYS):
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


def breakdowns(table, ranks: Mapping[str, list[list[dict]]], fits: Mapping[tuple, Any] | None = None
               ) -> list[Breakdown]:
    """A Breakdown per cell of `table` that has per-rank phases."""
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
        b = breakdown(r, windows, x1, exposed)
        if b is not None:
            out.append(b)
    return out
