"""The transport of the torch.distributed engines' cells (DDP, FSDP2, layout cells): PyTorch's Gloo backend on CPU
names its transport when GLOO_LOG_LEVEL=INFO (bench.records.transport.TORCH_GLOO_DEBUG_ENV), NCCL on GPU; the
launcher's MPI (torchrun has none, mpirun starts the processes only) never decides them."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from bench.launch.evidence import debug_env, parse_transport
from bench.records.transport import TORCH_GLOO_DEBUG_ENV, Transport, verdict
from tests.conftest import TINY_WORKLOAD, bench_cli

DATA = Path(__file__).parent / "data" / "transport"
GLOO_TCP = "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/context.cc:243]"

# Real lines, torch 2.13.0+cpu on this 2-core machine, GLOO_LOG_LEVEL=INFO set by the cell's debug env.
# `bench run m.yaml --no-probe` with TINY_WORKLOAD and axes {gpu: [cpu], mpi: [gloo], gpus: [2], engine: [native]}
# (DDP under torchrun), the cell's job0/log.txt whole:
DDP_TORCHRUN = f"""\
{GLOO_TCP} INFO Rank 1 is connected to 1. Expected number of connected peers is: 1
{GLOO_TCP} INFO Rank 0 is connected to 1. Expected number of connected peers is: 1
bench worker: repeat 0: 16.3 img/s over 2 workers, window 0.98 s, slowest rank 0
bench worker: repeat 1: 18.5 img/s over 2 workers, window 0.86 s, slowest rank 1
"""
# The same with mpi: [openmpi] (DDP started by mpirun, MASTER_ADDR/PORT from bench): no Open MPI line at all, the
# workers never call MPI_Init.
DDP_MPIRUN = f"""\
{GLOO_TCP} INFO Rank 1 is connected to 1. Expected number of connected peers is: 1
{GLOO_TCP} INFO Rank 0 is connected to 1. Expected number of connected peers is: 1
bench worker: repeat 0: 15.8 img/s over 2 workers, window 1.01 s, slowest rank 0
"""
# model: tiny, seq_len 128, engine fsdp2, layout "pp=2,schedule=1f1b,m=4", gpus 2, mpi gloo: one line per rank and
# process group, without the group's name (two groups here).
LAYOUT_PP2 = f"""\
{GLOO_TCP} INFO Rank 1 is connected to 1. Expected number of connected peers is: 1
{GLOO_TCP} INFO Rank 0 is connected to 1. Expected number of connected peers is: 1
{GLOO_TCP} INFO Rank 1 is connected to 1. Expected number of connected peers is: 1
{GLOO_TCP} INFO Rank 0 is connected to 1. Expected number of connected peers is: 1
bench worker: repeat 0: 2,935 tokens/s (22.93 sequences/s) over 2 workers, window 0.35 s, slowest rank 1
"""
# gpus: [1] (one DDP worker): its group has no peer, nothing crosses anything.
DDP_ONE_WORKER = f"""\
{GLOO_TCP} INFO Rank 0 is connected to 0. Expected number of connected peers is: 0
bench worker: repeat 0: 14.3 img/s over 1 workers, window 0.56 s, slowest rank 0
"""


def _ours(log: str) -> str:
    return next(line for line in log.splitlines() if "connected to 1" in line)


@pytest.mark.parametrize("log, mpi, engine", [(DDP_TORCHRUN, "gloo", "native"), (DDP_MPIRUN, "openmpi", "native"),
                                              (LAYOUT_PP2, "gloo", "fsdp2")])
def test_torch_gloo_lines_read_as_tcp(log, mpi, engine):
    got = parse_transport(log, mpi, False, 1, engine)
    assert got == Transport("tcp", _ours(log), "torch-gloo")
    assert "gloo/transport/tcp/" in got.evidence
    assert verdict("tcp", got.effective, nodes=1).value == "match"
    assert verdict("ib", got.effective, nodes=1).value == "mismatch"  # Gloo has no InfiniBand in torch's wheels
    # Across nodes Gloo's pairs are TCP sockets too; the line does not say which peer is where, nor needs to.
    assert parse_transport(log, mpi, False, 2, engine).effective == "tcp"
    assert parse_transport(log, mpi, False, None, engine).effective == "tcp"


def test_without_the_engine_the_lines_are_not_read():
    """Horovod's cells are read by their flavour: PyTorch's Gloo lines are not Horovod's device line."""
    assert parse_transport(DDP_TORCHRUN, "gloo", False, 1).effective == "unknown"
    assert parse_transport(DDP_MPIRUN, "openmpi", False, 1) == Transport("unknown", None, None)


def test_a_group_without_peers_decides_nothing():
    assert parse_transport(DDP_ONE_WORKER, "gloo", False, 1, "native") == Transport("unknown", None, None)
    # ... but does not hide the groups that have peers (a mesh dimension of degree 1 beside a real one)
    assert parse_transport(DDP_ONE_WORKER + DDP_TORCHRUN, "gloo", False, 1, "fsdp2").evidence == _ours(DDP_TORCHRUN)


def _read(name: str) -> str:
    return "\n".join(ln for ln in (DATA / f"{name}.log").read_text().splitlines() if not ln.startswith("# "))


def test_the_launchers_mpi_never_decides_a_torch_distributed_cell():
    horovod_tcp = _read("openmpi_ob1_tcp_horovod")
    assert parse_transport(horovod_tcp, "openmpi", False, 1).effective == "tcp"  # a Horovod cell: Open MPI's btl
    assert parse_transport(horovod_tcp, "openmpi", False, 1, "native") == Transport("unknown", None, None)
    assert parse_transport(_read("gloo_horovodrun"), "gloo", False, 1, "fsdp2") == Transport("unknown", None, None)


def test_gpu_cells_are_read_from_nccl():
    nccl = _read("nccl_single_node_p2p")
    got = parse_transport(nccl, "gloo", True, 1, "native")
    assert (got.effective, got.layer) == ("shm", "nccl") and "via P2P/IPC" in got.evidence
    assert parse_transport(_read("nccl_multinode_ib"), "openmpi", True, 2, "fsdp2").effective == "ib"
    # NCCL silent: Gloo's lines on a GPU cell are not the gradients' path
    assert parse_transport(DDP_TORCHRUN, "gloo", True, 1, "native") == Transport("unknown", None, None)


def test_gloo_transport_directory_names_the_kind():
    """Written from Gloo's source tree (gloo/transport/{tcp,uv,ibverbs}/context.cc), not seen here: torch's Linux
    wheels build only tcp."""
    line = "[/src/third_party/gloo/gloo/transport/{}/context.cc:243] INFO Rank 0 is connected to 3. " \
           "Expected number of connected peers is: 3"
    for directory, kind in (("uv", "tcp"), ("ibverbs", "ib"), ("efa", "unknown")):
        assert parse_transport(line.format(directory), "gloo", False, 2, "native").effective == kind


def test_debug_env_turns_gloo_on_for_torch_distributed_cpu_cells_only():
    for mpi in ("gloo", "openmpi"):
        assert debug_env(mpi, False, "native") == {**debug_env(mpi, False), **TORCH_GLOO_DEBUG_ENV}
        assert debug_env(mpi, False, "fsdp2") == debug_env(mpi, False, "native")
        for engine in (None, "horovod"):
            assert "GLOO_LOG_LEVEL" not in debug_env(mpi, False, engine)
        assert debug_env(mpi, True, "native") == debug_env(mpi, True)  # GPU: NCCL's switches carry the evidence
    assert TORCH_GLOO_DEBUG_ENV == {"GLOO_LOG_LEVEL": "INFO"}  # INFO: one line per group and rank, none per step


@pytest.mark.e2e
def test_a_real_ddp_cell_reports_gloo_tcp(tmp_path):
    (tmp_path / "m.yaml").write_text(
        f"name: ddp-transport\n{TINY_WORKLOAD}axes:\n  gpu: [cpu]\n  mpi: [gloo]\n  gpus: [2]\n  engine: [native]\n",
        encoding="utf-8")
    done = bench_cli("run", "m.yaml", "--no-probe", cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "via tcp" in done.stderr + done.stdout
    with sqlite3.connect(tmp_path / "results" / "bench.db") as conn:
        rows = conn.execute("SELECT effective_transport, transport_verdict, transport_evidence, record_json "
                            "FROM records").fetchall()
    assert len(rows) == 2
    for effective, verdict_, evidence, record_json in rows:
        assert (effective, verdict_) == ("tcp", "match")
        assert "gloo/transport/tcp/context.cc" in evidence and "is connected to 1" in evidence
        assert json.loads(record_json)["launch_env"]["GLOO_LOG_LEVEL"] == "INFO"
