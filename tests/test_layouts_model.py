"""The layout model (bench/layouts/): feasibility refusals, the memory model against the H200 store's measured peaks,
ranking properties, and the published-table predictions (docs/layouts.md)."""
from __future__ import annotations

import pytest

from bench.layouts.fabric import fabric_of
from bench.layouts.feasibility import Job, reasons
from bench.layouts.layout import Layout, LayoutError, every_layout, parse_layout
from bench.layouts.memory import rank_memory, usable_bytes
from bench.layouts.planner import MEASURED_EFFICIENCY, Cluster, plan_layouts, with_microbatches
from bench.layouts.published import checks
from bench.layouts.shapes import shape_named
from bench.store import Store
from tests.conftest import ROOT

WIDE = "llama-L32-d4096-h32-kv16-f14336-v128256-t8192-untied"  # 16 key/value heads: tp=16 splits it
STORE = ROOT / "benchmarks" / "results" / "h200-transformer.db"


def test_a_layout_reads_back_from_its_label_and_bad_ones_are_refused():
    layout = Layout(dp_shard=4, tp=8, pp=4, schedule="interleaved", virtual_stages=2, microbatches=16)
    assert parse_layout(layout.label(), world=128) == (layout, True)
    for bad, words in [("tp=-2", "positive"), ("tp=8,dp_shard=3", "not the world size 64"), ("tq=2", "unknown key"),
                       ("pp=2,schedule=zigzag", "schedule"), ("v=2", "pp > 1")]:
        with pytest.raises(LayoutError, match=words):
            parse_layout(bad, world=64)
    assert all(layout.world == 64 for layout in every_layout(64))


def test_feasibility_refuses_heads_layers_batch_tp_across_nodes_and_cp_on_cpu():
    shape = shape_named("llama3-8b")  # 32 heads, 8 key/value heads, 32 layers
    job = Job(seq=8192, global_batch=16, gpus_per_node=8)
    assert any("key/value heads" in r for r in reasons(Layout(tp=16), shape, job))
    assert any("layers" in r for r in reasons(Layout(pp=3, schedule="1f1b"), shape, job))
    assert any("micro-batches" in r for r in reasons(Layout(pp=2, schedule="1f1b", microbatches=3), shape, job))
    wide = shape_named(WIDE)
    assert any("cross nodes" in r for r in reasons(Layout(tp=16, dp_shard=1), wide, job))
    across = Job(seq=8192, global_batch=16, gpus_per_node=8, tp_across_nodes=True)
    assert not reasons(Layout(tp=16), wide, across)
    cpu = Job(seq=128, global_batch=4, gpus_per_node=64, cpu=True)
    assert any("GPU cells only" in r for r in reasons(Layout(cp=2), shape_named("tiny"), cpu))
    assert not reasons(Layout(dp_shard=8), shape, job)


def _measured_peaks() -> dict[str, float]:
    with Store(STORE, read_only=True) as store:
        rows = [r for r in store.records() if r["model"] == "llama3-1b" and r["status"] == "ok"]
    return {r["engine"]: r["peak_memory_bytes"] for r in rows}, rows


def test_memory_model_against_the_h200_stores_measured_peaks():
    """Llama 3 1B shape, 8 × 2,048 tokens, bf16, compiled, one H200: FSDP2 and DDP within 10 % of the allocator's peak,
    and FSDP2 below DDP (docs/layouts.md has the figures)."""
    peaks, rows = _measured_peaks()
    assert set(peaks) == {"fsdp2", "native"}
    shape = shape_named("llama3-1b")
    for engine, measured in peaks.items():
        row = next(r for r in rows if r["engine"] == engine)
        model = rank_memory(shape, Layout(), seq=row["seq_len"], microbatch_seqs=row["batch_per_gpu"],
                            sharded=engine == "fsdp2").total
        assert model == pytest.approx(measured, rel=0.10), (engine, model / 2**30, measured / 2**30)
    assert peaks["fsdp2"] < peaks["native"]


def test_the_planners_efficiency_is_the_stores_measured_mfu():
    _, rows = _measured_peaks()
    row = next(r for r in rows if r["engine"] == "fsdp2")
    mfu = row["samples_per_sec_per_gpu"] * row["flops_per_sample"] / 989.4e12
    assert MEASURED_EFFICIENCY == pytest.approx(mfu, abs=0.002)


def _plan(model: str, nodes: int, **job):
    from bench.facts.catalog import catalog

    sku = catalog()["H100"]
    cluster = Cluster(8, nodes, sku.peak_tflops["bf16"] * 1e12, usable_bytes(sku.memory_gb), fabric_of("H100", 8, "ib"))
    job = Job(seq=8192, global_batch=2 * 8 * nodes, gpus_per_node=8, **job)
    return plan_layouts(shape_named(model), [with_microbatches(x, job) for x in every_layout(8 * nodes)], cluster, job)


def test_ranking_never_ranks_a_layout_that_does_not_fit_and_refuses_tp_across_nodes():
    plan = _plan("llama3-70b", 8)
    fits = [r["fits"] for r in plan["ranked"]]
    assert fits == sorted(fits, reverse=True) and any(fits) and not all(fits)
    limit = usable_bytes(80)
    assert all(r["memory"]["total_bytes"] <= limit for r in plan["ranked"] if r["fits"])
    assert all(r["rank"] is None for r in plan["ranked"] if not r["fits"])
    rates = [r["tokens_per_s_per_gpu"] for r in plan["ranked"] if r["fits"]]
    assert rates == sorted(rates, reverse=True)
    assert not any(r["degrees"]["tp"] > 8 for r in _plan(WIDE, 8)["ranked"])
    assert any(r["degrees"]["tp"] > 8 for r in _plan(WIDE, 8, tp_across_nodes=True)["ranked"])


@pytest.mark.parametrize("check", checks(), ids=lambda c: f"{c['table']} {c['gpus']}")
def test_published_tables_are_predicted_from_their_smallest_run(check):
    """Every published check is within its stated tolerance today (docs/layouts.md prints each beside its figure);
    a check that misses must be documented as a miss, not loosened here."""
    assert abs(check["error"]) <= check["tolerance"], check


# --- the step time's stages, head and measured tiers (bench/layouts/steptime.py, sweep_tiers.py) ----------------------
def _tiny_step(layout: Layout, fabric, **kw):
    from bench.layouts.steptime import step_time

    return step_time(shape_named("tiny"), layout, fabric, seq=128, global_batch=8 * layout.dp, peak_flops=1e10,
                     efficiency=1.0, **kw)


def _sweep_rows(nodes: int, seconds_per_byte: float, alpha: float) -> list[dict]:
    """2-rank sweep rows of every op on `nodes` nodes, times α + share·bytes·s/B (two repeats each)."""
    share = {"allgather": 0.5, "reduce_scatter": 0.5, "allreduce": 1.0, "sendrecv": 1.0}
    return [{"op": op, "bytes": size, "world_size": 2, "nodes": nodes,
             "time_median_s": alpha + k * size * seconds_per_byte * (1 + 0.01 * repeat)}
            for op, k in share.items() for size in (4096, 65536, 1 << 20) for repeat in (0, 1)]


def test_the_busiest_stage_sets_the_pace_and_equal_stages_give_megatrons_bubble():
    from bench.layouts.steptime import step_time

    fabric = fabric_of("H100", 8, "ib")
    shape = shape_named("llama3-8b")
    layout = Layout(dp_shard=2, pp=4, schedule="1f1b", microbatches=8)
    step = step_time(shape, layout, fabric, seq=8192, global_batch=16, peak_flops=1e15, efficiency=0.5)
    head = 6 * shape.vocab * shape.width
    blocks = (shape.flops_per_token(8192) - head) / 4
    # The last stage carries the head: it is the busiest, and the other three stages' fill and drain are the bubble.
    assert step.compute_s / step.bubble_s == pytest.approx((blocks + head) / (3 * blocks / 8))
    # With the head counted out, the stages are equal and the bubble is (p − 1)/m of the compute.
    equal = step.compute_s * blocks / (blocks + head)
    assert step.bubble_s == pytest.approx(equal * 3 / 8)


def test_a_head_kept_whole_on_every_tp_rank_costs_each_rank_the_whole_head():
    fabric = fabric_of("H100", 8, "ib")
    split, whole = (_tiny_step(Layout(tp=2), fabric, head_over_tp=flag) for flag in (True, False))
    shape = shape_named("tiny")
    head_s = 6 * shape.vocab * shape.width * 8 * 128 / 1e10
    assert whole.compute_s - split.compute_s == pytest.approx(head_s / 2)
    assert whole.traffic_s["tp"] == pytest.approx(split.traffic_s["tp"])  # the head moves no activations


def test_measured_tiers_price_each_op_from_its_sweep_and_a_ring_from_the_2_rank_times():
    from bench.layouts.steptime import interpolate
    from bench.layouts.sweep_tiers import measured_curves, sweep_fabric

    rows = _sweep_rows(1, 1e-9, 1e-4) + _sweep_rows(2, 1e-7, 1e-3)
    fabric = sweep_fabric(rows, ranks_per_node=2)
    assert set(fabric.intra.measured) == {"allgather", "reduce_scatter", "allreduce", "sendrecv"}
    curve = measured_curves(rows, 2)["sendrecv"]
    assert curve[0] == (4096, pytest.approx(1e-3 + 4096 * 1e-7 * 1.005))  # the median of the two repeats
    assert interpolate(curve, 4096 / 2) == curve[0][1] and interpolate(curve, 1 << 21) > curve[-1][1]
    # tp inside a node prices on the 1-node curves, across on the 2-node ones: 100x the bytes' time there.
    inside = _tiny_step(Layout(tp=2), fabric, activation_bytes=4)
    across = _tiny_step(Layout(tp=2), sweep_fabric(rows, ranks_per_node=1), activation_bytes=4)
    assert across.tiers["tp"] == "inter" and inside.tiers["tp"] == "intra"
    assert across.traffic_s["tp"] > 20 * inside.traffic_s["tp"]
    # A 4-rank ring is 3 steps of the 2-rank operation of half the bytes: the same as α-β's ring when the curve is
    # a line through the origin.
    flat = sweep_fabric(_sweep_rows(1, 1e-9, 0.0) + _sweep_rows(2, 1e-7, 0.0), ranks_per_node=2)
    step = _tiny_step(Layout(dp_shard=4), flat, param_bytes=4)
    shape = shape_named("tiny")
    params = shape.layers * (shape.block_matrices() + shape.block_vectors()) + shape.vocab * shape.width
    # (n − 1)/n of the fp32 tensor at 1/β = 1e-7 s per byte (a 2-rank gather's 0.5 · bytes · 1e-7), the repeats' median
    # 1.005 of it
    ring = 3 / 4 * params * 4 * 1e-7 * 1.005
    assert step.traffic_s["dp_shard"] == pytest.approx(3 * ring, rel=1e-6)  # two gathers and a reduce-scatter


def test_a_pipeline_is_priced_from_its_schedules_own_exchange_where_it_was_measured():
    from bench.layouts.sweep_tiers import sweep_fabric

    rows = _sweep_rows(1, 1e-9, 0.0) + _sweep_rows(2, 1e-7, 0.0)
    layout = Layout(pp=2, schedule="1f1b", microbatches=4)
    plain = _tiny_step(layout, sweep_fabric(rows, ranks_per_node=1), activation_bytes=4)
    # The schedule's send-first exchange measured at twice sendrecv's time: the pp traffic doubles, no other part moves.
    fused = [{**r, "op": "pipeline_p2p", "time_median_s": 2 * r["time_median_s"]}
             for r in rows if r["op"] == "sendrecv"]
    slow = _tiny_step(layout, sweep_fabric(rows + fused, ranks_per_node=1), activation_bytes=4)
    # The tied embedding's all-reduce (below) is not the schedule's exchange: it stays as it was.
    tied = _tied_allreduce_s(sweep_fabric(rows, ranks_per_node=1).inter)
    assert plain.traffic_s["pp"] > tied > 0
    assert slow.traffic_s["pp"] - tied == pytest.approx(2 * (plain.traffic_s["pp"] - tied))
    assert {d: t for d, t in slow.traffic_s.items() if d != "pp"} == {d: t for d, t in plain.traffic_s.items()
                                                                      if d != "pp"}


def _tied_allreduce_s(tier) -> float:
    """A 2-rank all-reduce of the tiny shape's fp32 embedding gradient, as the tier's sweep prices it."""
    from bench.layouts.steptime import interpolate

    shape = shape_named("tiny")
    return interpolate(tier.measured["allreduce"], shape.vocab * shape.width * 4)


def test_a_tied_embedding_costs_a_pipeline_one_all_reduce_of_its_gradient_between_the_end_stages():
    """The worker sums a tied embedding's gradient over the first and the last stage after the schedule, every step
    (models/workloads/transformer/layouts.py): the tiny shape (tied) pays it on the pp tier, the same shape untied
    does not, and without a pipeline neither does."""
    from dataclasses import replace as with_

    from bench.layouts.steptime import step_time
    from bench.layouts.sweep_tiers import sweep_fabric

    fabric = sweep_fabric(_sweep_rows(1, 1e-9, 0.0) + _sweep_rows(2, 1e-7, 0.0), ranks_per_node=1)
    tiny = shape_named("tiny")
    assert tiny.tied

    def pp_traffic(shape, layout):
        return step_time(shape, layout, fabric, seq=128, global_batch=8 * layout.dp, peak_flops=1e10,
                         efficiency=1.0, activation_bytes=4, head_over_tp=False).traffic_s["pp"]

    pipeline = Layout(pp=2, schedule="1f1b", microbatches=4)
    assert pp_traffic(tiny, pipeline) - pp_traffic(with_(tiny, tied=False), pipeline) == pytest.approx(
        _tied_allreduce_s(fabric.inter), rel=1e-9)
    assert pp_traffic(tiny, Layout(tp=2)) == pp_traffic(with_(tiny, tied=False), Layout(tp=2)) == 0.0


def test_a_fabric_without_a_sweep_on_a_tier_is_refused_with_the_tier_named():
    from bench.layouts.sweep_tiers import sweep_fabric

    with pytest.raises(ValueError, match="two nodes"):
        sweep_fabric(_sweep_rows(1, 1e-9, 1e-4), ranks_per_node=2)


def test_groups_sharing_a_nodes_one_measured_link_each_pay_for_their_bytes_and_no_overlap_exposes_all():
    from bench.layouts.sweep_tiers import sweep_fabric

    rows = _sweep_rows(1, 1e-9, 0.0) + _sweep_rows(2, 1e-7, 0.0)
    fabric = sweep_fabric(rows, ranks_per_node=2)
    # HSDP 2 × 2 on 2 nodes of 2: both replica pairs cross the link at once; flat FSDP's ring crosses it once a way.
    assert fabric.sharing(2, 2) == 2 and fabric.sharing(1, 4) == 1 and fabric.sharing(1, 2) == 1
    hsdp = _tiny_step(Layout(dp_replicate=2, dp_shard=2), fabric, param_bytes=4)
    shape = shape_named("tiny")
    params = shape.layers * (shape.block_matrices() + shape.block_vectors()) + shape.vocab * shape.width
    shard_grad = params * 4 / 2
    # Two pairs' allreduces of the shard's fp32 gradients on one link: the 2-rank allreduce of twice the bytes at
    # 1e-7 s per byte (the repeats' median 1.005 of it).
    assert hsdp.traffic_s["dp_replicate"] == pytest.approx(2 * shard_grad * 1e-7 * 1.005, rel=1e-6)
    # The catalogue's inter-node β is already a GPU's share: no sharing there.
    assert fabric_of("H100", 8, "ib").sharing(8, 16) == 1
    hidden = _tiny_step(Layout(dp_shard=4), fabric, param_bytes=4)
    whole = _tiny_step(Layout(dp_shard=4), fabric, param_bytes=4, overlap=False)
    assert hidden.exposed_s["dp_shard"] < whole.exposed_s["dp_shard"] == pytest.approx(whole.traffic_s["dp_shard"])
    assert whole.step_s - hidden.step_s == pytest.approx(whole.exposed_s["dp_shard"] - hidden.exposed_s["dp_shard"])
