"""A test session, or a program holding an emulated cluster (benchmarks/*_shaped.py), stopped by SIGTERM (a CI time
limit, `timeout`) still tears its cluster down: no network namespace outlives it (tests/conftest.py, and
tests/cluster.start for any program, turn SIGTERM into Ctrl-C, whose `finally` blocks and finalizers run)."""
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.cluster


def namespaces(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


def test_a_session_stopped_by_sigterm_tears_its_cluster_down():
    from tests import cluster as emulated

    reason = emulated.unavailable()
    if reason:
        pytest.skip(f"EMULATED CLUSTER NOT AVAILABLE, multi-node tests NOT RUN: {reason}")
    held = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                             str(ROOT / "tests" / "workers" / "cluster_held.py")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    prefix = f"bt{held.pid}-"
    try:
        deadline = time.monotonic() + 120
        while not namespaces(prefix) and time.monotonic() < deadline and held.poll() is None:
            time.sleep(0.5)
        assert namespaces(prefix), f"the held session's cluster never came up: {held.poll()}"
        time.sleep(1)
        held.send_signal(signal.SIGTERM)
        out, _ = held.communicate(timeout=120)
        assert namespaces(prefix) == [], out[-2000:]
    finally:
        if held.poll() is None:
            held.kill()
            held.wait()
        emulated.reap_stale()  # whatever the held session left, even when this test fails


# What benchmarks/prediction_shaped.py and the other shaped-link benchmarks do: start a cluster, work in a `try`,
# `cluster.down()` in its `finally`. Stopped by SIGTERM before this fix, it left its namespaces behind.
HOLDER = """
import sys, time
sys.path.insert(0, {root!r})
from tests import cluster as emulated
c = emulated.start(2, state=__import__("pathlib").Path({state!r}), prefix={prefix!r})
try:
    print("up", flush=True)
    time.sleep(300)
finally:
    c.down()
"""


def test_a_program_holding_a_cluster_stopped_by_sigterm_tears_it_down(tmp_path):
    from tests import cluster as emulated

    reason = emulated.unavailable()
    if reason:
        pytest.skip(f"EMULATED CLUSTER NOT AVAILABLE, multi-node tests NOT RUN: {reason}")
    prefix = f"bh{__import__('os').getpid()}"
    script = HOLDER.format(root=str(ROOT), state=str(tmp_path / "state"), prefix=prefix)
    held = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        # Lines before "up" are tests/cluster.start saying a first bring-up failed and it tried once more.
        seen = [held.stdout.readline()]
        while seen[-1] and seen[-1].strip() != "up":  # "" is the end of its output
            seen.append(held.stdout.readline())
        assert seen[-1].strip() == "up", "".join(seen)[-2000:] + held.communicate(timeout=60)[0][-2000:]
        assert namespaces(prefix + "-")
        held.send_signal(signal.SIGTERM)
        out, _ = held.communicate(timeout=120)
        assert namespaces(prefix + "-") == [], out[-2000:]
    finally:
        if held.poll() is None:
            held.kill()
            held.wait()
        subprocess.run([str(ROOT / "scripts" / "testcluster.sh"), "down", "--prefix", prefix],
                       env={**__import__("os").environ, "BENCH_CLUSTER_DIR": str(tmp_path / "state")},
                       capture_output=True, timeout=120)

