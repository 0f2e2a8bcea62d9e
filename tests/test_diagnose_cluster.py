"""`bench diagnose` on the emulated cluster: 4 nodes pinned on this machine's CPUs, every link shaped to 200 Mbit/s.
A healthy cluster's links name nothing; node3's egress shaped to a quarter names node3's three links and node3; two
busy loops on node3 name node3 for compute, first, and node1, which shares its CPU. (The full healthy run, compute
included, is benchmarks/diagnose_cluster.py's, with figures in docs/diagnose.md: another job's load on one of this
machine's 2 cores names that core's nodes, which is right but not what a test can hold steady.)"""
import pytest

from benchmarks.diagnose_cluster import RATE, SLOW_RATE, diagnose, named, start_hog, stop

pytestmark = [pytest.mark.cluster, pytest.mark.diagnose]


@pytest.fixture(scope="module")
def four_nodes():
    from tests import cluster as emulated

    reason = emulated.unavailable()
    if reason:
        pytest.skip(f"EMULATED CLUSTER NOT AVAILABLE, multi-node tests NOT RUN: {reason}")
    c = emulated.start(4, pin=True)
    try:
        c.shape(rate=RATE)
        yield c
    finally:
        c.down()


def test_healthy_links_name_nothing_and_a_slow_node_link_names_that_node(four_nodes):
    code, out, wall = diagnose(four_nodes, "links")
    assert code == 0, out
    assert named(out) == [], out
    four_nodes.shape(rate=SLOW_RATE, node="node3")
    try:
        code, out, wall = diagnose(four_nodes, "links")
    finally:
        four_nodes.shape(rate=RATE, node="node3")
    assert code == 0, out
    found = named(out)
    assert sorted(f.split(":")[0] for f in found if f.startswith("link")) == \
        ["link node1–node3", "link node2–node3", "link node3–node4"], out
    assert any(f.startswith("node3: every link slow") for f in found), out
    assert not any("node1: every" in f or "node2: every" in f or "node4: every" in f for f in found), out
    assert wall < 120, f"diagnose took {wall:.0f} s"


def test_a_busy_core_names_its_node_first_and_the_node_sharing_it(four_nodes):
    import time

    hogs = start_hog(four_nodes, "node3")
    try:
        time.sleep(1)
        code, out, wall = diagnose(four_nodes, "compute")
    finally:
        stop(hogs)
    assert code == 0, out
    found = named(out)
    assert [f.split(":")[0] for f in found] == ["node3", "node1"], out  # the node holding the load first
    assert "other processes on node3 used" in found[0] and "shares CPU 0 with node3" in found[1], out
    assert wall < 120, f"diagnose took {wall:.0f} s"
