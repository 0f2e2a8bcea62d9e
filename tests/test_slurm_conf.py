"""The one slurm.conf writer (scripts/lib/slurm_conf.sh) that scripts/slurm_local.sh and scripts/slurm_cluster.sh
source: what it writes for each, and that it rewrites the file only when the text changes. Starts no daemon."""
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

LIB = ROOT / "scripts" / "lib" / "slurm_conf.sh"


def bash(script: str, *args: str) -> str:
    done = subprocess.run(["bash", "-c", f'set -euo pipefail; . "$0"; {script}', str(LIB), *args],
                          capture_output=True, text=True, timeout=30, check=True)
    return done.stdout


def conf_lines(**words: str) -> list[str]:
    return bash('slurm_conf "$@"', *(f"{k}={v}" for k, v in words.items())).splitlines()


def test_single_node_conf_has_its_ports_and_one_slurmd():
    lines = conf_lines(writer="scripts/slurm_local.sh", about="one node.", cluster="bench", controller="vm",
                       ports="6917 6918", dir="/d", socket="/d/munge.socket",
                       nodes="NodeName=vm CPUs=2 State=UNKNOWN", partition="bench vm")
    assert lines[0] == "# Written by scripts/slurm_local.sh: one node."
    assert lines[1:5] == ["ClusterName=bench", "SlurmctldHost=vm", "SlurmctldPort=6917", "SlurmdPort=6918"]
    assert "SlurmdPidFile=/d/slurmd.pid" in lines and "SlurmdLogFile=/d/log/slurmd.log" in lines
    assert "AuthInfo=socket=/d/munge.socket" in lines
    assert not [line for line in lines if line.startswith("TmpFS=")]
    assert lines[-2:] == ["NodeName=vm CPUs=2 State=UNKNOWN",
                          "PartitionName=bench Nodes=vm Default=YES MaxTime=INFINITE State=UP"]


def test_multi_node_conf_has_a_slurmd_per_node_and_a_tmp_per_node():
    nodes = "NodeName=node1 NodeAddr=198.18.0.11 State=UNKNOWN\nNodeName=node2 NodeAddr=198.18.0.12 State=UNKNOWN"
    lines = conf_lines(writer="scripts/slurm_cluster.sh", about="two nodes.", cluster="benchnodes",
                       controller="node1(198.18.0.11)", dir="/c", socket="/c/munge.socket", slurmd="slurmd-%n",
                       tmpfs="/c/tmp/%n", nodes=nodes, partition="bench node[1-2]")
    assert lines[1:3] == ["ClusterName=benchnodes", "SlurmctldHost=node1(198.18.0.11)"]
    assert not [line for line in lines if line.startswith(("SlurmctldPort=", "SlurmdPort="))]
    assert "SlurmdPidFile=/c/slurmd-%n.pid" in lines and "TmpFS=/c/tmp/%n" in lines
    assert lines[-3:] == [*nodes.splitlines(),
                          "PartitionName=bench Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP"]


def test_update_writes_only_a_changed_text(tmp_path):
    conf = tmp_path / "slurm.conf"
    run = 'if slurm_conf_update "$1" "$2"; then echo wrote; else echo same; fi'
    assert bash(run, str(conf), "A=1\nB=2") == "wrote\n"
    assert conf.read_text() == "A=1\nB=2\n"
    assert bash(run, str(conf), "A=1\nB=2") == "same\n"
    assert bash(run, str(conf), "A=1\nB=3") == "wrote\n"
    assert conf.read_text() == "A=1\nB=3\n"


@pytest.mark.skipif(not shutil.which("slurmd"), reason="slurmd is not installed (Debian: slurm-wlm)")
def test_node_resources_share_ninety_percent_of_this_machines_memory():
    seen = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    memory = int(seen.split("RealMemory=")[1].split()[0])
    one, three = bash("slurm_node_resources 1"), bash("slurm_node_resources 3")
    assert not one.startswith("NodeName=") and "CPUs=" in one
    assert f"RealMemory={memory * 9 // 10}" in one.split()
    assert f"RealMemory={memory * 9 // 10 // 3}" in three.split()
