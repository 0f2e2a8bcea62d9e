"""The collective workload (model: allreduce) for real: 2-rank sweeps under Gloo and Open MPI through `bench run`,
their rows in the store, export and report; a corrupted reduction fails its cell naming size and element."""
import json
import os
import sqlite3

import pytest

from bench.planning.cell import cell_id, cell_id_text
from bench.planning.matrix import load_matrix_text
from models.workloads.collectives.contention import contended_sizes
from models.workloads.collectives.sweep_worker import sweep_sizes
from tests.conftest import bench_cli

pytestmark = pytest.mark.e2e

SWEEP = """
name: collectives
workload:
  model: allreduce
  max_message_bytes: 4194304
  warmup_steps: 1
  steps: 3
  repeats: 2
  threads: 1
axes:
  gpu: [cpu]
  mpi: [gloo, openmpi]
  gpus: [2]
"""
SIZES = [4096, 16384, 65536, 262144, 1048576, 4194304]


def rows(d, table: str) -> list[dict]:
    with sqlite3.connect(d / "results" / "bench.db") as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(f"SELECT * FROM {table}")]


def test_the_sweep_runs_under_gloo_and_open_mpi_and_lands_in_the_store_export_and_report(tmp_path):
    (tmp_path / "m.yaml").write_text(SWEEP, encoding="utf-8")
    ids = {c["mpi"]: cell_id(c) for c in load_matrix_text(SWEEP).cells()}
    result = bench_cli("run", "m.yaml", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "GB/s busbw at 4,194,304 B" in result.stderr
    records = rows(tmp_path, "records")
    assert sorted((r["cell_id"], r["repeat"]) for r in records) == sorted((i, k) for i in ids.values() for k in (0, 1))
    for r in records:
        assert r["status"] == "ok" and r["model"] == "allreduce" and r["samples_per_sec"] is None
        rec = json.loads(r["record_json"])
        assert [s["bytes"] for s in rec["collective"]] == SIZES
    sizes = rows(tmp_path, "collectives")
    assert len(sizes) == 2 * 2 * len(SIZES)  # two cells, two repeats, six sizes
    for s in sizes:
        assert s["op"] == "allreduce" and s["world_size"] == 2 and s["nodes"] == 1 and s["iterations"] == 3
        assert s["busbw_bytes_per_s"] > 0
        assert s["algbw_bytes_per_s"] == pytest.approx(s["bytes"] / s["time_median_s"])
        assert s["busbw_bytes_per_s"] == pytest.approx(s["algbw_bytes_per_s"])  # 2(n-1)/n = 1 at n = 2
        assert s["time_min_s"] <= s["time_median_s"] <= s["time_max_s"]
        # CPU seconds of the busiest rank's process: spent (the copies alone cost some), and no more than all of
        # this machine's cores could give in its slowest iteration.
        assert 0 < s["cpu_time_median_s"] <= (os.cpu_count() or 1) * s["time_max_s"] + 0.01
        # Compute and collective on shared cores: at the largest size with the idle rate, at the smaller sizes of
        # CONTENDED_SIZES without. The probe's rate beside the engine is a fraction of its rate alone (some jitter
        # allowed above 1), never nothing while it idles; the allreduce under load takes real time.
        if s["bytes"] in contended_sizes(SIZES):
            assert 0 <= s["contended_compute_ratio"] < 1.5
            assert s["contended_time_median_s"] > 0
            assert s["contended_stretch"] > 0  # beside the probe over alone, in pairs seconds apart
            if s["bytes"] == SIZES[-1]:
                assert 0 < s["idle_compute_ratio"] < 1.5
                # Beside a replay of a training step's 161 gradients (every one's reduction checked): a pace, and
                # the stream's tail after the replayed backward pass.
                assert 0 < s["replay_compute_ratio"] < 1.5 and s["replay_tail_s"] >= 0
            else:
                assert s["idle_compute_ratio"] is None and s["replay_compute_ratio"] is None
        else:
            assert s["idle_compute_ratio"] is s["contended_compute_ratio"] is s["contended_time_median_s"] is None
            assert s["contended_stretch"] is None
    assert len(contended_sizes(SIZES)) >= 2  # a smaller size is measured too: the per-operation cost's curve
    assert {s["mpi"] for s in sizes} == {"gloo", "openmpi"}

    out = bench_cli("export", "--table", "collectives", "-o", "c.csv", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "c.csv").read_text().count("\n") == len(sizes) + 1
    rep = bench_cli("report", "--out", "rep", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr[-3000:]
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "Collectives: bandwidth vs message size" in html and "4,194,304" in html
    assert ids["openmpi"] in html and ids["gloo"] in html


def test_a_wrong_reduction_fails_the_cell_naming_the_size_and_the_first_wrong_element(tmp_path):
    text = SWEEP.replace("mpi: [gloo, openmpi]", "mpi: [openmpi]").replace("repeats: 2", "repeats: 1")
    (tmp_path / "m.yaml").write_text(text, encoding="utf-8")
    result = bench_cli("run", "m.yaml", cwd=tmp_path, timeout=300,
                       env={"BENCH_COLLECTIVE_CORRUPT": "rank=1:bytes=65536:element=5"})
    assert result.returncode == 1, result.stderr[-3000:]
    (row,) = rows(tmp_path, "records")
    assert row["status"] == "failed"
    assert "allreduce of 65536 bytes returned a wrong value" in row["error"], row["error"]
    # Rank r sends (r + 1) + (i mod 7): 6 + 7 = 13 at element 5, and rank 1's extra 1 makes it 14.
    assert "element 5 is 14.0, expected 13.0" in row["error"], row["error"]
    assert not rows(tmp_path, "collectives")


def test_the_sweep_reaches_resnet50s_gradients_by_default_and_stops_at_its_largest_size():
    assert sweep_sizes(102_228_128)[-2:] == [67_108_864, 102_228_128]
    assert sweep_sizes(4096) == [4096]
    assert sweep_sizes(4 << 20) == SIZES


def test_a_collective_cell_has_its_own_id_and_training_ids_do_not_move():
    train, = load_matrix_text("name: t\naxes: {gpu: [cpu]}\n").cells()
    coll, = load_matrix_text("name: t\nworkload: {model: allreduce}\naxes: {gpu: [cpu]}\n").cells()
    bigger, = load_matrix_text("name: t\nworkload: {model: allreduce, max_message_bytes: 8192}\n"
                               "axes: {gpu: [cpu]}\n").cells()
    assert len({cell_id(train), cell_id(coll), cell_id(bigger)}) == 3
    assert "max_message_bytes" not in cell_id_text(train) and "max_message_bytes=8192" in cell_id_text(bigger)


def test_only_the_pytorch_bindings_run_the_sweep_and_the_worker_gets_the_sweep_flags(tmp_path):
    from bench.backends.shared.cell_launch import worker_program
    from bench.planning.cell import PlannedCell
    from bench.planning.feasibility import build_reason

    tf, = load_matrix_text("name: t\nworkload: {model: allreduce}\naxes: {gpu: [cpu], framework: [tensorflow]}\n"
                           ).cells()
    assert build_reason(tf) == "model=allreduce: the collective sweep runs through pytorch only (framework=tensorflow)"
    cell, = load_matrix_text(SWEEP.replace("mpi: [gloo, openmpi]", "mpi: [gloo]")).cells()
    assert build_reason(cell) is None
    argv = worker_program(PlannedCell(cell, cell_id(cell), "planned"), "r1", tmp_path / "out.jsonl", 1)
    assert argv[1].endswith("models/workloads/collectives/sweep_worker.py")
    assert argv[argv.index("--max-bytes") + 1] == "4194304" and argv[argv.index("--steps") + 1] == "3"
    assert "--batch-size" not in argv


def test_the_native_engine_sweeps_through_torch_distributed_under_torchrun(tmp_path):
    text = SWEEP.replace("mpi: [gloo, openmpi]", "mpi: [gloo]").replace("repeats: 2", "repeats: 1") \
        .replace("  threads: 1\n", "  threads: 1\n  engine: native\n")
    (tmp_path / "m.yaml").write_text(text, encoding="utf-8")
    result = bench_cli("run", "m.yaml", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = rows(tmp_path, "records")
    rec = json.loads(record["record_json"])
    assert rec["engine"] == "native" and rec["env_probe"]["collective_backend"] == "gloo"
    sizes = rows(tmp_path, "collectives")
    assert [s["bytes"] for s in sizes] == SIZES and all(s["engine"] == "native" for s in sizes)
    assert all(s["busbw_bytes_per_s"] > 0 for s in sizes)


OPS_SWEEP = """
name: ops
workload:
  max_message_bytes: 65536
  warmup_steps: 1
  steps: 3
  repeats: 1
  threads: 1
axes:
  gpu: [cpu]
  model: [allgather, reduce_scatter, broadcast]
  mpi: [gloo, openmpi]
  engine: [horovod, native]
  gpus: [2]
exclude:
  - {mpi: openmpi, engine: native}
"""
OPS_SIZES = [4096, 16384, 65536]


def test_allgather_reduce_scatter_and_broadcast_sweep_under_gloo_open_mpi_and_native_with_their_own_bus_factors(
        tmp_path):
    (tmp_path / "m.yaml").write_text(OPS_SWEEP, encoding="utf-8")
    cells = load_matrix_text(OPS_SWEEP).cells()
    assert len(cells) == 9
    result = bench_cli("run", "m.yaml", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    records = rows(tmp_path, "records")
    assert sorted(r["cell_id"] for r in records) == sorted(cell_id(c) for c in cells)
    for r in records:
        rec = json.loads(r["record_json"])
        assert r["status"] == "ok" and rec["workload"] == r["model"] and rec["workload_version"] == "1"
        assert "--op" in rec["command"] and rec["command"][rec["command"].index("--op") + 1] == r["model"]
    sizes = rows(tmp_path, "collectives")
    assert len(sizes) == 9 * len(OPS_SIZES)
    assert {(s["op"], s["mpi"], s["engine"]) for s in sizes} == {
        (op, mpi, engine) for op in ("allgather", "reduce_scatter", "broadcast") for mpi, engine in
        (("gloo", "horovod"), ("gloo", "native"), ("openmpi", "horovod"))}
    for s in sizes:
        assert s["world_size"] == 2 and s["iterations"] == 3 and s["busbw_bytes_per_s"] > 0
        assert s["algbw_bytes_per_s"] == pytest.approx(s["bytes"] / s["time_median_s"])
        # nccl-tests' factors at n = 2: (n-1)/n = 1/2 for allgather and reduce_scatter, 1 for broadcast.
        factor = 0.5 if s["op"] in ("allgather", "reduce_scatter") else 1.0
        assert s["busbw_bytes_per_s"] == pytest.approx(s["algbw_bytes_per_s"] * factor)
    for op in ("allgather", "reduce_scatter", "broadcast"):
        assert sorted(s["bytes"] for s in sizes if s["op"] == op and s["mpi"] == "gloo"
                      and s["engine"] == "native") == OPS_SIZES

    out = bench_cli("export", "--table", "collectives", "--format", "json", "-o", "c.jsonl", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    exported = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert sorted(e["op"] for e in exported) == sorted(s["op"] for s in sizes)
    rep = bench_cli("report", "--out", "rep", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr[-3000:]
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "allgather · cpu/gloo/native" in html and "broadcast · cpu/openmpi/horovod" in html
    assert "fit: " not in html  # α/β are fitted from allreduce sweeps only
    assert html.index("allgather · cpu/") < html.index("broadcast · cpu/")  # grouped by op


@pytest.mark.parametrize("op,mpi,corrupt,wrong", [
    # Rank 1 sends (1 + 1) + (j mod 7), 7 at its element 5, +1 = 8; its slice starts at 65536 / 4 / 2 = 8192.
    ("allgather", "openmpi", "rank=1:bytes=65536:element=5", "allgather of 65536 bytes returned a wrong value on "
                                                              "rank {r}: element 8197 is 8.0, expected 7.0"),
    # The sum's element 5 lies in rank 0's slice: (1 + 5) + (2 + 5) = 13, and rank 1 sent one more.
    ("reduce_scatter", "gloo", "rank=1:bytes=65536:element=5", "reduce_scatter of 65536 bytes returned a wrong value "
                                                                "on rank 0: element 5 is 14.0, expected 13.0"),
    # Only the root's data travels in a broadcast: rank 1 (its buffer zeroed, then filled by the broadcast) receives
    # 1 + 5 + 1 at element 5 and is the one to say so; the root holds only its source and checks nothing.
    ("broadcast", "gloo", "rank=0:bytes=65536:element=5", "broadcast of 65536 bytes returned a wrong value on "
                                                           "rank 1: element 5 is 7.0, expected 6.0"),
])
def test_a_wrong_allgather_or_broadcast_fails_the_cell_naming_the_size_and_the_first_wrong_element(
        tmp_path, op, mpi, corrupt, wrong):
    text = OPS_SWEEP.replace("model: [allgather, reduce_scatter, broadcast]", f"model: [{op}]") \
        .replace("mpi: [gloo, openmpi]", f"mpi: [{mpi}]").replace("engine: [horovod, native]", "engine: [horovod]")
    (tmp_path / "m.yaml").write_text(text, encoding="utf-8")
    result = bench_cli("run", "m.yaml", cwd=tmp_path, timeout=300, env={"BENCH_COLLECTIVE_CORRUPT": corrupt})
    assert result.returncode == 1, result.stderr[-3000:]
    (row,) = rows(tmp_path, "records")
    assert row["status"] == "failed"
    assert any(wrong.format(r=r) in row["error"] for r in (0, 1)), row["error"]
    assert not rows(tmp_path, "collectives")


SENDRECV_SWEEP = OPS_SWEEP.replace("model: [allgather, reduce_scatter, broadcast]", "model: [sendrecv, pipeline_p2p]") \
    .replace("mpi: [gloo, openmpi]", "mpi: [gloo]").replace("exclude:\n  - {mpi: openmpi, engine: native}\n", "")
P2P_OPS = {"sendrecv", "pipeline_p2p"}


def test_sendrecv_sweeps_point_to_point_through_torch_distributed_and_horovod_is_skipped_with_the_reason(tmp_path):
    """A pipeline's traffic (each rank to the next, a ring shift), posted receive first (sendrecv) and as a pipeline
    schedule posts it (pipeline_p2p: one batch_isend_irecv, the send first): torch.distributed under torchrun, every
    received message checked, bus factor 1; Horovod, which has no point-to-point calls, skipped in the plan."""
    (tmp_path / "m.yaml").write_text(SENDRECV_SWEEP, encoding="utf-8")
    plan = json.loads(bench_cli("plan", "m.yaml", "--format", "json", cwd=tmp_path).stdout)
    status = {(c["model"], c["engine"]): (c["status"], c["reason"]) for c in plan}
    for op in P2P_OPS:
        assert status[op, "native"][0] == "planned"
        assert status[op, "horovod"][0] == "skipped"
        assert "Horovod has no point-to-point send and receive" in status[op, "horovod"][1]
    result = bench_cli("run", "m.yaml", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    sizes = rows(tmp_path, "collectives")
    assert sorted(s["bytes"] for s in sizes) == sorted(OPS_SIZES * 2) and {s["op"] for s in sizes} == P2P_OPS
    for s in sizes:
        assert s["engine"] == "native" and s["world_size"] == 2 and s["iterations"] == 3
        assert s["busbw_bytes_per_s"] == pytest.approx(s["algbw_bytes_per_s"])  # factor 1: the message, one way
    rep = bench_cli("report", "--out", "rep", cwd=tmp_path)
    html = (tmp_path / "rep" / "index.html").read_text()
    assert rep.returncode == 0 and all(f"{op} · cpu/gloo/native" in html for op in P2P_OPS)
    # Rank 0 sends (0 + 1) + (5 mod 7) = 6 at element 5, one more when corrupted: rank 1, its receiver, says so.
    again = bench_cli("run", "m.yaml", "--rerun", cwd=tmp_path, timeout=300,
                      env={"BENCH_COLLECTIVE_CORRUPT": "rank=0:bytes=65536:element=5"})
    assert again.returncode == 1, again.stderr[-3000:]
    failed = {r["model"]: r["error"] for r in rows(tmp_path, "records") if r["status"] == "failed"}
    assert set(failed) == P2P_OPS, failed
    assert all(f"{op} of 65536 bytes returned a wrong value on rank 1: element 5 is 7.0, expected 6.0" in failed[op]
               for op in P2P_OPS), failed
