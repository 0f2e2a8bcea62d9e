"""The compute probe's copies meet at each window's barrier (models/measure/copies.py): real processes, one of them
started late, still open their windows together; a copy that never comes costs the others one wait, not one a
window."""
import json
import os
import subprocess
import sys
import time

from models.measure.copies import COPIES_DIR_VAR, COPIES_VAR, CopiesBarrier, barrier_from_env

COPY = """
import json, sys, time
from models.measure.common import single_process_comm
comm = single_process_comm()
time.sleep(float(sys.argv[1]))  # a slow start-up (imports on a busy machine)
seen = []
for _ in range(3):
    comm.barrier()
    seen.append(time.time())
print(json.dumps(seen))
"""


def _copy(delay: float, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", COPY, str(delay)], env={**os.environ, **env},
                            stdout=subprocess.PIPE, text=True)


def test_a_late_copy_is_waited_for_at_every_barrier(tmp_path):
    env = {COPIES_DIR_VAR: str(tmp_path / "copies"), COPIES_VAR: "2"}
    early, late = _copy(0.0, env), _copy(2.0, env)
    a, b = (json.loads(p.communicate(timeout=120)[0]) for p in (early, late))
    assert len(a) == len(b) == 3
    assert all(abs(x - y) < 0.5 for x, y in zip(a, b)), (a, b)  # without the barrier the first pair is 2 s apart


def test_alone_it_does_not_wait(tmp_path, monkeypatch):
    monkeypatch.delenv(COPIES_DIR_VAR, raising=False)
    assert barrier_from_env() is None
    monkeypatch.setenv(COPIES_DIR_VAR, str(tmp_path))
    monkeypatch.setenv(COPIES_VAR, "1")
    assert barrier_from_env() is None
    monkeypatch.setenv(COPIES_VAR, "2")
    assert isinstance(barrier_from_env(), CopiesBarrier)


def test_a_copy_that_never_comes_costs_one_wait(tmp_path):
    barrier = CopiesBarrier(tmp_path, copies=2, wait_s=0.5)
    started = time.monotonic()
    for _ in range(5):
        barrier()
    assert 0.5 <= time.monotonic() - started < 1.5 and barrier.given_up
