"""A test session stopped by SIGTERM (a CI time limit) still tears its emulated cluster down: no network namespace
outlives it (tests/conftest.py turns SIGTERM into Ctrl-C, whose finalizers run)."""
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
