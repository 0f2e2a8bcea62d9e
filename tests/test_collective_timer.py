"""The layout worker's collective timer (models/workloads/transformer/collective_timer.py) charges FSDP2's gathers and
reduce-scatters to the dp_shard dimension: two real Gloo ranks take an FSDP2 step under it (tests/workers/
fsdp_collective_timer.py). Before torch 2.13's FSDP2 called all_gather_single and reduce_scatter_single, which the
timer did not wrap, the FSDP and HSDP cells' dp_shard time read nothing."""
import json
import socket
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.launcher  # two spawned Gloo ranks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fsdp2s_collectives_are_charged_to_dp_shard():
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "workers" / "fsdp_collective_timer.py"),
                           str(free_port())], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = json.loads(done.stdout.strip().splitlines()[-1])
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert set(r["seconds"]) == {"dp_shard"} and r["seconds"]["dp_shard"] > 0, r
