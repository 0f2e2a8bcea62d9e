"""bench.records.transport: recorded real logs (and documented-format excerpts) -> effective transport; mismatch rules.
Most cases go through bench.launch.evidence, which looks the flavour up by name and hands it to
bench.records.transport."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.launch import LAUNCHERS
from bench.launch.evidence import debug_env, parse_transport
from bench.records.transport import SHARED_DEBUG_ENV, Transport, debug_env_for, mismatch, parse_log, verdict


def debug_layers() -> dict[str, dict[str, str]]:
    """Every layer's switches: the shared layers' and each registered flavour's own (keyed by its name)."""
    return {**SHARED_DEBUG_ENV, **{name: dict(f.debug) for name, f in LAUNCHERS.items()}}


DATA = Path(__file__).parent / "data" / "transport"

# file -> (mpi, gpu, nodes, expected effective, expected layer, a fragment of the deciding line)
CASES = {
    # real runs on this machine (see each file's header)
    "openmpi_ob1_vader": ("openmpi", False, 1, "shm", "openmpi", "Using vader btl"),
    "openmpi_ob1_tcp_horovod": ("openmpi", False, 1, "tcp", "openmpi", "Using tcp btl"),
    "openmpi_ucx_sm": ("openmpi", False, 1, "shm", "ucx", "tag(sysv/memory cma/memory)"),
    "openmpi_ucx_tcp": ("openmpi", False, 1, "tcp", "ucx", "tag(tcp/lo tcp/eth0)"),
    "openmpi_ucx_declined": ("openmpi", False, 1, "unknown", None, None),
    "intelmpi_default_single_node": ("intelmpi", False, 1, "shm", "intelmpi", "Defaulting to shm fabric"),
    "intelmpi_ofi_tcp": ("intelmpi", False, 1, "tcp", "intelmpi", "libfabric provider: tcp"),
    "intelmpi_shm_ofi_tcp": ("intelmpi", False, 1, "shm", "intelmpi", "I_MPI_FABRICS=shm:ofi"),
    "intelmpi_ofi_shm_provider": ("intelmpi", False, 1, "shm", "intelmpi", "libfabric provider: shm"),
    "intelmpi_ofi_verbs_failed": ("intelmpi", False, 1, "unknown", None, None),
    "mpich_debian_ucx_shm": ("mpich", False, 1, "shm", "ucx", "tag(sysv/memory cma/memory)"),
    "mpich_debian_ucx_tcp": ("mpich", False, 1, "tcp", "ucx", "tag(tcp/lo tcp/eth0)"),
    "mpich5_ofi_tcp": ("mpich", False, 1, "shm", "mpich", "MPID/shm: MPIDI_POSIX"),
    "mpich5_ofi_default": ("mpich", False, 1, "shm", "mpich", "MPID/shm: MPIDI_POSIX"),
    "mpich5_ucx_tcp": ("mpich", False, 1, "shm", "mpich", "MPID/shm: MPIDI_POSIX"),
    "mpich5_ucx_default": ("mpich", False, 1, "shm", "mpich", "MPID/shm: MPIDI_POSIX"),
    "gloo_horovodrun": ("gloo", False, 1, "tcp", "gloo", "dev={tcp,"),
    # written from documented formats (no GPU, no IB, one machine here)
    "nccl_single_node_p2p": ("openmpi", True, 1, "shm", "nccl", "via P2P/IPC"),
    "nccl_multinode_ib": ("openmpi", True, 2, "ib", "nccl", "[send] via NET/IB/0"),
    "nccl_multinode_socket": ("intelmpi", True, 2, "tcp", "nccl", "via NET/Socket/0"),
    "nccl_horovodrun_ibext_plugin": ("gloo", True, 2, "ib", "nccl", "via NET/IBext/0"),
    "openmpi_ob1_openib_multinode": ("openmpi", False, 2, "ib", "openmpi", "Using openib btl"),
    "openmpi_ucx_rc_multinode": ("openmpi", False, 2, "ib", "ucx", "tag(rc_mlx5/mlx5_ib0:1)"),
    "mpich_ucx_multinode_dc": ("mpich", False, 2, "ib", "ucx", "inter-node cfg#2 tag(dc_mlx5"),
    "intelmpi_mlx_multinode": ("intelmpi", False, 2, "ib", "intelmpi", "libfabric provider: mlx"),
    "intelmpi_2019_tcp_rxm_multinode": ("intelmpi", False, 2, "tcp", "intelmpi", "libfabric provider: tcp;ofi_rxm"),
}


def read_log(name: str) -> str:
    """The file without its provenance header (which names transports itself)."""
    lines = (DATA / f"{name}.log").read_text().splitlines()
    assert lines[0].startswith("# "), f"{name}.log has no provenance header"
    return "\n".join(line for line in lines if not line.startswith("# "))


def test_every_file_has_a_case_and_a_header():
    files = {p.stem for p in DATA.glob("*.log")}
    assert files == set(CASES)
    for name in files:
        header = [ln for ln in (DATA / f"{name}.log").read_text().splitlines() if ln.startswith("# ")]
        assert any(re.search(r"\b20\d\d-\d\d-\d\d\b", ln) for ln in header), name  # when it ran
        assert any("Real run" in ln or "documented format" in ln or "Written from" in ln for ln in header), name


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_logs(name):
    mpi, gpu, nodes, effective, layer, fragment = CASES[name]
    got = parse_transport(read_log(name), mpi, gpu, nodes)
    assert (got.effective, got.layer) == (effective, layer)
    if fragment is None:
        assert got.evidence is None
    else:
        assert fragment in got.evidence
        assert got.evidence in read_log(name).replace("[0]<stderr>:", "").replace("[1]<stderr>:", "")
        assert got.evidence == got.evidence.strip() and "\n" not in got.evidence


def test_empty_and_unrelated_logs_are_unknown():
    for mpi in ("openmpi", "intelmpi", "mpich", "gloo"):
        for gpu in (False, True):
            assert parse_transport("", mpi, gpu, 2) == Transport("unknown", None, None)
            assert parse_transport("step 10 loss 2.3\nimages/sec 812\n", mpi, gpu, 1).effective == "unknown"


def test_unknown_mpi_is_an_error():
    with pytest.raises(ValueError):
        parse_transport("", "no-such-mpi", False)
    with pytest.raises(ValueError):
        debug_env("no-such-mpi", False)


def test_launcher_prefixes_are_stripped_and_ranks_interleave():
    log = ("[1,1]<stderr>:[vm:24805] mca: bml: Using self btl for send to [[3102,1],1] on node vm\n"
           "[1,0]<stdout>:rank 0 ready\n"
           "[1,0]<stderr>:[vm:24804] mca: bml: Using tcp btl for send to [[3102,1],1] on node vm\n"
           "[0]<stderr>:noise")
    got = parse_transport(log, "openmpi", False, 1)
    assert got == Transport("tcp", "[vm:24804] mca: bml: Using tcp btl for send to [[3102,1],1] on node vm", "openmpi")


def test_multinode_p2p_and_net_ib_means_ib_single_node_means_shm():
    log = read_log("nccl_multinode_ib")
    assert parse_transport(log, "openmpi", True, 2).effective == "ib"
    only_local = "\n".join(ln for ln in log.splitlines() if "via NET/" not in ln)
    # multi-node with no inter-node channel line: the chosen network still decides ...
    assert parse_transport(only_local, "openmpi", True, 2).evidence.endswith("Using network IB")
    # ... but with no network line either, the inter-node path is unseen: unknown, never ib, never shm
    bare = "\n".join(ln for ln in only_local.splitlines() if "Using" not in ln)
    assert parse_transport(bare, "openmpi", True, 2) == Transport("unknown", None, None)
    # the IB plugin line on a single node proves nothing: the channels are P2P
    assert parse_transport(read_log("nccl_single_node_p2p"), "openmpi", True, 1).effective == "shm"


def test_nccl_node_count_comes_from_the_log_when_not_given():
    log = (read_log("nccl_multinode_ib").replace("via NET/IB/0/GDRDMA", "via P2P/IPC")
           .replace("via NET/IB/1/GDRDMA", "x"))
    # nNodes 2 in the log: multi-node, and the only inter-node evidence is "Using network IB"
    assert parse_transport(log, "openmpi", True).evidence.endswith("Using network IB")


def test_slowest_inter_node_path_wins():
    log = ("[node0:1] mca: bml: Using openib btl for send to [[1,1],2] on node node1\n"
           "[node0:1] mca: bml: Using tcp btl for send to [[1,1],3] on node node2\n"
           "[node0:1] mca: bml: Using vader btl for send to [[1,1],1] on node node0")
    got = parse_transport(log, "openmpi", False, 3)
    assert got.effective == "tcp" and "node2" in got.evidence
    # only the intra-node line left: the inter-node path is unseen
    assert parse_transport(log.splitlines()[2], "openmpi", False, 2).effective == "unknown"


def test_mixed_single_and_multi_node_evidence_depends_on_nodes():
    log = read_log("intelmpi_shm_ofi_tcp")  # provider tcp, I_MPI_FABRICS=shm:ofi
    assert parse_transport(log, "intelmpi", False, 1).effective == "shm"
    assert parse_transport(log, "intelmpi", False, 2).effective == "tcp"
    mpich = read_log("mpich5_ofi_tcp")
    assert parse_transport(mpich, "mpich", False, 1).effective == "shm"
    assert parse_transport(mpich, "mpich", False, 2).effective == "tcp"


def test_candidate_provider_lines_do_not_decide():
    # MPICH lists candidates ("provider: shm, score = ...") before its choice; the choice here is sockets
    log = read_log("mpich5_ofi_default")
    assert "provider: shm, score" in log
    got = parse_transport(log, "mpich", False, 2)
    assert got.effective == "tcp" and got.evidence.startswith("libfabric provider: sockets")
    only_candidates = "\n".join(ln for ln in log.splitlines() if not ln.startswith("libfabric provider"))
    assert parse_transport(only_candidates, "mpich", False, 2).effective == "unknown"


def test_other_networks_are_unknown_not_ib():
    efa = "[0] MPI startup(): libfabric provider: efa\n[0] MPI startup(): 0  1  a  {0}\n[0] MPI startup(): 1  2  b  {0}"
    got = parse_transport(efa, "intelmpi", False, 2)
    assert got.effective == "unknown" and got.evidence.endswith("libfabric provider: efa")
    aws = "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/AWS Libfabric/0/GDRDMA"
    assert parse_transport(aws, "openmpi", True, 2).effective == "unknown"


def test_gpu_cells_fall_back_to_the_mpi_layer_when_nccl_is_silent():
    log = read_log("openmpi_ob1_tcp_horovod")
    assert parse_transport(log, "openmpi", True, 1) == parse_transport(log, "openmpi", False, 1)
    # and CPU cells ignore NCCL lines
    assert parse_transport(read_log("nccl_multinode_ib"), "openmpi", False, 2).effective == "unknown"


def test_gloo_without_debug_lines():
    assert parse_transport("[0]<stdout>:[...] Using GLOO to perform controller operations.",
                           "gloo", False, 1).effective == "tcp"
    assert parse_transport("rank 0 done", "gloo", False, 1).effective == "unknown"


@pytest.mark.parametrize("requested, effective, nodes, want", [
    ("ib", "ib", 2, "match"), ("tcp", "tcp", 2, "match"), (True, "ib", 4, "match"), (False, "tcp", 2, "match"),
    ("ib", "tcp", 2, "mismatch"), ("tcp", "ib", 2, "mismatch"), (False, "ib", 1, "mismatch"),
    ("ib", "tcp", 1, "mismatch"),
    ("tcp", "shm", 1, "match"), ("ib", "shm", 1, "match"),  # nothing crosses a fabric on one node
    ("tcp", "shm", 2, "unknown"), ("ib", "shm", 2, "unknown"),  # only the intra-node side was seen
    ("ib", "unknown", 2, "unknown"), ("tcp", "unknown", 1, "unknown"),
])
def test_verdict_and_mismatch(requested, effective, nodes, want):
    assert verdict(requested, effective, nodes=nodes).value == want
    assert mismatch(requested, effective, nodes=nodes) is (want == "mismatch")


def test_verdict_rejects_bad_values_and_needs_nodes():
    with pytest.raises(ValueError):
        verdict("roce", "ib", nodes=2)
    with pytest.raises(ValueError):
        verdict("ib", "rdma", nodes=2)
    with pytest.raises(TypeError):
        mismatch("ib", "tcp")  # the node count changes the answer: callers must give it


def test_debug_env_per_flavour():
    assert debug_env("openmpi", False) == {"OMPI_MCA_btl_base_verbose": "1", "OMPI_MCA_pml_ucx_verbose": "1",
                                           "UCX_LOG_LEVEL": "info"}
    assert debug_env("intelmpi", False) == {"I_MPI_DEBUG": "6"}
    assert debug_env("mpich", False) == {"MPIR_CVAR_DEBUG_SUMMARY": "1", "UCX_LOG_LEVEL": "info"}
    assert debug_env("gloo", False) == {"HOROVOD_LOG_LEVEL": "debug"}
    for mpi in LAUNCHERS:
        cpu, gpu = debug_env(mpi, False), debug_env(mpi, True)
        assert "NCCL_DEBUG" not in cpu
        assert gpu == {**cpu, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    assert set(debug_layers()) == {"nccl", "ucx", *LAUNCHERS}  # one entry per shared layer and per flavour
    # no layer floods: no trace/debug-everything levels
    flat = {k: v for env in debug_layers().values() for k, v in env.items()}
    assert flat["NCCL_DEBUG"] != "TRACE" and flat["UCX_LOG_LEVEL"] not in ("debug", "trace")
    assert int(flat["I_MPI_DEBUG"]) <= 6


class _LineCounter:
    """A flavour of its own (bench.records.transport.Reader): the pure module needs no registry, only what it is
    handed."""
    debug = {"MY_DEBUG": "1"}
    layers = ("ucx",)

    def parse(self, lines: list[str], nodes: int | None) -> Transport:
        return Transport("tcp", f"{len(lines)} lines, nodes={nodes}", "mine")


def test_the_pure_module_reads_with_the_flavour_it_is_handed():
    reader = _LineCounter()
    assert debug_env_for(reader, False) == {"MY_DEBUG": "1", **SHARED_DEBUG_ENV["ucx"]}
    assert debug_env_for(reader, True) == {"MY_DEBUG": "1", **SHARED_DEBUG_ENV["ucx"], **SHARED_DEBUG_ENV["nccl"]}
    assert parse_log("[1,0]<stderr>:a\nb\n", reader, False, 2) == Transport("tcp", "2 lines, nodes=2", "mine")
    nccl = read_log("nccl_multinode_ib")
    assert parse_log(nccl, reader, True, 2).layer == "nccl"  # GPU cells: NCCL decides when it printed anything
    assert parse_log(nccl, reader, False, 2).layer == "mine"


# Real 2-node runs on the emulated cluster (scripts/testcluster.sh; tests/test_cluster.py runs the same lines), one rank
# per node, eth1 between them: every flavour must read as TCP over the cluster's interface.
TWO_NODE_CASES = {
    "openmpi_ob1_tcp_2node_netns": ("openmpi", False, 2, "tcp", "openmpi", "Using tcp btl for send to"),
    "mpich5_ucx_tcp_2node_netns": ("mpich", False, 2, "tcp", "ucx", "inter-node cfg#1 tag(tcp/eth1)"),
    "intelmpi_ofi_tcp_2node_netns": ("intelmpi", False, 2, "tcp", "intelmpi", "libfabric provider: tcp"),
    "gloo_horovodrun_2node_netns": ("gloo", False, 2, "tcp", "gloo", "iface=eth1"),
}
CASES.update(TWO_NODE_CASES)


@pytest.mark.parametrize("name", sorted(TWO_NODE_CASES))
def test_recorded_two_node_logs(name):
    test_recorded_logs(name)


@pytest.mark.parametrize("name", sorted(TWO_NODE_CASES))
def test_two_node_logs_read_as_multi_node_without_being_told(name):
    """The node count comes from the log itself (peer hosts, pinning table, inter-node configurations)."""
    mpi, gpu, _, effective, layer, _ = TWO_NODE_CASES[name]
    got = parse_transport(read_log(name), mpi, gpu)
    assert (got.effective, got.layer) == (effective, layer)


def test_two_node_logs_show_both_hosts():
    for name in ("openmpi_ob1_tcp_2node_netns", "intelmpi_ofi_tcp_2node_netns", "mpich5_ucx_tcp_2node_netns"):
        log = read_log(name)
        assert "node1" in log and "node2" in log, name
