"""`make test-fast` (pytest --fast) leaves out every slow tier setup.cfg registers, read from setup.cfg itself, so the
marker list and the fast selection cannot drift apart."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, slow_marks


def _collected(*args: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout


def test_every_registered_slow_mark_is_left_out_of_the_fast_tier():
    marks = slow_marks()
    assert {"e2e", "launcher", "workload", "cluster", "diagnose"} <= set(marks), marks  # it really read setup.cfg
    any_slow = " or ".join(marks)
    rc, out = _collected("-m", any_slow)
    assert rc == 0 and " selected" in out.splitlines()[-1], out[-500:]  # the slow tiers hold tests ...
    rc, out = _collected("--fast", "-m", any_slow)
    assert rc == 5, f"--fast still selects tests of a slow tier:\n{out[-2000:]}"  # ... and --fast leaves all out
