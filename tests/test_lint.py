"""`make lint`, the first step of `make test`: ruff and isort with the project's settings. Here they are shown to
catch what they are there for (an unused import, a line over 120 columns, imports out of order or wrapped in
another style) in a file of their own, so a settings change that turns a check off fails this test."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLEAN = '''"""A module in the project's style."""
import os
from pathlib import Path

from bench.analysis.probe import (PROBE_VERSION, ProbeResult, compute_key, fresh, from_entry, key_text, stale_reason,
                                  summarize, to_entry)

USED = (os, Path, PROBE_VERSION, ProbeResult, compute_key, fresh, from_entry, key_text, stale_reason, summarize,
        to_entry)
'''
BROKEN = {
    "an unused import": CLEAN.replace("import os\n", "import os\nimport json\n"),
    "a line over 120 columns": CLEAN + f"LONG = {'x' * 120!r}\n",
    "imports out of order": CLEAN.replace("import os\nfrom pathlib import Path\n",
                                          "from pathlib import Path\nimport os\n"),
    "a wrap in another style": CLEAN.replace(
        "(PROBE_VERSION, ProbeResult, compute_key, fresh, from_entry, key_text, stale_reason,\n"
        "                                  summarize, to_entry)",
        "(\n    PROBE_VERSION,\n    ProbeResult,\n    compute_key,\n    fresh,\n    from_entry,\n    key_text,\n"
        "    stale_reason,\n    summarize,\n    to_entry,\n)"),
}


def _lint(folder: Path) -> subprocess.CompletedProcess:
    """What `make lint` runs, with the repository's settings, over one folder."""
    ruff = subprocess.run([sys.executable, "-m", "ruff", "check", "--quiet", "--config", str(ROOT / "pyproject.toml"),
                           str(folder)], capture_output=True, text=True, cwd=ROOT)
    isort = subprocess.run([sys.executable, "-m", "isort", "--check-only", "--quiet", "--settings-path", str(ROOT),
                            str(folder)], capture_output=True, text=True, cwd=ROOT)
    return subprocess.CompletedProcess([], ruff.returncode or isort.returncode, ruff.stdout + isort.stdout,
                                       ruff.stderr + isort.stderr)


def test_a_module_in_the_projects_style_passes(tmp_path):
    (tmp_path / "clean.py").write_text(CLEAN)
    done = _lint(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("fault", sorted(BROKEN))
def test_lint_catches(tmp_path, fault):
    (tmp_path / "broken.py").write_text(BROKEN[fault])
    done = _lint(tmp_path)
    assert done.returncode != 0, f"{fault} passed lint: {done.stdout}{done.stderr}"


def test_make_test_lints_first():
    make = shutil.which("make")
    assert make, "make is what runs the suite"
    dry = subprocess.run([make, "-n", "test"], capture_output=True, text=True, cwd=ROOT).stdout
    lines = [line for line in dry.splitlines() if "-m ruff" in line or "-m isort" in line or "-m pytest" in line]
    assert [("ruff" in line, "isort" in line, "pytest" in line) for line in lines] == [
        (True, False, False), (False, True, False), (False, False, True), (False, False, True)], dry
    # the suite's two phases (the Makefile): together every test but the diagnose proofs, each once
    assert '-m "not diagnose and not alone" -n' in lines[2] and '-m "alone and not diagnose"' in lines[3], dry
