"""bench/backends/shared/cell_launch.py: one function renders a cell's launch for every backend; a backend only says
where the cell goes (a Placement)."""
from pathlib import Path

import pytest

from bench.backends.shared.cell_launch import Placement, launch_for, threads_for
from bench.backends.shared.process import TOKEN_VAR
from bench.planning.matrix import load_matrix_text
from bench.planning.plan import plan_cells


def cells(axes: str):
    return plan_cells(load_matrix_text(f"name: t\naxes: {axes}\n").cells(), None)


@pytest.mark.parametrize("axes,cores,worker_threads,want", [
    ("{gpu: [cpu], gpus: [2]}", 8, None, 4),  # CPU workers share the node's cores (local, hosts)
    ("{gpu: [cpu], gpus: [4], workers_per_node: [2]}", 8, None, 4),  # ... the cores of their own node
    ("{gpu: [cpu], gpus: [3]}", 2, None, 1),  # never below one
    ("{gpu: [cpu], gpus: [2]}", None, None, 1),  # cores unknown
    ("{gpu: [V100], gpus: [2]}", 64, None, 4),  # a GPU worker: a few threads for its host side
    ("{gpu: [V100], gpus: [2]}", 64, 7, 7),  # what the backend gives each worker (Slurm's cpus-per-task)
    ("{gpu: [cpu], gpus: [2], threads: [3]}", 8, 7, 3),  # the cell's own setting wins
])
def test_threads_per_worker(axes, cores, worker_threads, want):
    [cell] = cells(axes)
    assert threads_for(cell, cores, worker_threads) == want


def test_one_node_runs_every_worker_here_and_several_nodes_take_the_placements_hosts(tmp_path):
    one, two = cells("{gpu: [cpu], gpus: [2], workers_per_node: [2, 1], engine: [native]}")
    where = Placement(tmp_path, hosts=("n1", "n2"), iface="eth9", master_port="4242", token="tok")
    a, b = (launch_for(c, "R", 3, where=where) for c in (one, two))
    assert a.spec.hosts == (("localhost", 2),) and a.spec.iface is None
    assert b.spec.hosts == (("n1", 1), ("n2", 1)) and b.spec.iface == "eth9"
    assert b.dir == tmp_path / "runs" / "R" / two.cell_id / "job3"
    assert str(b.dir / "records.jsonl") in b.spec.program
    # The native engine under a launcher (mpi: openmpi by default) meets at the first node, on the given port.
    assert (a.spec.env["MASTER_ADDR"], b.spec.env["MASTER_ADDR"], b.spec.env["MASTER_PORT"]) == \
        ("127.0.0.1", "n1", "4242")
    assert b.spec.env[TOKEN_VAR] == "tok" and b.render().env[TOKEN_VAR] == "tok"


def test_the_launcher_is_the_runtimes_and_torchrun_starts_native_gloo_cells(tmp_path):
    horovod, native = cells("{gpu: [cpu], gpus: [2], mpi: [gloo], engine: [horovod, native]}")
    h = launch_for(horovod, "R", 0, where=Placement(tmp_path))
    assert h.render().argv[0] == (h.tool or "horovodrun") and Path(h.render().argv[0]).name == "horovodrun"
    n = launch_for(native, "R", 0, where=Placement(tmp_path))
    assert n.render().argv[:3] == (n.runtime.python, "-m", "torch.distributed.run")
    assert "MASTER_PORT" not in n.spec.env  # torchrun's own rendezvous
