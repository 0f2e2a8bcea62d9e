"""Speed and truth across nodes, on the emulated 2-node cluster (tests/cluster.py): the same 2-node cell is measurably
slower on a link shaped to 200 Mbit/s than on an unshaped one, and its window obeys the one-node rules although
the two nodes' monotonic clocks are 10^6 s apart (testcluster.sh gives each node a time namespace of its own)."""
import json
import sqlite3
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "benchmarks" / "matrix-shaped-link.yaml"

# alone: the cell's rate over the shaped link is compared with the same cell's on the bare link
pytestmark = [pytest.mark.cluster, pytest.mark.alone]


def measure(cluster, tmp: Path) -> list[dict]:
    """benchmarks/matrix-shaped-link.yaml's cell (2 steps, 2 windows here) through `bench run` on node1; its rows."""
    text = MATRIX.read_text().replace("/tmp/bench-shaped-link", str(cluster.state_dir))
    text = text.replace("steps: 3\n", "steps: 2\n").replace("repeats: 3\n", "repeats: 2\n")
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "m.yaml").write_text(text)
    done = cluster.run("node1", [sys.executable, "-m", "bench", "run", "m.yaml"],
                       env=cluster.env({"PYTHONPATH": str(ROOT)}), timeout=600, cwd=tmp)
    with sqlite3.connect(tmp / "results" / "bench.db") as conn:
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("SELECT * FROM records ORDER BY repeat")]
    assert [r["status"] for r in rows] == ["ok", "ok"], done.stderr[-3000:]
    return rows


def test_a_shaped_link_slows_the_two_node_cell_and_the_window_never_mixes_clocks(cluster, tmp_path):
    unshaped = measure(cluster, tmp_path / "unshaped")
    cluster.shape("200mbit")
    try:
        shaped = measure(cluster, tmp_path / "shaped")
    finally:
        cluster.shape()
    fast = statistics.median(r["samples_per_sec"] for r in unshaped)
    slow = statistics.median(r["samples_per_sec"] for r in shaped)
    # 102 MB of gradients per step: ~4 s at 200 Mbit/s against < 1 s unshaped here (measured 0.11x).
    assert slow < 0.5 * fast, (fast, slow)

    # The nodes' monotonic clocks really differ (by testcluster.sh's 10^6 s per node)...
    uptimes = [float(cluster.run(n, ["cat", "/proc/uptime"]).stdout.split()[0]) for n in cluster.hosts]
    assert abs(uptimes[1] - uptimes[0]) > 5e5, uptimes
    # ...yet every window is the barrier-bounded span each rank timed on its own clock: nothing subtracts one node's
    # time from the other's (that would be ~10^6 s off), and the cell's window is its longest rank's.
    for row in unshaped + shaped:
        record = json.loads(row["record_json"])
        ranks = record["per_rank"]
        assert sorted(r["host"] for r in ranks) == ["node1", "node2"]
        assert 0 < record["window_s"] < 300 and record["window_s"] == max(r["window_s"] for r in ranks)
        assert record["samples_per_sec"] == pytest.approx(record["samples"] / record["window_s"])
