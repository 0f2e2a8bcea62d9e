"""α and β fitted from allreduce sweeps (bench/analysis/collectives.py), and the what-if model using them."""
import numpy as np
import pandas as pd
import pytest

from bench.analysis.collectives import fit_alpha_beta, fit_stacks
from bench.analysis.whatif import gradient_bytes, predict, predict_table

HOST_PATH = frozenset({"intelmpi"})  # the flavours that take the host path (the report asks bench.launch)

SIZES = [4096 * 4 ** k for k in range(9)]  # 4 KiB … 256 MiB


def sweep(alpha, beta, world=4, repeats=3, noise=0.02, seed=1, stack=None):
    """Rows as the store's collectives table holds them, times from time = α + 2(n−1)/n · bytes / β with
    multiplicative noise."""
    rng = np.random.default_rng(seed)
    k = 2 * (world - 1) / world
    rows = []
    for repeat in range(repeats):
        for b in SIZES:
            t = (alpha + k * b / beta) * (1 + noise * rng.standard_normal())
            rows.append({"op": "allreduce", "bytes": b, "time_median_s": t, "world_size": world, "repeat": repeat,
                         **(stack or {})})
    return rows


@pytest.mark.parametrize("alpha,beta", [(50e-6, 1.25e9), (2e-3, 25e6), (10e-6, 12e9)])
def test_known_alpha_and_beta_are_recovered_with_an_interval_that_holds_them(alpha, beta):
    fit = fit_alpha_beta(sweep(alpha, beta))
    assert fit.usable, fit.reason
    assert fit.beta_Bps == pytest.approx(beta, rel=0.03)
    assert fit.alpha_s == pytest.approx(alpha, rel=0.10)
    assert fit.alpha_ci[0] <= alpha <= fit.alpha_ci[1]
    assert fit.beta_ci[0] <= beta <= fit.beta_ci[1]
    assert fit.allreduce_s(4, 1e8) == pytest.approx(alpha + 1.5 * 1e8 / beta, rel=0.05)


def test_the_same_rows_give_the_same_interval():
    rows = sweep(50e-6, 1e9)
    assert fit_alpha_beta(rows) == fit_alpha_beta(rows)


def test_too_few_sizes_is_unusable_and_says_so():
    rows = [r for r in sweep(50e-6, 1e9) if r["bytes"] in SIZES[:2]]
    fit = fit_alpha_beta(rows)
    assert not fit.usable and fit.alpha_s is None
    assert fit.reason == "too few message sizes: 2 (a fit needs at least 3)"
    with pytest.raises(ValueError, match="too few message sizes"):
        fit.allreduce_s(4, 1e8)


def _slowed(rows, *sizes, factor=3.0):
    """The rows with each of `sizes` taking `factor` times as long (a third of the bandwidth there)."""
    return [{**r, "time_median_s": r["time_median_s"] * (factor if r["bytes"] in sizes else 1)} for r in rows]


def test_a_lone_dip_leaves_the_line_and_is_named_while_its_time_still_prices_its_size():
    rows = _slowed(sweep(50e-6, 1e9, noise=0.01), SIZES[6])  # 64 MiB slow; 128 and 256 MiB back on the curve
    fit = fit_alpha_beta(rows)
    assert fit.usable, fit.reason
    assert [size for size, _ in fit.left_out] == [SIZES[6]] and f"{SIZES[6]:,} bytes left out" in fit.describe()
    assert fit.beta_Bps == pytest.approx(1e9, rel=0.03) and fit.beta_ci[0] <= 1e9 <= fit.beta_ci[1]
    alone = dict(fit.alone_by_size)
    assert alone[SIZES[6]] == pytest.approx(3 * (50e-6 + 1.5 * SIZES[6] / 1e9), rel=0.05)  # measured, not the line
    assert fit_alpha_beta(sweep(50e-6, 1e9, noise=0.01)).left_out == ()


@pytest.mark.parametrize("slow", [(SIZES[8],), (SIZES[7], SIZES[8]), (SIZES[5], SIZES[7])],
                         ids=["the largest size", "the curve's end", "two dips"])
def test_a_bandwidth_curve_that_falls_is_unusable_and_names_the_size(slow):
    fit = fit_alpha_beta(_slowed(sweep(50e-6, 1e9, noise=0), *slow))
    assert not fit.usable and fit.left_out == ()
    assert fit.reason.startswith("non-monotone bandwidth curve:") and f"{slow[0]:,} bytes" in fit.reason


def test_a_single_rank_and_a_time_that_does_not_grow_are_unusable():
    assert "single rank" in fit_alpha_beta(sweep(50e-6, 1e9, world=1)).reason
    flat = [{**r, "time_median_s": 1e-3} for r in sweep(50e-6, 1e9)]
    fit = fit_alpha_beta(flat)
    assert not fit.usable and "does not grow" in fit.reason


def test_stacks_are_fitted_apart():
    a = sweep(50e-6, 1e9, stack={"gpu": "cpu", "mpi": "gloo", "ib": 0, "engine": "horovod", "nodes": 2})
    b = sweep(50e-6, 4e9, stack={"gpu": "cpu", "mpi": "openmpi", "ib": 0, "engine": "horovod", "nodes": 2})
    fits = fit_stacks(a + b)
    assert fits[("cpu", "gloo", False, "horovod", 2)].beta_Bps == pytest.approx(1e9, rel=0.03)
    assert fits[("cpu", "openmpi", False, "horovod", 2)].beta_Bps == pytest.approx(4e9, rel=0.03)


def test_the_model_uses_a_measured_fit_and_says_so_and_falls_back_to_the_data_sheet_otherwise():
    fit = fit_alpha_beta(sweep(1e-3, 62.5e6, world=2))  # a 500 Mbit/s link
    measured = predict("V100", 2, 100.0, 64, fabric="tcp", gpus_per_node=1, measured=fit)
    sheet = predict("V100", 2, 100.0, 64, fabric="tcp", gpus_per_node=1)
    assert measured.links == "measured" and sheet.links == "data sheet"
    assert measured.comm_s == pytest.approx(1e-3 + gradient_bytes() / 62.5e6, rel=0.05)
    unusable = fit_alpha_beta(sweep(1e-3, 62.5e6, world=2)[:2])
    assert predict("V100", 2, 100.0, 64, fabric="tcp", gpus_per_node=1, measured=unusable).links == "data sheet"


def _table(gpu="cpu", mpi="gloo"):
    return pd.DataFrame([{"cell_id": f"c{g}", "gpu": gpu, "mpi": mpi, "ib": False, "engine": "horovod",
                          "nodes": g, "gpus": g, "batch_per_gpu": 32, "precision": "fp32", "baseline_gpus": 1,
                          "baseline_samples_per_sec": 10.0} for g in (1, 2)])


def test_predict_table_predicts_cpu_cells_from_a_measured_fit_and_names_the_values_it_used():
    stack = {"gpu": "cpu", "mpi": "gloo", "ib": 0, "engine": "horovod", "nodes": 2}
    fits = fit_stacks(sweep(1e-3, 62.5e6, world=2, stack=stack))
    out = predict_table(_table(), fits, host_path_mpis=HOST_PATH)
    two = out[out.gpus == 2].iloc[0]
    assert two.predicted_links == "measured"
    compute = 32 / 10.0
    comm = 1e-3 + gradient_bytes() / 62.5e6
    expect = compute / (compute + max(0.0, comm - 0.75 * 2 / 3 * compute))
    assert two.predicted_efficiency == pytest.approx(expect, rel=0.02)
    # cpu without a fit: no links to guess
    assert predict_table(_table(), host_path_mpis=HOST_PATH).predicted_efficiency.isna().all()


def test_predict_table_says_why_a_measured_fit_was_passed_over():
    stack = {"gpu": "V100", "mpi": "openmpi", "ib": 0, "engine": "horovod", "nodes": 2}
    fits = fit_stacks([r for r in sweep(1e-3, 62.5e6, world=2, stack=stack) if r["bytes"] < 20000])
    out = predict_table(_table("V100", "openmpi"), fits, host_path_mpis=HOST_PATH)
    two = out[out.gpus == 2].iloc[0]
    assert two.predicted_links.startswith("data sheet (measured fit unusable: too few message sizes")


def test_the_cpu_share_is_the_median_cpu_per_wall_second_where_bandwidth_decides():
    rows = sweep(50e-6, 1e9, world=2, noise=0.0)
    assert fit_alpha_beta(rows).cpu_share is None  # a sweep recorded before CPU time was measured
    for r in rows:  # an engine that polls: CPU time = wall time on large messages, a tenth of it on small ones
        r["cpu_time_median_s"] = r["time_median_s"] * (1.0 if r["bytes"] >= 1 << 20 else 0.1)
    fit = fit_alpha_beta(rows)
    assert fit.cpu_share == pytest.approx(1.0)
    assert "CPU 1.00 s/s" in fit.describe()


def _contended(rows, idle, during, stretch):
    """The sweep's largest size measured beside the probe kernel (models/workloads/collectives/contention.py)."""
    top = max(r["bytes"] for r in rows)
    for r in rows:
        if r["bytes"] == top:
            r.update(idle_compute_ratio=idle, contended_compute_ratio=during,
                     contended_time_median_s=stretch * r["time_median_s"])
    return rows


def test_contention_is_the_median_over_repeats_and_absent_when_not_measured():
    rows = sweep(1e-3, 1e9, world=2, noise=0.0)
    plain = fit_alpha_beta(rows)
    assert not plain.contention_measured and "under load" not in plain.describe()
    fit = fit_alpha_beta(_contended(rows, 0.6, 0.45, 2.0))
    assert fit.contention_measured
    assert (fit.idle_compute_ratio, fit.contended_compute_ratio) == (pytest.approx(0.6), pytest.approx(0.45))
    assert fit.contended_stretch == pytest.approx(2.0)
    assert "compute ×0.60 idle / ×0.45 during, allreduce ×2.00 under load" in fit.describe()


def test_the_paired_stretch_is_used_and_one_odd_sweep_of_three_cannot_move_it():
    """Sweeps since store migration 9 carry the stretch measured in pairs (models/workloads/collectives/contention.py);
    the fit takes it over the contended time / the sweep's own time (3.0 here, drift between the two), and the median of
    three sweeps is one of them: the sweep that came out at 1.98x is not averaged in."""
    rows = _contended(sweep(1e-3, 1e9, world=2, repeats=3, noise=0.0), 0.6, 0.45, 3.0)
    top = max(r["bytes"] for r in rows)
    paired = {0: 1.05, 1: 1.98, 2: 1.10}
    for r in rows:
        if r["bytes"] == top:
            r["contended_stretch"] = paired[r["repeat"]]
    assert fit_alpha_beta(rows).contended_stretch == pytest.approx(1.10)
    # A sweep from before migration 9 (no paired figure) still counts, by its own ratio.
    for r in rows:
        if r["bytes"] == top and r["repeat"] == 2:
            del r["contended_stretch"]
    assert fit_alpha_beta(rows).contended_stretch == pytest.approx(1.98)


def test_measured_contention_slows_a_cpu_cell_by_the_formula_and_leaves_gpu_cells_alone():
    compute = 32 / 10.0
    hidden = 0.75 * 2 / 3 * compute
    rows = sweep(1e-3, 1e9, world=2, noise=0.0)  # fast link: the allreduce hides behind the backward pass
    comm = fit_alpha_beta(rows).allreduce_s(2, gradient_bytes())
    neutral = predict("cpu", 2, 10.0, 32, fabric="tcp", gpus_per_node=1,
                      measured=fit_alpha_beta(_contended(sweep(1e-3, 1e9, world=2, noise=0.0), 1.0, 1.0, 1.0)))
    assert neutral.step_s == pytest.approx(compute)  # no contention: the plain rule, all hidden
    fit = fit_alpha_beta(_contended(rows, 0.5, 0.4, 3.0))
    p = predict("cpu", 2, 10.0, 32, fabric="tcp", gpus_per_node=1, measured=fit)
    stretched = 3.0 * comm
    assert p.links == "measured, contention measured" and p.comm_s == pytest.approx(stretched)
    assert p.step_s == pytest.approx((compute - hidden) / 0.5 + stretched + (hidden - 0.4 * stretched) / 0.5)
    assert p.efficiency == pytest.approx(compute / p.step_s) and p.efficiency < neutral.efficiency
    gpu = predict("V100", 2, 10.0, 32, fabric="tcp", gpus_per_node=1, measured=fit)
    assert gpu.links == "measured" and gpu.comm_s == pytest.approx(comm)  # the GPU computes: host cores are free


def test_a_slow_link_outlasts_the_backward_pass_under_contention():
    rows = _contended(sweep(1e-3, 25e6, world=2, noise=0.0), 0.9, 0.8, 1.1)  # 200 Mbit/s: ~8 s of allreduce
    fit = fit_alpha_beta(rows)
    compute = 32 / 10.0
    p = predict("cpu", 2, 10.0, 32, fabric="tcp", gpus_per_node=1, measured=fit)
    # the hidden compute is done long before the allreduce: only the compute before the window adds to it
    assert p.step_s == pytest.approx((compute - 0.75 * 2 / 3 * compute) / 0.9 + p.comm_s)


def _contended_sizes(rows, by_size):
    """Contention at several sizes as models/workloads/collectives/contention.py measures it: the largest with the idle
    rate, the others with the stretch and the rate during only. `by_size`: bytes → (stretch, during)."""
    top = max(r["bytes"] for r in rows)
    for r in rows:
        if r["bytes"] in by_size:
            stretch, during = by_size[r["bytes"]]
            r.update(contended_compute_ratio=during, contended_stretch=stretch,
                     contended_time_median_s=stretch * r["time_median_s"],
                     idle_compute_ratio=0.8 if r["bytes"] == top else None)
    return rows


def test_contention_per_size_is_kept_and_interpolated_in_log_size():
    from bench.analysis.collectives import with_contention_of

    top = SIZES[-1]
    fit = fit_alpha_beta(_contended_sizes(sweep(1e-3, 1e9, world=2, noise=0.0),
                                          {SIZES[3]: (3.0, 0.5), SIZES[5]: (2.0, 0.6), top: (1.2, 0.7)}))
    assert fit.per_operation_measured and [b for b, _, _ in fit.contended_by_size] == [SIZES[3], SIZES[5], top]
    # The largest size's figures are still what the one-allreduce rule takes.
    assert (fit.idle_compute_ratio, fit.contended_compute_ratio,
            fit.contended_stretch) == pytest.approx((0.8, 0.7, 1.2))
    # Halfway between two measured sizes in log size: halfway between their figures; outside: the nearest one's.
    mid = SIZES[4]
    seconds, during = fit.shared_operation(2, mid)
    assert seconds == pytest.approx(2.5 * fit.allreduce_s(2, mid)) and during == pytest.approx(0.55)
    assert fit.shared_operation(2, 4096)[0] == pytest.approx(3.0 * fit.allreduce_s(2, 4096))
    # A fit made from the large sizes alone (a shaped link) takes each size's contention from all the rows.
    rows = _contended_sizes(sweep(1e-3, 1e9, world=2, noise=0.0, stack={"gpu": "cpu", "mpi": "gloo", "ib": False,
                                                                         "engine": "horovod", "nodes": 2}),
                            {SIZES[3]: (3.0, 0.5), top: (1.2, 0.7)})
    wire = fit_stacks([r for r in rows if r["bytes"] >= SIZES[5]])
    assert not next(iter(wire.values())).per_operation_measured
    whole = with_contention_of(wire, rows)
    assert next(iter(whole.values())).contended_by_size == ((SIZES[3], 3.0, 0.5), (top, 1.2, 0.7))


def test_per_operation_contention_prices_horovods_fused_operations():
    """With contention known per size, the CPU prediction simulates the fused operations (fusion.simulate_shared):
    nothing lost on free cores and a fast link; a costlier small operation lowers it; one allreduce at the largest
    size's figures is the rule without them."""
    top = SIZES[-1]
    compute = 32 / 10.0

    def fit_of(small, large, beta=1e9):
        rows = sweep(1e-4, beta, world=2, noise=0.0)
        return fit_alpha_beta(_contended_sizes(rows, {SIZES[3]: small, SIZES[6]: large, top: large}))

    free = predict("cpu", 2, 10.0, 32, fabric="tcp", gpus_per_node=1, measured=fit_of((1.0, 1.0), (1.0, 1.0)),
                   image_size=64)
    assert free.links == "measured, contention measured per operation"
    # Forward at the idle pace (0.8), backward beside the operations, the last one's tail: a little over compute.
    assert compute < free.step_s < (compute / 3) / 0.8 + 2 / 3 * compute / 0.8 + 0.05
    costly = predict("cpu", 2, 10.0, 32, fabric="tcp", gpus_per_node=1, measured=fit_of((8.0, 0.3), (1.0, 1.0)),
                     image_size=64)
    assert costly.step_s > free.step_s and costly.comm_s > free.comm_s
    # A link too slow to hide: the step is at least the operations' time on the wire.
    slow = predict("cpu", 2, 10.0, 32, fabric="tcp", gpus_per_node=1,
                   measured=fit_of((1.0, 0.9), (1.0, 0.9), beta=25e6), image_size=64)
    assert slow.step_s > gradient_bytes() / 25e6


def test_an_operation_alone_costs_what_the_sweep_measured_at_its_size_never_a_negative_extrapolation():
    """On a shaped link α and β come from the large sizes alone; their line can cross zero a few hundred KB up (a fit
    of −2.5 ms was measured at 1.5 Gbit/s). An operation's time alone is read off the sweep's own times instead."""
    from bench.analysis.collectives import with_contention_of

    stack = {"gpu": "cpu", "mpi": "gloo", "ib": False, "engine": "horovod", "nodes": 2}
    rows = sweep(1e-3, 2e8, world=2, noise=0.0, stack=stack)
    for r in rows:  # the large sizes run slower than the line through the small ones: a negative intercept
        if r["bytes"] >= SIZES[6]:
            r["time_median_s"] = r["bytes"] / 1.8e8 - 3e-3
    wire = fit_stacks([r for r in rows if r["bytes"] >= SIZES[6]])
    fit = with_contention_of(wire, rows)[tuple(stack.values())]
    assert fit.alpha_s < 0 and fit.allreduce_s(2, SIZES[3]) < 0
    measured = {r["bytes"]: r["time_median_s"] for r in rows}
    assert fit.operation_s(2, SIZES[3]) == pytest.approx(measured[SIZES[3]])
    between = fit.operation_s(2, 2 * SIZES[3])  # between two measured sizes: between their times
    assert measured[SIZES[3]] < between < measured[SIZES[4]]
    assert fit.operation_s(2, 1) == pytest.approx(measured[SIZES[0]])
    beyond = fit.operation_s(2, 2 * SIZES[-1])
    assert beyond == pytest.approx(measured[SIZES[-1]] + SIZES[-1] / fit.beta_Bps)


def test_a_replayed_gradient_streams_pace_is_the_median_over_sweeps_and_paces_the_backward_pass():
    """The sweep's probe beside a replay of a step's gradient stream (models/workloads/collectives/contention.py replay)
    gives the backward pass's pace: the fit keeps the median over sweeps (one odd sweep of three cannot move it), the
    prediction's backward pass advances at it whatever is in flight, and a fit without it keeps the per-operation
    rule."""
    from dataclasses import replace

    top = SIZES[-1]
    rows = _contended_sizes(sweep(1e-4, 1e9, world=2, noise=0.0), {SIZES[3]: (2.0, 0.6), SIZES[6]: (1.2, 0.7),
                                                                   top: (1.2, 0.7)})
    for r, pace in zip([r for r in rows if r["bytes"] == top], (0.7, 0.2, 0.72)):
        r.update(replay_compute_ratio=pace, replay_tail_s=0.01)
    fit = fit_alpha_beta(rows)
    assert (fit.replay_compute_ratio, fit.replay_tail_s) == pytest.approx((0.7, 0.01))
    compute, backward = 32 / 10.0, 2 / 3 * 32 / 10.0
    paced = predict("cpu", 2, 10.0, 32, fabric="tcp", gpus_per_node=1, measured=fit, image_size=64)
    assert paced.links == "measured, backward paced beside a replay of its gradient stream"
    # Forward at the idle pace (0.8), backward at the replay's (0.7), then the last operation's tail (small here).
    floor = (compute - backward) / 0.8 + backward / 0.7
    assert floor <= paced.step_s < floor + 0.05
    before = predict("cpu", 2, 10.0, 32, fabric="tcp", gpus_per_node=1,
                     measured=replace(fit, replay_compute_ratio=None), image_size=64)
    assert before.links == "measured, contention measured per operation" and before.step_s < paced.step_s
    unmeasured = fit_alpha_beta(_contended_sizes(sweep(1e-4, 1e9, world=2, noise=0.0), {SIZES[3]: (2.0, 0.6),
                                                                                          top: (1.2, 0.7)}))
    assert unmeasured.replay_compute_ratio is None and unmeasured.replay_tail_s is None
