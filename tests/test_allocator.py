"""Held freed memory: a process that allocates and frees large blocks stops page-faulting them in every time."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Allocates, fills and frees a 64 MiB block 10 times, like a training step's activations; prints the page faults
# of the last 9 rounds (the first round faults either way: the heap has to grow once).
CHILD = """
import resource, sys
sys.path.insert(0, {root!r})
from models.measure.allocator import hold_freed_memory
print(hold_freed_memory({enabled}))
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(10):
    if i == 1:
        start = faults()
    block = b"\\x01" * (64 << 20)
    del block
print(faults() - start)
"""


def faults_with(enabled: bool) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), enabled=enabled)],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt is Linux-only")
def test_held_memory_is_not_faulted_in_again():
    state, held = faults_with(True)
    default_state, default = faults_with(False)
    assert state.startswith("glibc mallopt") and default_state.startswith("default")
    pages = 9 * (64 << 20) // 4096
    assert default > 0.8 * pages  # glibc mmaps and unmaps each block: every page faults every round
    assert held < 0.05 * pages
