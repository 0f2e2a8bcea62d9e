"""Prediction against measurement: each multi-node training cell's measured scaling efficiency next to what the
what-if model (bench/analysis/whatif.py) predicts for it twice — from the α/β fitted to the same stack's measured
allreduce sweep ("calibrated") and from the link's rated figure ("data sheet") — with both errors in points.
Pure: a scaling table and fits in, rows out.

Nothing here is fitted to the training cells: the model's constants (backward fraction, overlap) are its global
ones, X(1) is the series' measured 1-worker throughput, and the link figures come from the collective sweep or from
the rate alone. A miss is reported as measured, never tuned away.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from bench.analysis import AnalysisError
from bench.analysis.traffic import samples_per_step, step_of
from bench.analysis.whatif import FABRICS, LINKS, Link, image_size_of, predict

# The emulated link's "data sheet": the rate tc holds it to, and the CPU entry's latency (a veth hop costs
# microseconds; at ResNet-50's 102 MB the rate decides). Unshaped, a veth has no rate: the model's CPU figure.
RATED_ALPHA_S = LINKS["loopback"].alpha_s


def rated_link(bits_per_s: float | None) -> Link:
    """The link as its rating describes it: `bits_per_s` (tc's rate) or, with no rate, the model's CPU link."""
    if bits_per_s is None:
        return LINKS["loopback"]
    if bits_per_s <= 0:
        raise AnalysisError(f"a link rate must be positive, got {bits_per_s}")
    return Link(f"link rated {bits_per_s / 1e6:g} Mbit/s", RATED_ALPHA_S, bits_per_s / 8,
                "the rate tc holds the link to")


@dataclass(frozen=True)
class Comparison:
    cell_id: str
    mpi: str
    engine: str
    gpu: str
    gpus: int
    nodes: int
    batch_per_gpu: int
    baseline_samples_per_sec: float  # X(1): the series' measured 1-worker cell
    samples_per_sec: float  # X(N) measured
    measured_efficiency: float
    calibrated_efficiency: float | None  # None: no usable fit of this stack (see `fit`)
    data_sheet_efficiency: float
    compute_s: float
    calibrated_comm_s: float | None
    data_sheet_comm_s: float
    fit: str  # the fit used, or why there was none

    @property
    def calibrated_error_points(self) -> float | None:
        if self.calibrated_efficiency is None:
            return None
        return 100 * (self.calibrated_efficiency - self.measured_efficiency)

    @property
    def data_sheet_error_points(self) -> float:
        return 100 * (self.data_sheet_efficiency - self.measured_efficiency)


def compare(scaled, fits: Mapping[tuple, Any], rated: Link) -> list[Comparison]:
    """One Comparison per cell of `scaled` (analysis.scaling.scaling() rows) that spans nodes and has a 1-worker
    baseline in its series. `fits`: collectives.fit_stacks() of the same store; `rated`: the inter-node link's
    rated figure (rated_link())."""
    from bench.analysis.collectives import stack_of

    out = []
    for _, r in scaled.iterrows():
        nodes, gpus = int(r["nodes"]), int(r["gpus"])
        if nodes < 2 or r.get("baseline_gpus") != 1 or not math.isfinite(float(r.get("baseline_samples_per_sec"))):
            continue
        if r["gpu"] not in FABRICS:
            raise AnalysisError(f"the what-if model has no fabric for gpu {r['gpu']!r}")
        per_node = math.ceil(gpus / nodes)
        x1, batch = float(r["baseline_samples_per_sec"]), samples_per_step(r)
        precision = r.get("precision") or "fp32"
        inter = FABRICS[r["gpu"]]["tcp"]
        sheet = predict(r["gpu"], gpus, x1, batch, fabric="tcp", precision=precision, gpus_per_node=per_node,
                        links={**LINKS, inter: rated}, **step_of(r))
        fit = fits.get(stack_of(r))
        calibrated = None
        if fit is not None and fit.usable:
            calibrated = predict(r["gpu"], gpus, x1, batch, fabric="tcp", precision=precision,
                                 gpus_per_node=per_node, measured=fit, image_size=image_size_of(r), **step_of(r))
        out.append(Comparison(
            cell_id=r["cell_id"], mpi=r["mpi"], engine=r["engine"], gpu=r["gpu"], gpus=gpus, nodes=nodes,
            batch_per_gpu=batch, baseline_samples_per_sec=x1, samples_per_sec=float(r["samples_per_sec"]),
            measured_efficiency=float(r["efficiency"]),
            calibrated_efficiency=calibrated.efficiency if calibrated else None,
            data_sheet_efficiency=sheet.efficiency, compute_s=sheet.compute_s,
            calibrated_comm_s=calibrated.comm_s if calibrated else None, data_sheet_comm_s=sheet.comm_s,
            fit=fit.describe() if fit is not None else "no allreduce sweep of this stack"))
    return out
