"""Faults across nodes, through `python -m bench run` with the hosts backend on the emulated 2-node cluster
(tests/cluster.py): a worker killed on node2 mid-window, node2's link taken down mid-window, node2's sshd gone
before the cell starts. Each run holds the faulty 2-node cell and a 1-node cell on node1 that must still be
measured; each ends with the 2-node cell `failed` with a reason naming node2, well inside its timeout, no process of
the run left on either node, and a store that opens and holds every record."""
import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.backends.shared.guard import LEASH_GRACE_S
from bench.planning.matrix import load_matrix_text
from bench.planning.plan import plan_cells

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 150  # the cells' timeout: every fault must end its cell well before it
# Windows of a few seconds (5 steps, each an allreduce of ResNet-50's 102 MB of gradients): a fault lands inside one.
WORKLOAD = """
workload:
  batch_per_gpu: 4
  image_size: 32
  warmup_steps: 1
  steps: 5
  repeats: 3
  threads: 1
  channels_last: false
  workers_per_node: 1
"""

# alone: each fault is timed into the middle of a cell's measured window
pytestmark = [pytest.mark.cluster, pytest.mark.alone]


def matrix(cluster, workdir: Path) -> str:
    return (f"name: faults\n{WORKLOAD}axes: {{gpu: [cpu], gpus: [2, 1], mpi: [openmpi]}}\n"
            f"backend:\n  name: hosts\n  timeout_s: {TIMEOUT_S}\n  hosts:\n    hostfile: {cluster.hostfile}\n"
            f"    ssh: {{config: {cluster.ssh_config}}}\n    iface: {cluster.iface}\n    workdir: {workdir}\n")


def run(cluster, tmp: Path, fault=None):
    """`bench run` on node1, `fault(two_node_cell_id, workdir)` beside it in a thread; (done, rows, fault's result)."""
    text = matrix(cluster, tmp / "shared")
    (tmp / "m.yaml").write_text(text)
    [two] = [c.cell_id for c in plan_cells(load_matrix_text(text).cells(), None) if c.nodes == 2]
    result = {}
    driver = threading.Thread(target=lambda: result.update(fault(two, tmp / "shared")), daemon=True) if fault else None
    if driver:
        driver.start()
    done = cluster.run("node1", [sys.executable, "-m", "bench", "run", "m.yaml"],
                       env=cluster.env({"PYTHONPATH": str(ROOT)}), timeout=600, cwd=tmp)
    if driver:
        driver.join(timeout=60)
    db = tmp / "results" / "bench.db"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("SELECT * FROM records ORDER BY gpus, repeat")]
    return done, rows, result, two


def wait_for_window(workdir: Path, cell: str, deadline_s: float = 300) -> None:
    """Until the cell's first window has closed (its worker said so): the next window is open."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        for log in workdir.glob(f"runs/*/{cell}/job0/log.txt"):
            if "bench worker: repeat 0:" in log.read_text(errors="replace"):
                time.sleep(1)
                return
        time.sleep(0.3)
    raise AssertionError(f"cell {cell} never closed its first window")


def assert_the_rest_holds(cluster, done, rows, two):
    """The 1-node cell measured, the 2-node cell's records whole, nothing of the run left on any node."""
    one_node = [r for r in rows if r["cell_id"] != two]
    assert [r["status"] for r in one_node] == ["ok"] * 3, done.stderr[-3000:]
    assert all(r["samples_per_sec"] > 0 and r["nodes"] == 1 for r in one_node)
    mine = [r for r in rows if r["cell_id"] == two]
    assert mine[-1]["status"] == "failed" and all(r["status"] == "ok" for r in mine[:-1])
    assert done.returncode == 1, done.stderr[-3000:]  # a failed cell: exit 1, the run itself completed
    for node in cluster.hosts:
        assert cluster.processes(node) == [], node


def test_a_worker_killed_on_node2_fails_its_cell_naming_node2(cluster, tmp_path):
    def kill_on_node2(cell, workdir):
        wait_for_window(workdir, cell)
        pids = cluster.run("node2", ["pgrep", "-f", f"models/.*--cell-id {cell}"]).stdout.split()
        assert pids, "no worker of the cell on node2"
        cluster.run("node2", ["kill", "-KILL", *pids])
        return {"at": time.time(), "pids": pids}

    done, rows, fault, two = run(cluster, tmp_path, kill_on_node2)
    assert fault["pids"], done.stderr[-3000:]
    failed = [r for r in rows if r["cell_id"] == two][-1]
    assert failed["error"].startswith("node2: rank 1 exited on signal 9 (Killed)"), failed["error"]
    assert failed["written_unix"] - fault["at"] < 30  # the launcher's own notice, far inside TIMEOUT_S
    assert_the_rest_holds(cluster, done, rows, two)


def test_node2s_link_down_mid_window_fails_its_cell_naming_node2(cluster, tmp_path):
    def cut_node2(cell, workdir):
        wait_for_window(workdir, cell)
        cluster.link_down("node2")
        return {"at": time.time()}

    try:
        done, rows, fault, two = run(cluster, tmp_path, cut_node2)
        failed = [r for r in rows if r["cell_id"] == two][-1]
        assert failed["error"].startswith("node2 stopped answering during the cell (its leash's ssh: exit 255"), \
            failed["error"]
        # ssh's keep-alives give up after ~6-8 s; the cell fails then, not at its timeout.
        assert failed["written_unix"] - fault["at"] < 40 < TIMEOUT_S, failed["written_unix"] - fault["at"]
        # node2 is cut off: only its own leash can end the cell there, LEASH_GRACE_S after the last heartbeat.
        end = time.monotonic() + LEASH_GRACE_S + 20
        while cluster.processes("node2") and time.monotonic() < end:
            time.sleep(1)
        assert_the_rest_holds(cluster, done, rows, two)
    finally:
        cluster.link_up("node2")


def test_node2_without_sshd_fails_only_the_cell_that_needs_it(cluster, tmp_path):
    cluster.sshd("node2", "stop")
    try:
        done, rows, _, two = run(cluster, tmp_path)
    finally:
        cluster.sshd("node2", "start")
    [failed] = [r for r in rows if r["cell_id"] == two]
    assert failed["error"].startswith("node check failed: node2: unreachable over ssh ("), failed["error"]
    assert_the_rest_holds(cluster, done, rows, two)


def test_a_run_stopped_by_sigterm_mid_window_leaves_nothing_on_any_node(cluster, tmp_path):
    """`timeout` or a CI runner stops `bench run` (hosts backend) with SIGTERM inside the 2-node cell's window: exit
    143, the cell recorded as interrupted, the store whole, and no process of the run on either node."""
    import subprocess

    text = matrix(cluster, tmp_path / "shared")
    (tmp_path / "m.yaml").write_text(text)
    [two] = [c.cell_id for c in plan_cells(load_matrix_text(text).cells(), None) if c.nodes == 2]
    proc = cluster.popen("node1", [sys.executable, "-m", "bench", "run", "m.yaml"],
                         env=cluster.env({"PYTHONPATH": str(ROOT)}), cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        wait_for_window(tmp_path / "shared", two)
        stop = cluster.run("node1", ["pkill", "-TERM", "-f", f"{sys.executable} -m bench run m.yaml"], timeout=30)
        assert stop.returncode == 0, stop.stderr
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err[-3000:]
    with sqlite3.connect(tmp_path / "results" / "bench.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        statuses = [s for (s,) in conn.execute("SELECT status FROM records WHERE cell_id = ? ORDER BY repeat",
                                               (two,))]
    assert statuses and statuses[-1] == "interrupted", statuses
    deadline = time.monotonic() + LEASH_GRACE_S + 30  # a remote worker's leash ends it once its launcher is gone
    while any(cluster.processes(node) for node in cluster.hosts) and time.monotonic() < deadline:
        time.sleep(1)
    for node in cluster.hosts:
        assert cluster.processes(node) == [], node
