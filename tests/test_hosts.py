"""The hosts backend: its matrix section, its hostfile, its node checks, and (on the emulated cluster of network
namespaces, tests/cluster.py) real 2-node cells through `python -m bench run`."""
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from bench.backend_settings.hosts import HostsConfig, read_hostfile
from bench.backends.hosts.backend import HostsBackend
from bench.backends.hosts.nodes import node_verdict
from bench.core.errors import BenchInputError
from bench.planning.matrix import load_matrix_text
from bench.planning.plan import plan_cells
from tests import framework_grid
from tests.conftest import TINY_WORKLOAD, bench_cli

ROOT = Path(__file__).resolve().parent.parent


def backend(tmp_path, **section) -> HostsBackend:
    return HostsBackend(HostsConfig.model_validate(section), tmp_path, 60)


def plan(text: str, b):
    return plan_cells(load_matrix_text(text).cells(), b)


# --- the matrix section and the hostfile -----------------------------------------------------------------------
def test_hostfile_in_open_mpi_form(tmp_path):
    path = tmp_path / "hostfile"
    path.write_text("# the cluster\nnode1 slots=2\n\nnode2   slots=4 max_slots=8  # big one\n10.0.0.7\n")
    assert [(h.name, h.slots) for h in read_hostfile(path)] == [("node1", 2), ("node2", 4), ("10.0.0.7", None)]


@pytest.mark.parametrize("line,words", [
    ("node2 slots=two", "'slots=two' is not slots=N"),
    ("node2 slots=0", "'slots=0' is not slots=N"),
    ("node2 cpus=4", "'cpus=4' is not slots=N"),
    ("node;rm slots=1", "'node;rm' is not a plain host name"),
    ("node1 slots=1", "host node1 listed twice"),
])
def test_a_bad_hostfile_line_is_one_line_naming_file_and_line(tmp_path, line, words):
    path = tmp_path / "hostfile"
    path.write_text(f"node1 slots=1\n# comment\n{line}\n")
    with pytest.raises(BenchInputError) as e:
        read_hostfile(path)
    assert str(e.value).startswith(f"{path}:3: hostfile: ") and words in str(e.value)
    assert "\n" not in str(e.value)


def test_a_bad_hostfile_stops_plan_and_run_with_exit_2_and_nothing_written(tmp_path):
    (tmp_path / "hostfile").write_text("node1 slots=1\nnode2 slots=x\n")
    (tmp_path / "m.yaml").write_text("name: t\naxes: {gpu: [cpu]}\nbackend:\n  name: hosts\n"
                                     f"  hosts: {{hostfile: {tmp_path / 'hostfile'}}}\n")
    for verb in ("plan", "run"):
        result = bench_cli(verb, "m.yaml", cwd=tmp_path, timeout=120)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and f"{tmp_path / 'hostfile'}:2:" in lines[0] and "slots=x" in lines[0]
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("section,words", [
    ("{hosts: [a, b], hostfile: h}", "not both"),
    ("{hosts: ['a b']}", "not a plain host name"),
    ("{hosts: [a, a]}", "listed twice"),
    ("{hosts: [a], ssh: {port: 70000}}", "backend.hosts.ssh.port"),
    ("{hosts: [a], ssh: {user: 'x y'}}", "backend.hosts.ssh.user"),
    ("{hosts: [a], iface: 'eth0; reboot'}", "backend.hosts.iface"),
    ("{hosts: [a], colour: red}", "unknown key 'colour'"),
])
def test_bad_sections_name_the_key_and_line(section, words):
    with pytest.raises(BenchInputError) as e:
        load_matrix_text(f"name: t\naxes: {{gpu: [cpu]}}\nbackend:\n  name: hosts\n  hosts: {section}\n")
    assert str(e.value).startswith("<string>:5: ") and words in str(e.value)


def test_no_hosts_named_is_an_input_error(tmp_path):
    with pytest.raises(BenchInputError, match="backend.hosts: name the machines"):
        backend(tmp_path)


# --- planning ---------------------------------------------------------------------------------------------------
def test_cells_take_the_first_hosts_with_room_and_need_enough_of_them(tmp_path):
    (tmp_path / "hostfile").write_text("small slots=1\nbig1 slots=4\nbig2 slots=4\n")
    b = backend(tmp_path, hostfile=str(tmp_path / "hostfile"), iface="eth1")
    cells = plan("name: t\naxes: {gpu: [cpu], gpus: [2, 4, 8], workers_per_node: [1, 2]}\n", b)
    got = {(c.cell["gpus"], c.cell["workers_per_node"]): (c.status, c.reason, b.hosts_for(c.cell, c.nodes))
           for c in cells}
    assert got[(2, 1)] == ("planned", None, ("small", "big1"))
    assert got[(2, 2)] == ("planned", None, ("big1",))
    assert got[(4, 2)] == ("planned", None, ("big1", "big2"))
    assert got[(4, 1)][1] == "needs 4 nodes; backend.hosts has 3"
    assert got[(8, 2)][1] == "needs 4 nodes with 2 slots each; backend.hosts has 2"


def test_the_launch_line_is_the_flavours_with_hosts_interface_and_ssh(tmp_path):
    b = backend(tmp_path, hosts=["node1", "node2"], iface="eth1",
                ssh={"config": "/etc/cl/ssh_config", "port": 2222})
    [omp, gloo] = plan("name: t\naxes: {gpu: [cpu], gpus: [2], workers_per_node: [1], mpi: [openmpi, gloo]}\n", b)
    argv = b.render(omp, "R").argv
    assert argv[argv.index("-H") + 1] == "node1:1,node2:1"
    assert "btl_tcp_if_include" in argv and argv[argv.index("btl_tcp_if_include") + 1] == "eth1"
    assert "-F /etc/cl/ssh_config -p 2222" in argv  # plm_rsh_args, rendered by the flavour
    argv = b.render(gloo, "R").argv
    assert argv[argv.index("-H") + 1] == "node1:1,node2:1" and argv[argv.index("--network-interface") + 1] == "eth1"
    # horovodrun takes no ssh config file: only the port is rendered; the config reaches its ssh through a wrapper.
    assert argv[argv.index("--ssh-port") + 1] == "2222" and "-F" not in argv
    [wrapper_dir] = b._ssh_wrapper("gloo", tmp_path)
    assert "-F /etc/cl/ssh_config" in (Path(wrapper_dir) / "ssh").read_text()
    assert b._ssh_wrapper("openmpi", tmp_path) == ()


def test_a_cidr_interface_skips_cells_whose_layers_need_a_name(tmp_path):
    b = backend(tmp_path, hosts=["node1", "node2"], iface="198.18.0.0/24")
    one, two = plan("name: t\naxes: {gpu: [cpu], gpus: [2], workers_per_node: [2, 1], mpi: [gloo]}\n", b)
    assert one.status == "planned"  # one node: no interface between nodes to name
    assert two.reason == ("iface '198.18.0.0/24' is a network (CIDR); horovodrun --network-interface needs an "
                          "interface name such as eth0")


# --- node checks ------------------------------------------------------------------------------------------------
HERE = {"host": "ctl", "python": "3.11.2", "bench": "0.1.0", "models": "abc", "horovod": "0.28.1", "cores": 8,
        "gpus": 0, "marker": "m1", "iface": True}


def verdict(tmp_path, facts, text="name: t\naxes: {gpu: [cpu], gpus: [4], workers_per_node: [2]}\n"):
    [cell] = plan(text, None)
    return node_verdict("node2", facts, HERE, cell, "eth1", tmp_path)


def test_node_checks_name_the_node_and_what_differs(tmp_path):
    assert verdict(tmp_path, dict(HERE)) is None
    assert verdict(tmp_path, "unreachable over ssh (Connection refused)") == \
        "node2: unreachable over ssh (Connection refused)"
    assert verdict(tmp_path, {**HERE, "python": "3.11.9"}) == "node2: Python 3.11.9, this machine has 3.11.2"
    assert verdict(tmp_path, {**HERE, "horovod": None}) == "node2: Horovod missing, this machine has 0.28.1"
    assert verdict(tmp_path, {**HERE, "models": "zzz"}) == "node2: workload code zzz, this machine has abc"
    assert "does not see the shared workdir" in verdict(tmp_path, {**HERE, "marker": None})
    assert verdict(tmp_path, {**HERE, "iface": False}) == "node2: has no interface eth1"
    assert verdict(tmp_path, {**HERE, "cores": 1}) == "node2: 1 cores for 2 CPU workers"
    gpu = "name: t\naxes: {gpu: [V100], gpus: [4], workers_per_node: [2]}\n"
    assert verdict(tmp_path, {**HERE, "gpus": 1}, gpu).startswith(
        "node2: 1 GPUs (nvidia-smi -L) for 2 workers of Tesla V100")
    assert verdict(tmp_path, {**HERE, "gpus": 2}, gpu) is None


def test_an_unreachable_node_fails_only_the_cells_that_need_it(tmp_path):
    """Real ssh, on the loopback only: 127.0.0.2 is not this machine's name or address, so it is reached over ssh,
    on a port nothing listens on."""
    b = backend(tmp_path, hosts=["localhost", "127.0.0.2"], ssh={"connect_timeout_s": 2, "port": 9}, iface="lo")
    b.prepare([])
    one, two = plan("name: t\naxes: {gpu: [cpu], gpus: [1, 2], workers_per_node: [1]}\n", b)
    assert b.node_problem(one, ("localhost",)) is None
    assert b.node_problem(two, ("localhost", "127.0.0.2")).startswith("127.0.0.2: unreachable over ssh (")
    handle = b.submit(two, "R")
    outcome = b.collect(handle)
    assert outcome.status == "failed" and outcome.reason.startswith("node check failed: 127.0.0.2: unreachable")


# --- real cells on the emulated cluster (tests/cluster.py: node1 and node2, eth1 between them) -------------------
def cluster_matrix(cluster, workdir: Path, hosts: str, cells: str) -> str:
    return (f"name: hosts\n{TINY_WORKLOAD}  workers_per_node: 1\n{cells}"
            f"backend:\n  name: hosts\n  timeout_s: 240\n  hosts:\n    {hosts}\n"
            f"    ssh: {{config: {cluster.ssh_config}}}\n    iface: {cluster.iface}\n    workdir: {workdir}\n")


def run_on_node1(cluster, tmp: Path, matrix: str):
    (tmp / "m.yaml").write_text(matrix)
    env = cluster.env({"PYTHONPATH": str(ROOT)})
    done = cluster.run("node1", [sys.executable, "-m", "bench", "run", "m.yaml"], env=env, timeout=900, cwd=tmp)
    with sqlite3.connect(tmp / "results" / "bench.db") as conn:
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("SELECT * FROM records ORDER BY mpi, engine, repeat")]
    return done, rows


FLAVOURS = [("openmpi", "horovod"), ("gloo", "horovod"), ("mpich", "horovod"), ("intelmpi", "horovod"),
            ("openmpi", "native")]
# TensorFlow and Keras under the MPICH-ABI flavours (their own Horovod build, in .venv-mpich): the 2018 study's
# TensorFlow + Intel MPI pairing across nodes. NHWC: TensorFlow's CPU convolutions take no other layout. The framework
# grid (tests/framework_grid.py) leaves these pairs to this module.
TF_PAIRS = list(framework_grid.RUN_ACROSS_NODES)


@pytest.fixture(scope="module")
def two_node_cells(cluster, tmp_path_factory):
    """One `bench run` on node1 of a 2-node cpu cell (one worker on each node) per flavour and the native engine,
    PyTorch's, and TensorFlow and Keras under MPICH and Intel MPI."""
    tmp = tmp_path_factory.mktemp("hosts2")
    cells = "axes: {gpu: [cpu], framework: [pytorch], gpus: [2], mpi: [openmpi, gloo, mpich, intelmpi], " \
            "engine: [horovod, native]}\n" \
            "exclude:\n" + "".join(f"  - {{mpi: {m}, engine: native}}\n" for m in ("gloo", "mpich", "intelmpi")) + \
            "include:\n" + "".join(f"  - {{gpu: cpu, framework: {f}, gpus: 2, mpi: {m}, engine: horovod, "
                                   f"channels_last: true}}\n" for f, m in TF_PAIRS)
    done, rows = run_on_node1(cluster, tmp, cluster_matrix(cluster, tmp / "shared", f"hostfile: {cluster.hostfile}",
                                                           cells))
    return done, rows


@pytest.mark.cluster
@pytest.mark.parametrize("mpi,engine", FLAVOURS, ids=[f"{m}-{e}" for m, e in FLAVOURS])
def test_a_two_node_cell_runs_one_worker_on_each_node(two_node_cells, mpi, engine):
    done, rows = two_node_cells
    mine = [r for r in rows if r["mpi"] == mpi and r["engine"] == engine and r["framework"] == "pytorch"]
    assert mine, done.stderr[-3000:]
    assert [r["status"] for r in mine] == ["ok", "ok"], (mine[-1]["error"], done.stderr[-3000:])
    for row in mine:
        assert row["nodes"] == 2 and row["workers_per_node"] == 1 and row["world_size"] == 2
        record = json.loads(row["record_json"])
        assert sorted(rank["host"] for rank in record["per_rank"]) == ["node1", "node2"]
        assert row["samples_per_sec"] > 0


@pytest.mark.cluster
@pytest.mark.parametrize("mpi", ["openmpi", "gloo", "mpich", "intelmpi"])
def test_a_two_node_cells_log_shows_tcp_between_the_nodes(two_node_cells, mpi):
    _, rows = two_node_cells
    [first, *_] = [r for r in rows if r["mpi"] == mpi and r["engine"] == "horovod" and r["framework"] == "pytorch"]
    assert first["effective_transport"] == "tcp", first["transport_evidence"]


@pytest.mark.cluster
@pytest.mark.parametrize("framework,mpi", TF_PAIRS, ids=[f"{f}-{m}" for f, m in TF_PAIRS])
def test_tensorflow_and_keras_run_across_two_nodes_under_the_mpich_abi(two_node_cells, framework, mpi):
    done, rows = two_node_cells
    mine = [r for r in rows if r["mpi"] == mpi and r["framework"] == framework]
    assert [r["status"] for r in mine] == ["ok", "ok"], (mine and mine[-1]["error"], done.stderr[-3000:])
    for row in mine:
        record = json.loads(row["record_json"])
        assert row["world_size"] == 2 and sorted(rank["host"] for rank in record["per_rank"]) == ["node1", "node2"]
        assert record["env_probe"]["horovod_built"]["mpi"] and row["effective_transport"] == "tcp"


@pytest.mark.cluster
def test_a_dead_node_fails_only_its_cells_and_a_remote_first_host_runs_the_launcher_over_ssh(cluster, tmp_path):
    """node3 does not exist (no address: ssh cannot resolve it, nothing leaves the namespaces): the 2-node cell that
    needs it fails naming it; the 1-node cell, whose only host is node2, runs there with its launcher started over
    ssh from node1."""
    cells = "axes: {gpu: [cpu], gpus: [1, 2], mpi: [openmpi]}\n"
    done, rows = run_on_node1(cluster, tmp_path, cluster_matrix(cluster, tmp_path / "shared", "hosts: [node2, node3]",
                                                                cells))
    assert done.returncode == 1, done.stderr[-3000:]
    one = [r for r in rows if r["gpus"] == 1]
    two = [r for r in rows if r["gpus"] == 2]
    assert [r["status"] for r in one] == ["ok", "ok"], done.stderr[-3000:]
    assert [rank["host"] for rank in json.loads(one[0]["record_json"])["per_rank"]] == ["node2"]
    assert [r["status"] for r in two] == ["failed"]
    assert two[0]["error"].startswith("node check failed: node3: unreachable over ssh ("), two[0]["error"]
