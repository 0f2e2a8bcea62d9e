"""Latency α and bandwidth β of a stack, fitted from its measured allreduce sweep (pure: rows in, numbers out).

The model of one allreduce of `bytes` over n ranks (ring: each link carries 2(n−1)/n of the message):

    time = α + k · bytes / β        k = 2(n−1)/n

α is the whole collective's fixed cost (launch, Horovod's cycle, the ring's 2(n−1) hops), β the bandwidth each link
delivers: with this k, β is what nccl-tests calls bus bandwidth at large sizes, comparable with the link's rate.

The fit is weighted least squares with weights 1/time² (each point's relative error counts the same), so the small
sizes decide α and the large ones β; an unweighted fit would let the largest message drown α. The interval is a
percentile bootstrap over the points (bench/analysis/stats/intervals.py, seeded: the same rows give the same interval).

A stack is (gpu, mpi, ib, engine, nodes): the fabric is the SKU's and `ib`'s, the launcher the MPI flavour's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

import numpy as np

from bench.analysis.stats.intervals import bootstrap

STACK_KEYS = ("gpu", "mpi", "ib", "engine", "nodes")
MIN_SIZES = 3
# Bus bandwidth may dip a little past a cache size; a fall by more than this fraction below the best bandwidth of
# any smaller size means the curve is not one α and one β (contention, a protocol switch, a noisy run).
MAX_BANDWIDTH_DROP = 0.30
# At the largest size the bytes must take at least this share of the time, or there is no bandwidth to measure.
MIN_BANDWIDTH_SHARE = 0.05
BOOTSTRAP = 1000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class AlphaBeta:
    """A fitted stack, or why it cannot be used (`reason`; then α and β are None)."""

    stack: tuple
    sizes: int
    points: int
    alpha_s: float | None = None
    beta_Bps: float | None = None
    alpha_ci: tuple[float, float] | None = None
    beta_ci: tuple[float, float] | None = None
    reason: str | None = None
    # A lone size whose bandwidth fell below the curve while larger sizes came back (a noisy size, not a curve that
    # falls): (bytes, its bus bandwidth in B/s), left out of α and β only; its measured time still prices operations of
    # its size (alone_by_size). () when every size is on the line.
    left_out: tuple[tuple[int, float], ...] = ()
    # CPU seconds per wall second the collective cost its busiest rank at the sizes bandwidth decides (median), from
    # the sweep's cpu_time_median_s; None when the sweep did not measure it. ~1: the engine polls while it waits.
    cpu_share: float | None = None
    # Compute and collective on shared cores (CPU sweeps that measured it, medians over repeats): the compute rate,
    # as a fraction of its rate alone, while the engine idles and while the largest allreduce is in flight, and that
    # allreduce's time under the load over its time alone (`stretch`). None: not measured (GPU, older sweeps).
    idle_compute_ratio: float | None = None
    contended_compute_ratio: float | None = None
    contended_stretch: float | None = None
    # The same per size, where the sweep measured it at several (models/workloads/collectives/contention.py,
    # CONTENDED_SIZES): (bytes, stretch, compute ratio during), medians over the sweeps, in size order. What one of
    # Horovod's fused operations of a given size costs on shared cores (bench/analysis/fusion.py); () when only one size
    # was measured.
    contended_by_size: tuple[tuple[int, float, float], ...] = ()
    # Every size's measured time alone (bytes, median over the sweeps), in size order: what a fused operation of a
    # size costs alone, read off the sweep rather than α + k·n/β, since on a shaped link α and β come from the
    # sizes the token bucket cannot carry and their line extrapolated to a few hundred KB can fall below zero.
    alone_by_size: tuple[tuple[int, float], ...] = ()
    # Compute beside a replay of one training step's gradient stream (models/workloads/collectives/contention.py replay;
    # medians over the sweeps): the probe's rate as a fraction of its rate alone on the slowest rank — the pace of a
    # backward pass beside its own 161 gradients in flight — and the stream's tail after it. None: not measured (older
    # sweeps, GPU).
    replay_compute_ratio: float | None = None
    replay_tail_s: float | None = None

    @property
    def contention_measured(self) -> bool:
        return None not in (self.idle_compute_ratio, self.contended_compute_ratio, self.contended_stretch)

    @property
    def per_operation_measured(self) -> bool:
        """Contention known at two sizes or more: enough to price each fused operation by its size."""
        return self.contention_measured and len(self.contended_by_size) >= 2

    def shared_operation(self, ranks: int, nbytes: float) -> tuple[float, float]:
        """One allreduce of nbytes beside compute on shared cores: (its time, the compute's rate meanwhile as a
        fraction of its rate alone). Stretch and rate are interpolated in log size between the measured sizes and
        held at the nearest one outside them."""
        sizes = np.log([b for b, _, _ in self.contended_by_size])
        at = math.log(max(nbytes, 1.0))
        stretch = float(np.interp(at, sizes, [s for _, s, _ in self.contended_by_size]))
        during = float(np.interp(at, sizes, [d for _, _, d in self.contended_by_size]))
        return stretch * self.operation_s(ranks, nbytes), during

    def operation_s(self, ranks: int, nbytes: float) -> float:
        """One allreduce of nbytes alone: the sweep's measured times interpolated in log time over log size (the
        smallest size's below it; above the largest, its time grown at the fit's bandwidth), else α + k·n/β."""
        if not self.alone_by_size:
            return max(0.0, self.allreduce_s(ranks, nbytes))
        sizes = [b for b, _ in self.alone_by_size]
        if nbytes > sizes[-1]:
            return self.alone_by_size[-1][1] + 2 * (ranks - 1) / ranks * (nbytes - sizes[-1]) / self.beta_Bps
        return float(np.exp(np.interp(math.log(max(nbytes, 1.0)), np.log(sizes),
                                      np.log([t for _, t in self.alone_by_size]))))

    @property
    def usable(self) -> bool:
        return self.reason is None

    def allreduce_s(self, ranks: int, nbytes: float) -> float:
        """Predicted time of one allreduce of nbytes over `ranks` ranks on this stack."""
        if not self.usable:
            raise ValueError(f"stack {self.stack}: {self.reason}")
        if ranks <= 1:
            return 0.0
        return self.alpha_s + 2 * (ranks - 1) / ranks * nbytes / self.beta_Bps

    def describe(self) -> str:
        if not self.usable:
            return f"unusable: {self.reason}"
        return (f"α {self.alpha_s * 1e6:.0f} µs [{self.alpha_ci[0] * 1e6:.0f}, {self.alpha_ci[1] * 1e6:.0f}], "
                f"β {self.beta_Bps / 1e9:.3f} GB/s [{self.beta_ci[0] / 1e9:.3f}, {self.beta_ci[1] / 1e9:.3f}]"
                + "".join(f", {size:,} bytes left out of the line ({bw / 1e9:.3f} GB/s, a lone dip)"
                          for size, bw in self.left_out)
                + (f", CPU {self.cpu_share:.2f} s/s" if self.cpu_share is not None else "")
                + (f", compute ×{self.idle_compute_ratio:.2f} idle / ×{self.contended_compute_ratio:.2f} during, "
                   f"allreduce ×{self.contended_stretch:.2f} under load" if self.contention_measured else ""))


def _wls(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Intercept and slope of y = a + b x, weights 1/y²."""
    w = 1 / y
    a_col = np.column_stack([w, x * w])
    (a, b), *_ = np.linalg.lstsq(a_col, y * w, rcond=None)
    return float(a), float(b)


def _refit(x: np.ndarray, y: np.ndarray) -> tuple[float, float] | None:
    """α and β of one bootstrap resample of the points; None when it has one size only or a time that falls."""
    if len(np.unique(x)) < 2:
        return None
    a, b = _wls(x, y)
    return (a, 1 / b) if b > 0 else None


def fit_alpha_beta(rows: Iterable[Mapping[str, Any]], stack: tuple = ()) -> AlphaBeta:
    """α and β of one stack from its allreduce rows (each: bytes, time_median_s, world_size; one per size per
    repeat). Unusable, with the reason, when there are too few sizes, a single rank, a bandwidth curve that falls,
    or a time that does not grow with size."""
    rows = [r for r in rows if r.get("op", "allreduce") == "allreduce"]  # allgather/broadcast move other shares
    sizes = sorted({int(r["bytes"]) for r in rows})
    base = dict(stack=stack, sizes=len(sizes), points=len(rows))
    if not rows:
        return AlphaBeta(**base, reason="no allreduce rows (α and β are fitted from allreduce sweeps only)")
    if len(sizes) < MIN_SIZES:
        return AlphaBeta(**base, reason=f"too few message sizes: {len(sizes)} (a fit needs at least {MIN_SIZES})")
    worlds = {int(r["world_size"]) for r in rows}
    if min(worlds) < 2:
        return AlphaBeta(**base, reason="a single rank reduces nothing: no link to fit")
    k = np.array([2 * (int(r["world_size"]) - 1) / int(r["world_size"]) for r in rows])
    x = k * np.array([float(r["bytes"]) for r in rows])
    y = np.array([float(r["time_median_s"]) for r in rows])
    if (y <= 0).any():
        return AlphaBeta(**base, reason="a time that is not positive")
    # The bandwidth curve (median over repeats per size, in size order): size → bus bandwidth.
    busbw = {s: float(np.median([xi / yi for xi, yi, r in zip(x, y, rows) if int(r["bytes"]) == s])) for s in sizes}
    k_of = {int(r["bytes"]): 2 * (int(r["world_size"]) - 1) / int(r["world_size"]) for r in rows}
    on_line = np.ones(len(rows), dtype=bool)
    left_out: tuple[tuple[int, float], ...] = ()
    while True:
        alpha, slope = _wls(x[on_line], y[on_line])
        if slope * x.max() < MIN_BANDWIDTH_SHARE * (abs(alpha) + slope * x.max()):
            return AlphaBeta(**base, reason=f"the time does not grow with the message size (bandwidth is under "
                                            f"{MIN_BANDWIDTH_SHARE:.0%} of the largest size's time): no bandwidth to "
                                            f"fit")
        # Where bandwidth decides the time (the bytes take at least as long as α by the fit): below that, busbw is
        # size / latency and jitters with it.
        kept = [s for s in sizes if s not in dict(left_out)]
        curve = [s for s in kept if k_of[s] * s * slope >= alpha] or kept[-1:]
        dips = _dips(curve, busbw)
        if not dips:
            break
        size, bw, best = dips[0]
        # One size below the curve with larger sizes back on it is a noisy size: it leaves the line, and says so. A
        # curve that falls at its end, or dips twice, is not one α and one β.
        lone = (not left_out and len(dips) == 1 and size != curve[-1] and len(kept) - 1 >= MIN_SIZES
                and not _dips([s for s in curve if s != size], busbw))
        if not lone:
            return AlphaBeta(**base, reason=f"non-monotone bandwidth curve: {bw / 1e9:.3f} GB/s at {size:,} bytes, "
                                            f"below {1 - MAX_BANDWIDTH_DROP:.0%} of {best / 1e9:.3f} GB/s at a "
                                            f"smaller size" + (f" ({len(dips)} sizes fall so)" if len(dips) > 1
                                                               else ""))
        left_out = ((size, bw),)
        on_line = np.array([int(r["bytes"]) != size for r in rows])
    xs, ys = x[on_line], y[on_line]
    alpha_ci, beta_ci = bootstrap(len(xs), lambda pick: _refit(xs[pick], ys[pick]), n_boot=BOOTSTRAP,
                                  level=CONFIDENCE)
    return AlphaBeta(**base, alpha_s=alpha, beta_Bps=1 / slope, alpha_ci=alpha_ci, beta_ci=beta_ci, left_out=left_out,
                     cpu_share=cpu_share([r for r in rows if int(r["bytes"]) in curve]), **contention(rows),
                     alone_by_size=alone_by_size(rows))


def _dips(curve: list[int], busbw: Mapping[int, float]) -> list[tuple[int, float, float]]:
    """(size, its bandwidth, the best of the smaller sizes) for each size of the curve whose bandwidth falls more than
    MAX_BANDWIDTH_DROP below the best of the sizes before it (a dip does not lower that best)."""
    dips, best = [], busbw[curve[0]]
    for size in curve[1:]:
        if busbw[size] < (1 - MAX_BANDWIDTH_DROP) * best:
            dips.append((size, busbw[size], best))
        else:
            best = max(best, busbw[size])
    return dips


def _measured(row: Mapping[str, Any], key: str) -> bool:
    v = row.get(key)
    return v is not None and not np.isnan(float(v))


def contention(rows: list[Mapping[str, Any]]) -> dict[str, float | None]:
    """Medians over the rows (one per sweep) that measured compute and collective on shared cores
    (models/workloads/collectives/contention.py): the compute ratios idle and during the allreduce, and the allreduce's
    stretch under load — measured in pairs where the row has it, else its contended time over the same row's time alone
    (sweeps before store migration 9). With three sweeps or more the median is a sweep's own figure, which one sweep
    that came out apart (two modes were seen: 1.02x and 1.98x) cannot move. None each when no row measured them."""
    keys = ("idle_compute_ratio", "contended_compute_ratio", "contended_time_median_s")
    measured = [r for r in rows if all(_measured(r, k) for k in keys)]
    if not measured:
        return {"idle_compute_ratio": None, "contended_compute_ratio": None, "contended_stretch": None,
                "contended_by_size": (), **replayed(rows)}
    stretch = [_stretch(r) for r in measured]
    return {"idle_compute_ratio": float(np.median([float(r["idle_compute_ratio"]) for r in measured])),
            "contended_compute_ratio": float(np.median([float(r["contended_compute_ratio"]) for r in measured])),
            "contended_stretch": float(np.median(stretch)), "contended_by_size": contention_by_size(rows),
            **replayed(rows)}


def replayed(rows: list[Mapping[str, Any]]) -> dict[str, float | None]:
    """The probe's rate beside a replay of a step's gradient stream and the stream's tail, medians over the rows
    (one per sweep, the largest size's) that measured it; None each when none did (sweeps before store migration
    12, GPU sweeps)."""
    measured = [r for r in rows if _measured(r, "replay_compute_ratio") and _measured(r, "replay_tail_s")]
    if not measured:
        return {"replay_compute_ratio": None, "replay_tail_s": None}
    return {"replay_compute_ratio": float(np.median([float(r["replay_compute_ratio"]) for r in measured])),
            "replay_tail_s": float(np.median([float(r["replay_tail_s"]) for r in measured]))}


def _stretch(row: Mapping[str, Any]) -> float:
    """A row's stretch under load: measured in pairs where it has it, else its contended time over the same row's
    time alone (sweeps before store migration 9)."""
    if _measured(row, "contended_stretch"):
        return float(row["contended_stretch"])
    return float(row["contended_time_median_s"]) / float(row["time_median_s"])


def contention_by_size(rows: list[Mapping[str, Any]]) -> tuple[tuple[int, float, float], ...]:
    """(bytes, stretch, compute ratio during) for every size whose rows measured contention, medians over its rows
    (one per sweep), in size order: the stretch in pairs where measured, else contended over alone time."""
    by_size: dict[int, list[tuple[float, float]]] = {}
    for r in rows:
        if not (_measured(r, "contended_compute_ratio") and _measured(r, "contended_time_median_s")):
            continue
        by_size.setdefault(int(r["bytes"]), []).append((_stretch(r), float(r["contended_compute_ratio"])))
    return tuple((size, float(np.median([s for s, _ in v])), float(np.median([d for _, d in v])))
                 for size, v in sorted(by_size.items()))


def alone_by_size(rows: list[Mapping[str, Any]]) -> tuple[tuple[int, float], ...]:
    """(bytes, median time alone) for every size of the rows, in size order."""
    by_size: dict[int, list[float]] = {}
    for r in rows:
        if _measured(r, "time_median_s") and float(r["time_median_s"]) > 0:
            by_size.setdefault(int(r["bytes"]), []).append(float(r["time_median_s"]))
    return tuple((size, float(np.median(v))) for size, v in sorted(by_size.items()))


def with_contention_of(fits: Mapping[tuple, AlphaBeta], rows: Iterable[Mapping[str, Any]]) -> dict[tuple, AlphaBeta]:
    """`fits` with each stack's per-size contention and times alone taken from `rows` (all of its sweep's sizes): for
    fits made from a subset of the sizes (on a shaped link, those the token bucket cannot carry at line speed). A
    fused operation of a few hundred KB meets the bucket in training as it does in the sweep, and a size's stretch
    is a ratio of two times taken seconds apart at that size, which the bucket moves alike."""
    groups: dict[tuple, list] = {}
    for r in rows:
        if r.get("op", "allreduce") == "allreduce":
            groups.setdefault(stack_of(r), []).append(r)
    return {stack: replace(fit, contended_by_size=contention_by_size(groups.get(stack, [])),
                           alone_by_size=alone_by_size(groups.get(stack, [])), **replayed(groups.get(stack, [])))
            for stack, fit in fits.items()}


def cpu_share(rows: list[Mapping[str, Any]]) -> float | None:
    """Median CPU seconds per wall second over rows that measured CPU time; None when none did."""
    shares = [float(r["cpu_time_median_s"]) / float(r["time_median_s"]) for r in rows
              if _measured(r, "cpu_time_median_s")]
    return float(np.median(shares)) if shares else None


def stack_of(row: Mapping[str, Any]) -> tuple:
    """The stack a cell's traffic runs on, as its collective sweeps are keyed: an FSDP2 cell's is DDP's (the same
    torch.distributed process group; models/registry/engines.py ENGINES `sweep`)."""
    from models.registry.engines import ENGINES

    return tuple(bool(row[k]) if k == "ib" else ENGINES.get(row[k], {}).get("sweep", row[k]) if k == "engine"
                 else row[k] for k in STACK_KEYS)


def fit_stacks(rows: Iterable[Mapping[str, Any]]) -> dict[tuple, AlphaBeta]:
    """One fit per stack (STACK_KEYS) from collective rows of any number of stacks; a stack with no allreduce rows
    (only allgather or broadcast sweeps) has no fit, so the model keeps its data-sheet links there."""
    groups: dict[tuple, list] = {}
    for r in rows:
        if r.get("op", "allreduce") != "allreduce":
            continue
        groups.setdefault(stack_of(r), []).append(r)
    return {stack: fit_alpha_beta(group, stack) for stack, group in groups.items()}


def training_only(records):
    """The records of training cells: collective cells (models.registry.COLLECTIVES) have no image rates."""
    from models.registry.collectives import COLLECTIVES

    if "model" not in records.columns:
        return records
    return records[~records["model"].isin(list(COLLECTIVES))]
