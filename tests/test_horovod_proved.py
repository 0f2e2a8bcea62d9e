"""scripts/build_horovod.sh remembers what its probe proved: a second set-up with nothing changed skips importing
torch, TensorFlow and Horovod (seconds saved on every `make test`), and anything the probe rests on that changes
makes it probe again."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "build_horovod.sh"
MAIN_PY = ROOT / ".venv" / "bin" / "python"

pytestmark = pytest.mark.slow


def _setup(**extra: str) -> str:
    env = {**os.environ, "PYTHON": str(MAIN_PY), "BENCH_MPI": "openmpi", **extra}
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


def test_a_second_set_up_trusts_the_stamp_and_a_change_probes_again():
    _setup()  # whatever the stamp held, it holds this venv's proof now
    assert "already importable (as last proved)" in _setup()
    # The run-time library path is part of what was proved (the MPI the extension loads): another one probes again,
    # and so does the next set-up under the first one.
    other = _setup(LD_LIBRARY_PATH="/nonexistent-bench-test")
    assert "already importable\n" in other and "as last proved" not in other
    again = _setup()
    assert "already importable\n" in again and "as last proved" not in again
    assert "as last proved" in _setup()
