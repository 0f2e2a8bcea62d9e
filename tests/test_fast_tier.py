"""`make test-fast` (pytest --fast) leaves out every slow tier setup.cfg registers, read from setup.cfg itself, so the
marker list and the fast selection cannot drift apart: a test file with one test per registered mark, collected
with the suite's own conftest and ini, keeps only its unmarked test under --fast."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, slow_marks


def _collected(test_file, *args: str) -> tuple[int, list[str]]:
    """(exit code, the test ids collected) of `pytest --collect-only` over one file with the suite's conftest."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "setup.cfg"), "--rootdir", str(ROOT),
                           "-p", "tests.conftest", "-p", "no:cacheprovider", "--collect-only", "-q", *args,
                           str(test_file)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    return done.returncode, [line.split("::")[-1] for line in done.stdout.splitlines() if "::" in line]


def test_every_registered_slow_mark_is_left_out_of_the_fast_tier(tmp_path):
    marks = slow_marks()
    assert {"e2e", "launcher", "workload", "cluster", "diagnose"} <= set(marks), marks  # it really read setup.cfg
    body = ["import pytest", "", "def test_unmarked():", "    pass", ""]
    for mark in marks:
        body += [f"@pytest.mark.{mark}", f"def test_marked_{mark}():", "    pass", ""]
    test_file = tmp_path / "test_tiers.py"
    test_file.write_text("\n".join(body), encoding="utf-8")
    rc, every = _collected(test_file)
    assert rc == 0 and len(every) == len(marks) + 1, every  # without --fast: every test
    rc, fast = _collected(test_file, "--fast")
    assert rc == 0 and fast == ["test_unmarked"], f"--fast keeps tests of a slow tier: {fast}"
