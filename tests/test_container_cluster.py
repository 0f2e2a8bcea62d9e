"""2-node cells whose workers run inside the openmpi cpu image on each emulated node (backend.hosts.container): the
launcher on node1 outside, each rank `podman run` on its node with the node's network. Records must name both nodes
and come from the image's Python (Debian's 3.11.2; the host venv's is another build), under Open MPI and Gloo."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.images import recipes
from tests.conftest import ROOT, TINY_WORKLOAD
from tests.test_images_built import ENGINE, WHY_NOT, ensure_built

VARIANT = recipes.variant("pt-tf-openmpi-cpu")
IMAGE = VARIANT.image
pytestmark = [pytest.mark.cluster, pytest.mark.images,
              pytest.mark.skipif(ENGINE is None, reason=f"no container engine: {WHY_NOT}")]


@pytest.fixture(scope="session")
def built() -> str:
    # Session-scoped like `cluster` and listed before it, so the image is built before a cluster is started.
    return ensure_built(VARIANT)


def image_python() -> str:
    out = subprocess.run(ENGINE.command("run", "--rm", "--network", "none", IMAGE, "python", "-c",
                                        "import sys; print(sys.version.split()[0])"),
                         capture_output=True, text=True, check=True, timeout=300)
    return out.stdout.strip()


def test_two_node_cells_run_inside_the_image_on_both_nodes(built, cluster, tmp_path):
    shared = tmp_path / "shared"
    matrix = (f"name: containers\n{TINY_WORKLOAD}  workers_per_node: 1\n"
              "axes: {gpu: [cpu], framework: [pytorch], gpus: [2], mpi: [openmpi, gloo]}\n"
              f"backend:\n  name: hosts\n  timeout_s: 300\n  hosts:\n    hostfile: {cluster.hostfile}\n"
              f"    ssh: {{config: {cluster.ssh_config}}}\n    iface: {cluster.iface}\n    workdir: {shared}\n"
              f"    container: {{image: '{IMAGE}', engine: {ENGINE.name}}}\n")
    (tmp_path / "m.yaml").write_text(matrix)
    done = cluster.run("node1", [sys.executable, "-m", "bench", "run", "m.yaml"], timeout=900, cwd=tmp_path,
                       env=cluster.env({"PYTHONPATH": str(ROOT)}))
    import sqlite3

    with sqlite3.connect(tmp_path / "results" / "bench.db") as conn:
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("SELECT * FROM records ORDER BY mpi, repeat")]
    python = image_python()
    for mpi in ("gloo", "openmpi"):
        mine = [r for r in rows if r["mpi"] == mpi]
        assert [r["status"] for r in mine] == ["ok", "ok"], (mine and mine[-1]["error"], done.stderr[-3000:])
        for row in mine:
            record = json.loads(row["record_json"])
            assert sorted(rank["host"] for rank in record["per_rank"]) == ["node1", "node2"]
            assert record["env_probe"]["python"] == python  # the image's interpreter, not the host's
            assert row["effective_transport"] == "tcp", row["transport_evidence"]
            assert "container.sh" in " ".join(record["command"]), record["command"]
