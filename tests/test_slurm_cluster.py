"""The slurm backend across nodes: a real Slurm with one slurmd on each node of the emulated cluster
(scripts/slurm_cluster.sh on tests/cluster.py's node1 and node2), and 2-node cells (one worker on each node) submitted
by `python -m bench run` on node1, under mpirun / mpiexec inside the allocation and under `srun --mpi=pmix`."""
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, TINY_WORKLOAD

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

SCRIPT = ROOT / "scripts" / "slurm_cluster.sh"


def leftovers(slurm_dir: Path) -> list[str]:
    """Processes of this Slurm: its daemons (named by their state dir), job steps and job tasks (their environment
    names the cluster)."""
    found = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            mine = str(slurm_dir) in cmd or p.environ().get("SLURM_CLUSTER_NAME") == "benchnodes"
        except psutil.Error:
            continue
        if mine:
            found.append(f"{p.info['pid']} {cmd[:120]}")
    return found


@pytest.fixture(scope="module")
def slurm_nodes(cluster):
    """A 2-node Slurm on the emulated cluster for this module; torn down after it, whatever happened, and checked
    gone (no daemon, no job step, no task)."""
    if not shutil.which("sbatch") or not shutil.which("munged"):
        pytest.skip("Slurm is not installed (Debian: apt-get install slurm-wlm munge)")
    env = cluster.env()
    slurm_dir = cluster.state_dir / "slurm"
    try:
        up = subprocess.run(["bash", str(SCRIPT), "up"], env=env, capture_output=True, text=True, timeout=120)
        # Installed but not starting is a bug in the script, not a reason to skip.
        assert up.returncode == 0 and not up.stdout, up.stderr
        yield slurm_dir / "slurm.conf"
    finally:
        down = subprocess.run(["bash", str(SCRIPT), "down"], env=env, capture_output=True, text=True, timeout=120)
        assert down.returncode == 0, down.stderr
        assert not slurm_dir.exists()
        assert not leftovers(slurm_dir), leftovers(slurm_dir)


def run_on_node1(cluster, conf: Path, tmp: Path, backend: str, axes: str, ssh: bool = False):
    """`bench run` on node1 (the submit host; slurmctld listens there). Without `ssh` the cluster's ssh is not on
    PATH: a launcher that tried ssh instead of the allocation's own srun would fail."""
    (tmp / "m.yaml").write_text(f"name: slurm2n\n{TINY_WORKLOAD}  workers_per_node: 1\naxes: {axes}\n"
                                f"backend:\n  name: slurm\n  timeout_s: 240\n  slurm:\n{backend}")
    base = cluster.env() if ssh else dict(os.environ)
    env = {**base, "PYTHONPATH": str(ROOT), "SLURM_CONF": str(conf), "BENCH_CLUSTER_DIR": str(cluster.state_dir)}
    done = cluster.run("node1", [sys.executable, "-m", "bench", "run", "m.yaml"], env=env, timeout=600, cwd=tmp)
    with sqlite3.connect(tmp / "results" / "bench.db") as conn:
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("SELECT * FROM records ORDER BY mpi, repeat")]
    queue = cluster.run("node1", ["squeue", "-h", "-o", "%i %j"], env=env, timeout=30)
    return done, rows, queue.stdout


@pytest.fixture(scope="module")
def launcher_cells(cluster, slurm_nodes, tmp_path_factory):
    """Open MPI's mpirun and MPICH's mpiexec inside a 2-node allocation, pinned to eth1."""
    tmp = tmp_path_factory.mktemp("slurm2n-launcher")
    return tmp, *run_on_node1(cluster, slurm_nodes, tmp, f"    iface: {cluster.iface}\n",
                              "{gpu: [cpu], gpus: [2], mpi: [openmpi, mpich]}")


@pytest.fixture(scope="module")
def srun_cells(cluster, slurm_nodes, tmp_path_factory):
    """Open MPI ranks started by `srun --mpi=pmix` across the 2 nodes, pinned to eth1."""
    tmp = tmp_path_factory.mktemp("slurm2n-srun")
    return tmp, *run_on_node1(cluster, slurm_nodes, tmp, f"    launch: srun\n    iface: {cluster.iface}\n",
                              "{gpu: [cpu], gpus: [2], mpi: [openmpi]}")


def assert_two_node_records(rows, stderr: str, mpi: str):
    mine = [r for r in rows if r["mpi"] == mpi]
    assert [r["status"] for r in mine] == ["ok", "ok"], (mine and mine[-1]["error"], stderr[-3000:])
    for row in mine:
        assert row["nodes"] == 2 and row["workers_per_node"] == 1 and row["world_size"] == 2
        record = json.loads(row["record_json"])
        assert sorted(rank["host"] for rank in record["per_rank"]) == ["node1", "node2"]
        assert row["samples_per_sec"] > 0
        assert row["effective_transport"] == "tcp", row["transport_evidence"]
    return mine


@pytest.mark.parametrize("mpi,tool", [("openmpi", "mpirun"), ("mpich", "mpiexec.hydra")])
def test_the_cells_launcher_spans_both_slurm_nodes_without_ssh(launcher_cells, mpi, tool):
    tmp, done, rows, queue = launcher_cells
    assert done.returncode == 0, done.stderr[-3000:]
    [first, _] = assert_two_node_records(rows, done.stderr, mpi)
    assert Path(json.loads(first["record_json"])["command"][0]).name == tool
    script = (tmp / "results" / "runs" / first["run_id"] / first["cell_id"] / "job0" / "job.sbatch").read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=1" in script
    # The host list comes from the allocation, and the interface is pinned.
    assert 'BENCH_NODES=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))' in script
    assert {"openmpi": "--mca btl_tcp_if_include eth1", "mpich": "-iface eth1"}[mpi] in script
    assert not queue.strip(), f"jobs left in the queue: {queue}"


def test_srun_with_pmix_starts_one_rank_on_each_slurm_node(srun_cells):
    tmp, done, rows, queue = srun_cells
    assert done.returncode == 0, done.stderr[-3000:]
    [first, _] = assert_two_node_records(rows, done.stderr, "openmpi")
    record = json.loads(first["record_json"])
    assert record["command"][:4] == ["srun", "--mpi=pmix", "--ntasks=2", "--ntasks-per-node=1"]
    assert record["env_probe"]["horovod_controller"] == "mpi"
    script = (tmp / "results" / "runs" / first["run_id"] / first["cell_id"] / "job0" / "job.sbatch").read_text()
    # No mpirun flags under srun: the interface reaches Open MPI as its variables.
    assert re.search(r"^export OMPI_MCA_btl_tcp_if_include=eth1$", script, re.M), script
    assert re.search(r"^export OMPI_MCA_oob_tcp_if_include=eth1$", script, re.M), script
    assert not queue.strip(), f"jobs left in the queue: {queue}"
