"""bench diagnose: the outlier rules (bench/analysis/diagnose.py, pure), the probe script run here for real
(models/probes/diag_probe.py: a compute round and a transfer over this machine's loopback), and the verb's input
errors."""
import subprocess
import sys

import pytest

from bench.analysis.diagnose import COMPUTE_BELOW, compute_findings, link_findings, node_compute
from tests.conftest import ROOT, bench_cli


def rnd(host, rates, cpus=(0,), machine=None, others=0.0):
    return [{"host": host, "kernels_per_s": r, "cpus": list(cpus), "machine": machine or f"m-{host}",
             "others_cpu_s_per_s": others} for r in rates]


def test_a_slow_node_is_named_against_the_median_and_healthy_nodes_are_not():
    nodes = node_compute({"n1": rnd("n1", [100, 90, 110]), "n2": rnd("n2", [98, 95, 100]),
                          "n3": rnd("n3", [50, 45, 52], others=0.9), "n4": rnd("n4", [101, 99, 97])})
    found = compute_findings(nodes)
    assert [f.subject for f in found] == ["n3"] and found[0].ratio == pytest.approx(50 / 99, rel=0.05)
    assert "other processes on n3 used 0.90 CPU-s/s" in found[0].text
    assert compute_findings(node_compute({h: rnd(h, [100, 100, 100]) for h in ("a", "b", "c")})) == []


def test_a_load_that_hits_every_node_in_one_round_names_nobody():
    # Round 2 ran while the machine was busy: every node slowed alike, the ratio within the round stays 1.
    rounds = {h: rnd(h, [100, 20, 100]) for h in ("a", "b", "c", "d")}
    assert compute_findings(node_compute(rounds)) == []


def test_nodes_pinned_to_one_cpu_count_as_sharing_it_and_are_compared_with_the_others():
    # Emulated: n1/n3 on CPU 0, n2/n4 on CPU 1, one machine. Probes on one core split it: 50 each is healthy.
    share = {"machine": "same"}
    healthy = {"n1": rnd("n1", [50] * 3, (0,), **share), "n3": rnd("n3", [50] * 3, (0,), **share),
               "n2": rnd("n2", [50] * 3, (1,), **share), "n4": rnd("n4", [50] * 3, (1,), **share)}
    assert compute_findings(node_compute(healthy)) == []
    hog = {**healthy, "n1": rnd("n1", [20] * 3, (0,), **share), "n3": rnd("n3", [20] * 3, (0,), others=0.6, **share)}
    found = compute_findings(node_compute(hog))
    assert [f.subject for f in found] == ["n3", "n1"]  # the node that holds the load first
    assert all(f.ratio == pytest.approx(0.4) for f in found) and "shares CPU 0 with n3" in found[1].text


def test_a_node_whose_every_link_is_slow_is_named_with_its_links():
    hosts = ["a", "b", "c", "d"]
    directed = {(s, r): (6e6 if s == "c" else 24e6) for s in hosts for r in hosts if s != r}
    found = link_findings(directed)
    assert [f.subject for f in found] == ["a–c", "b–c", "c–d", "c"]
    assert all(f.ratio == pytest.approx(0.25) for f in found)
    assert link_findings({k: 24e6 * (1 + 0.05 * i) for i, k in enumerate(directed)}) == []


def test_one_slow_link_names_that_link_only():
    hosts = ["a", "b", "c", "d"]
    directed = {(s, r): 24e6 for s in hosts for r in hosts if s != r}
    directed[("a", "b")] = 5e6
    assert [f.subject for f in link_findings(directed)] == ["a–b"]


def test_the_probes_run_here_for_real():
    probe = ROOT / "models" / "probes" / "diag_probe.py"
    out = subprocess.run([sys.executable, str(probe), "compute", "0.2"], capture_output=True, text=True, timeout=60)
    import json

    (r,) = json.loads(out.stdout.splitlines()[-1])
    assert r["kernels_per_s"] > 0 and r["cpus"] and r["others_cpu_s_per_s"] >= 0
    recv = subprocess.Popen([sys.executable, str(probe), "recv", "0.3"], stdout=subprocess.PIPE, text=True)
    port = recv.stdout.readline().split()[1]
    subprocess.run([sys.executable, str(probe), "send", "127.0.0.1", port, "0.3"], check=True, timeout=60,
                   capture_output=True)
    got = json.loads(recv.communicate(timeout=60)[0].splitlines()[-1])
    assert got["bytes"] > 0 and got["bytes_per_s"] > 0


@pytest.mark.parametrize("args,words", [
    (["--hosts", "a;b"], "'a;b' is not a plain host name"),
    (["--hosts", "a,a"], "a host is named twice"),
    (["--hostfile", "nowhere"], "cannot read nowhere"),
    (["--cell", "abc123", "--store", "none.db"], "none.db"),
    (["--cell", "colour=red", "--store", "none.db"], "--cell: unknown key 'colour'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    done = bench_cli("diagnose", *args, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert COMPUTE_BELOW < 1


def test_cell_hosts_takes_a_cell_id_or_a_selection_naming_one_cell(tmp_path, capsys):
    """`bench diagnose --cell`: the one selection syntax (bench/cells/selection.py); the hosts are its ranks' hosts."""
    from bench.commands.diagnose import cell_hosts
    from bench.core.errors import BenchInputError
    from bench.planning.cell import cell_id
    from bench.records.schema import parse_record
    from bench.store import Store
    from tests.factories import cell, record

    path = tmp_path / "bench.db"
    with Store(path) as store:
        store.begin_run("r1", matrix_name="t", matrix_path="m.yaml", backend="local", host="h", bench_version="0",
                        plan={})
        for gpus in (1, 2):
            for repeat in range(3):  # the cell's every repeat: a complete run
                data = record(run_id="r1", gpus=gpus, repeat=repeat)
                data["per_rank"] = [{**r, "host": f"node{r['rank'] + 1}"} for r in data["per_rank"]]
                store.write(parse_record({**data, "job": 0}))
        store.finish_run("r1")
    two = cell_id(cell(gpus=2))
    assert cell_hosts(str(path), two) == ["node1", "node2"]
    printed = capsys.readouterr().out.splitlines()  # its expected-value line, named by id and the one label
    assert printed and printed[0].startswith(f"{two}  cpu/pytorch/openmpi/ib=off/2w fp32: measured ")
    assert cell_hosts(str(path), "gpus=2,mpi=openmpi") == ["node1", "node2"]
    with pytest.raises(BenchInputError, match="matches 2 cells"):
        cell_hosts(str(path), "gpu=cpu")
    with pytest.raises(BenchInputError, match="no successful record of cell"):
        cell_hosts(str(path), "gpus=4")


def test_other_processes_cpu_never_counts_below_zero():
    """A process that ends between the two samples, or whose pid is reused, cannot make the others' CPU negative."""
    from models.probes.diag_probe import others_cpu_ticks

    before = {(10, 1): 500, (11, 2): 7, (12, 3): 40}
    after = {(10, 1): 530, (12, 9): 5, (13, 4): 20}  # 11 ended; pid 12 reused by a new process; 13 is new
    assert others_cpu_ticks(before, after) == 30 + 5 + 20
    assert others_cpu_ticks(before, {}) == 0
