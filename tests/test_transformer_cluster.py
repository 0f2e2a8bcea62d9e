"""The transformer across the emulated 2-node cluster (tests/cluster.py: node1 and node2, one worker each): one
`bench run` on node1 through the hosts backend, under Horovod (Gloo and Open MPI), DDP and FSDP2 (both started by
Open MPI's mpirun, rendezvous at node1), every rank on its own node and every window's loss fallen."""
import json

import pytest

from tests.test_hosts import cluster_matrix, run_on_node1

pytestmark = pytest.mark.cluster

CELLS = ("  model: tiny\n  seq_len: 64\n"
         "axes: {gpu: [cpu], gpus: [2], mpi: [gloo, openmpi], engine: [horovod, native, fsdp2], layout: [null]}\n"
         "exclude:\n  - {mpi: gloo, engine: native}\n  - {mpi: gloo, engine: fsdp2}\n"
         # a 2-stage pipeline with a stage on each node: its activations cross the link (docs/layouts.md); the axes'
         # `layout: [null]` makes it a cell of its own rather than the layout of the data-parallel FSDP2 cell
         "include:\n  - {gpu: cpu, gpus: 2, mpi: openmpi, engine: fsdp2, layout: 'pp=2,schedule=1f1b,m=2'}\n")
RUNS = [("gloo", "horovod"), ("openmpi", "horovod"), ("openmpi", "native"), ("openmpi", "fsdp2")]


@pytest.fixture(scope="module")
def two_node_transformer(cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tfm2")
    return run_on_node1(cluster, tmp, cluster_matrix(cluster, tmp / "shared", f"hostfile: {cluster.hostfile}",
                                                     CELLS))


@pytest.mark.parametrize("mpi,engine", RUNS, ids=[f"{m}-{e}" for m, e in RUNS])
def test_a_two_node_transformer_cell_trains_on_both_nodes(two_node_transformer, mpi, engine):
    done, rows = two_node_transformer
    mine = [r for r in rows if r["mpi"] == mpi and r["engine"] == engine and r["layout"] is None]
    assert mine, done.stderr[-3000:]
    assert [r["status"] for r in mine] == ["ok", "ok"], (mine[-1]["error"], done.stderr[-3000:])
    for row in mine:
        assert row["nodes"] == 2 and row["world_size"] == 2 and row["rate_unit"] == "tokens/s"
        record = json.loads(row["record_json"])
        assert sorted(rank["host"] for rank in record["per_rank"]) == ["node1", "node2"]
        assert record["tokens_per_sec"] > 0 and record["loss"] < record["loss_initial"]
        if engine == "fsdp2":
            assert record["fsdp"]["reshard_after_forward"] == {"blocks": True, "root": False}


def test_a_pipeline_with_a_stage_on_each_node_trains_across_the_link(two_node_transformer):
    done, rows = two_node_transformer
    mine = [r for r in rows if r["layout"] == "pp=2,schedule=1f1b,m=2"]
    assert [r["status"] for r in mine] == ["ok", "ok"], (mine and mine[-1]["error"], done.stderr[-3000:])
    for row in mine:
        record = json.loads(row["record_json"])
        assert row["nodes"] == 2 and sorted(rank["host"] for rank in record["per_rank"]) == ["node1", "node2"]
        assert record["tokens_per_sec"] > 0 and record["loss"] < record["loss_initial"]
        layout = record["layout"]
        # each node holds one stage, and the stages' send/recv is what the pp dimension timed
        assert [stage["stages"] for stage in layout["pipeline_by_rank"]] == [[0], [1]]
        assert layout["collective_s_per_step"]["pp"] > 0 and layout["bubble_predicted"] == 0.5
        assert row["effective_transport"] == "tcp", row["transport_evidence"]
