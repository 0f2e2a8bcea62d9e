"""Prediction against measurement (bench/analysis/calibration.py): which cells are compared, and that the calibrated
and data-sheet predictions are the model's equations with the fitted or the rated link — nothing fitted to the
training cells."""
from dataclasses import replace

import pandas as pd
import pytest

from bench.analysis import AnalysisError
from bench.analysis.calibration import RATED_ALPHA_S, compare, rated_link
from bench.analysis.collectives import fit_alpha_beta, stack_of
from bench.analysis.whatif import BACKWARD_FRACTION, DEFAULT_OVERLAP, LINKS, gradient_bytes
from tests.test_collective_fit import sweep

G = gradient_bytes("fp32")


def table(**over):
    """A scaling() table: a gloo series of 1 and 2 workers (one per node), and an openmpi 2-node cell."""
    base = dict(gpu="cpu", framework="pytorch", ib=False, engine="horovod", precision="fp32", batch_per_gpu=32,
                baseline_gpus=1)
    rows = [
        {**base, "cell_id": "g1", "mpi": "gloo", "gpus": 1, "nodes": 1, "samples_per_sec": 24.0,
         "baseline_samples_per_sec": 24.0, "efficiency": 1.0},
        {**base, "cell_id": "g2", "mpi": "gloo", "gpus": 2, "nodes": 2, "samples_per_sec": 36.0,
         "baseline_samples_per_sec": 24.0, "efficiency": 0.75},
        {**base, "cell_id": "o2", "mpi": "openmpi", "gpus": 2, "nodes": 2, "samples_per_sec": 20.0,
         "baseline_samples_per_sec": 25.0, "efficiency": 0.4},
    ]
    return pd.DataFrame([{**r, **over} for r in rows])


def fit_for(mpi, alpha, beta):
    stack = {"gpu": "cpu", "mpi": mpi, "ib": False, "engine": "horovod", "nodes": 2}
    rows = sweep(alpha, beta, world=2, noise=0.0, stack=stack)
    return stack_of(rows[0]), fit_alpha_beta(rows, stack_of(rows[0]))


def model_efficiency(x1, batch, comm):
    """The what-if model's equation, written out: E = compute / (compute + exposed)."""
    compute = batch / x1
    exposed = max(0.0, comm - DEFAULT_OVERLAP * BACKWARD_FRACTION * compute)
    return compute / (compute + exposed)


def test_only_multi_node_cells_with_a_one_worker_baseline_are_compared():
    rows = compare(table(), {}, rated_link(None))
    assert [r.cell_id for r in rows] == ["g2", "o2"]
    no_baseline = table(baseline_gpus=2)
    assert compare(no_baseline, {}, rated_link(None)) == []


def test_calibrated_prediction_is_the_model_with_the_fitted_link():
    key, fit = fit_for("gloo", 2e-3, 50e6)  # 400 Mbit/s
    (g2, o2) = compare(table(), {key: fit}, rated_link(None))
    comm = fit.alpha_s + G / fit.beta_Bps  # two ranks: 2(n−1)/n = 1
    assert g2.calibrated_comm_s == pytest.approx(comm)
    assert g2.calibrated_efficiency == pytest.approx(model_efficiency(24.0, 32, comm))
    assert 0 < g2.calibrated_efficiency < 0.5  # 2 s on the wire against 1.3 s of compute
    assert g2.calibrated_error_points == pytest.approx(100 * (g2.calibrated_efficiency - 0.75))
    assert "GB/s" in g2.fit
    # The openmpi cell has no sweep of its stack: no calibrated figure, and it says why.
    assert o2.calibrated_efficiency is None and o2.calibrated_error_points is None
    assert o2.fit == "no allreduce sweep of this stack"


def test_data_sheet_prediction_uses_the_rated_link():
    (g2, _) = compare(table(), {}, rated_link(200e6))
    comm = 2 * RATED_ALPHA_S + G / (200e6 / 8)  # ring of two nodes: 2(p−1) hops of α
    assert g2.data_sheet_comm_s == pytest.approx(comm)
    assert g2.data_sheet_efficiency == pytest.approx(model_efficiency(24.0, 32, comm))
    # Unrated (an unshaped veth): the model's CPU link, fast enough that the bytes hide behind the backward pass.
    (fast, _) = compare(table(), {}, rated_link(None))
    assert fast.data_sheet_comm_s == pytest.approx(2 * LINKS["loopback"].alpha_s + G / LINKS["loopback"].beta_Bps)
    assert fast.data_sheet_efficiency == pytest.approx(1.0)


def test_an_unusable_fit_is_named_not_used():
    key, _ = fit_for("gloo", 2e-3, 50e6)
    stack = dict(zip(("gpu", "mpi", "ib", "engine", "nodes"), key))
    few = [r for r in sweep(2e-3, 50e6, world=2, stack=stack) if r["bytes"] <= 16384]
    (g2, _) = compare(table(), {key: fit_alpha_beta(few, key)}, rated_link(None))
    assert g2.calibrated_efficiency is None
    assert g2.fit.startswith("unusable: too few message sizes")


def test_a_rate_that_is_not_positive_is_refused():
    with pytest.raises(AnalysisError, match="must be positive"):
        rated_link(0)


def test_on_cpu_workers_the_collectives_cpu_time_does_not_hide_behind_compute():
    key, fit = fit_for("gloo", 2e-3, 50e6)
    comm = fit.alpha_s + G / fit.beta_Bps
    backward_hidden = DEFAULT_OVERLAP * BACKWARD_FRACTION * 32 / 24.0
    for share, exposed in ((1.0, comm), (0.25, 0.25 * comm + max(0.0, 0.75 * comm - backward_hidden)),
                           (3.0, comm)):  # several busy threads still hold one core's worth of compute
        (g2, _) = compare(table(), {key: replace(fit, cpu_share=share)}, rated_link(None))
        compute = 32 / 24.0
        assert g2.calibrated_efficiency == pytest.approx(compute / (compute + exposed))
    # A GPU cell of the same fit: compute is on the GPU, the CPU share costs it nothing.
    from bench.analysis.whatif import predict
    gpu = predict("V100", 2, 300.0, 64, fabric="tcp", gpus_per_node=1, measured=replace(fit, cpu_share=1.0))
    assert gpu.efficiency == pytest.approx(predict("V100", 2, 300.0, 64, fabric="tcp", gpus_per_node=1,
                                                   measured=fit).efficiency)
