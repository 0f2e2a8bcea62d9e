"""A layout cell's predicted tokens/s (bench/analysis/layout_prediction.py): which ranks share a machine's cores, which
cells anchor the compute, which tiers price the traffic, and the report's column against the shaped benchmark's
check on a kept store of emulated nodes (benchmarks/results/layouts-shaped-7.db, the first with machine ids)."""
from __future__ import annotations

import csv

import pytest

from bench.analysis.layout_prediction import FLOPS, TWIN, base_of, core_share, predict, twin_of
from bench.layouts.layout import parse_layout
from benchmarks import layout_prediction_shaped as script
from tests.conftest import ROOT, bench_cli
from tests.test_layout_report import section_rows

SHAPED = ROOT / "benchmarks" / "results" / "layouts-shaped-7.db"


def ranks(*placed):
    """Ranks as a record lists them: (host, machine, cpus) each."""
    return [{"host": h, "machine": m, "cpus": list(c)} for h, m, c in placed]


def test_ranks_on_emulated_nodes_of_one_machine_share_its_cores():
    # Four ranks on two emulated nodes (two host names) of one 2-core machine: half a core each.
    assert core_share(ranks(("node1", "boot-a", (0, 1)), ("node1", "boot-a", (0, 1)),
                            ("node2", "boot-a", (0, 1)), ("node2", "boot-a", (0, 1))), "cpu") == (0.5, None)
    # The same four ranks on two machines of two cores: a core each.
    assert core_share(ranks(("node1", "boot-a", (0, 1)), ("node1", "boot-a", (0, 1)),
                            ("node2", "boot-b", (0, 1)), ("node2", "boot-b", (0, 1))), "cpu") == (1.0, None)
    # Pinned nodes of one machine: the union of the ranks' CPUs is what they share.
    assert core_share(ranks(("node1", "boot-a", (0,)), ("node2", "boot-a", (1,))), "cpu") == (1.0, None)
    # The busiest machine decides: three ranks on one 2-core machine, one on another.
    assert core_share(ranks(("a", "boot-a", (0, 1)), ("a", "boot-a", (0, 1)), ("a", "boot-a", (0, 1)),
                            ("b", "boot-b", (0, 1))), "cpu") == (pytest.approx(2 / 3), None)


def test_without_machine_ids_one_host_is_one_machine_and_two_hosts_cannot_be_placed():
    assert core_share(ranks(("vm", None, (0, 1)), ("vm", None, (0, 1)), ("vm", None, (0, 1))), "cpu") \
        == (pytest.approx(2 / 3), None)
    share, why = core_share(ranks(("node1", None, (0, 1)), ("node2", None, (0, 1))), "cpu")
    assert share is None and "share a machine's cores" in why
    # A GPU rank's compute is its own GPU's.
    assert core_share(ranks(("node1", None, (0,)), ("node2", None, (0,))), "H100") == (1.0, None)


def cell(cell_id, layout=None, gpus=1, nodes=1, rate=10.0, batch=8, engine="fsdp2", **more):
    return {"cell_id": cell_id, "layout": layout, "model": "tiny", "gpu": "cpu", "gpus": gpus, "nodes": nodes,
            "workers_per_node": gpus // nodes, "seq_len": 128, "batch_per_gpu": batch, "precision": "fp32",
            "ib": False, "engine": engine, "samples_per_sec": rate, "core_share": 1.0, **more}


def test_the_base_is_the_same_work_on_one_worker_with_the_same_batch_and_engine_first():
    target = cell("L", "tp=2", gpus=2)
    cells = [cell("other-batch", batch=4), cell("native", engine="native"), cell("fsdp2"),
             cell("other-model", model="gpt2-124m"), cell("two", gpus=2), target]
    assert base_of(target, cells)["cell_id"] == "fsdp2"
    assert base_of(target, [c for c in cells if c["cell_id"] != "fsdp2"])["cell_id"] == "native"
    assert base_of(target, [cell("other-batch", batch=4)])["cell_id"] == "other-batch"
    assert base_of(target, [cell("bf16", precision="bf16")]) is None


def test_a_twin_is_the_same_layout_on_one_node_else_the_largest_of_the_cells_dimensions():
    tp_one, dp2, dp1 = cell("tp1", "tp=2", gpus=2), cell("dp2", "dp_shard=2", gpus=2), cell("pp1", "pp=2", gpus=2)
    across = cell("tpX", "tp=2", gpus=2, nodes=2)
    cells = [tp_one, dp2, dp1, across]
    assert twin_of(across, parse_layout("tp=2", world=2)[0], cells)[0]["cell_id"] == "tp1"
    hsdp = cell("hsdp", "dp_replicate=2,dp_shard=2", gpus=4, nodes=2)
    assert twin_of(hsdp, parse_layout(hsdp["layout"], world=4)[0], cells)[0]["cell_id"] == "dp2"
    assert twin_of(tp_one, parse_layout("tp=2", world=2)[0], cells) is None  # one node: no twin
    mixed = cell("mix", "dp_shard=2,tp=2", gpus=4, nodes=2)
    assert twin_of(mixed, parse_layout(mixed["layout"], world=4)[0], [dp1]) is None  # pp is not among its dimensions


def sweeps(nodes: int, scale: float = 1.0) -> list[dict]:
    """2-rank sweep rows: α 50 µs, 100 MB/s × scale, for every op the layouts send."""
    return [{"op": op, "world_size": 2, "nodes": nodes, "bytes": size, "gpu": "cpu",
             "time_median_s": 50e-6 + size / (100e6 * scale)}
            for op in ("allgather", "reduce_scatter", "allreduce", "sendrecv", "pipeline_p2p")
            for size in (4096, 65536, 1 << 20)]


def test_a_cell_across_nodes_is_priced_on_the_link_and_anchored_on_its_twin():
    base, twin = cell("base", rate=80.0), cell("tp1", "tp=2", gpus=2, rate=60.0)
    across = cell("tpX", "tp=2", gpus=2, nodes=2, rate=40.0)
    cells = [base, twin, across]
    fast = predict(across, cells, sweeps(1) + sweeps(2, scale=1.0))
    slow = predict(across, cells, sweeps(1) + sweeps(2, scale=0.1))
    assert fast.anchor == slow.anchor == TWIN and fast.twin_cell_id == "tp1" and fast.base_cell_id == "base"
    # A link as fast as the loopback gives the twin's own rate per GPU; a link ten times slower, less.
    assert fast.tokens_per_s_per_gpu == pytest.approx(60.0 * 128 / 2, rel=1e-6)
    assert slow.tokens_per_s_per_gpu < 0.9 * fast.tokens_per_s_per_gpu
    # FSDP's ranks at half a core each, the twin's too: nothing is hidden on either side, so a link as fast as the
    # loopback gives the twin's rate again (priced with overlap on one side only, it would not).
    half = [base, cell("fsdp1", "dp_shard=2", gpus=2, rate=60.0, core_share=0.5),
            cell("fsdpX", "dp_shard=2", gpus=2, nodes=2, rate=40.0, core_share=0.5)]
    assert predict(half[2], half, sweeps(1) + sweeps(2)).tokens_per_s_per_gpu == pytest.approx(60.0 * 128 / 2,
                                                                                               rel=1e-6)
    # The same cell on one node has no twin: the base's FLOP/s alone.
    one = predict(twin, cells, sweeps(1))
    assert one.anchor == FLOPS and one.twin_cell_id is None and one.tokens_per_s_per_gpu > 0


def test_a_local_cell_that_names_no_node_layout_is_one_node_of_its_workers():
    """The local backend's cells leave nodes and workers per node out (NaN in the report's table)."""
    base = cell("base", nodes=float("nan"), workers_per_node=float("nan"))
    local = cell("tp", "tp=2", gpus=2, nodes=float("nan"), workers_per_node=float("nan"))
    p = predict(local, [base, local], sweeps(1))
    assert p.anchor == FLOPS and p.step.tiers["tp"] == "intra" and p.tokens_per_s_per_gpu > 0


def test_no_prediction_says_why():
    base, across = cell("base"), cell("tpX", "tp=2", gpus=2, nodes=2)
    assert "no 1-worker cell" in predict(across, [across], sweeps(1) + sweeps(2)).why
    assert "between two nodes" in predict(across, [base, across], sweeps(1)).why
    assert "inside a node" in predict(cell("tp1", "tp=2", gpus=2), [base], []).why
    unknown = {**across, "core_share": None, "core_share_why": "its records do not say"}
    assert predict(unknown, [base, unknown], sweeps(1) + sweeps(2)).why == "its records do not say"


def test_a_catalogue_gpu_without_sweeps_is_priced_on_the_catalogues_links_and_infiniband_pays():
    one = {**cell("one", rate=2.0), "model": "llama3-8b", "gpu": "H100", "seq_len": 8192, "batch_per_gpu": 1,
           "precision": "bf16"}
    fsdp = {**one, "cell_id": "fsdp", "layout": "dp_shard=16", "gpus": 16, "nodes": 2, "workers_per_node": 8}
    ib = predict({**fsdp, "ib": True}, [one], [])
    tcp = predict({**fsdp, "ib": False}, [one], [])
    assert ib.anchor == tcp.anchor == FLOPS and ib.step.tiers["dp_shard"] == "inter"
    assert tcp.tokens_per_s_per_gpu < ib.tokens_per_s_per_gpu <= 2.0 * 8192


@pytest.mark.skipif(not SHAPED.is_file(), reason="the kept store of emulated nodes with machine ids is not here")
def test_the_reports_column_is_the_shaped_benchmarks_prediction_of_the_same_round(tmp_path):
    """The report predicts each cell from its latest run: the store's last round, which the benchmark prices alike.
    Its ranks' machine ids give the core shares the benchmark assumes (every rank on this one machine)."""
    out = tmp_path / "report"
    done = bench_cli("report", "--store", str(SHAPED), "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with open(out / "layouts.csv", newline="", encoding="utf-8") as f:
        shown = {r["cell_id"]: r for r in csv.DictReader(f)}
    last = script.run_ids(SHAPED)[-1]
    cells, sweeps_ = script.cells_of(SHAPED, last)
    rows = script.compare(cells, sweeps_, cores=2)
    assert len(rows) == 4
    for r in rows:
        mine = shown[r["cell_id"]]
        assert mine["prediction_anchor"] == TWIN and mine["prediction_twin_cell_id"] == r["twin_cell_id"]
        assert float(mine["prediction_core_share"]) == r["core_share"]
        assert float(mine["predicted_units_per_sec_per_gpu"]) == pytest.approx(
            r["predicted_efficiency"] * r["baseline_tokens_per_s"], rel=1e-6)
    # The page says it per cell: the model's rate beside the measured one, and what it stands on.
    _, table = section_rows(out)
    for r in rows:
        mine, predicted = table[r["cell_id"]], float(shown[r["cell_id"]]["predicted_units_per_sec_per_gpu"])
        measured = float(shown[r["cell_id"]]["units_per_sec_per_gpu"])
        assert mine["model's tokens/s per GPU"] == (f"{predicted:,.0f} tokens/s "
                                                    f"({100 * (predicted / measured - 1):+.0f}% vs measured)")
        assert mine["the model's anchor"].startswith(f"twin `{r['twin_layout']}` on one node ({r['twin_cell_id']})")
    one_node = [c for c in shown.values() if c["nodes"] == "1"]
    assert one_node and all(table[c["cell_id"]]["the model's anchor"].startswith("FLOP/s alone of the 1-worker cell")
                            for c in one_node)
