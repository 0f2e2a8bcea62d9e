"""A barrier between independent copies of one worker program: the compute probe's N plain processes
(bench/backends/local/compute_probe.py) share no communication library, yet their windows must lie at the same time
for the probe to measure N processes computing at once. Without it a copy that took seconds longer to import (a busy
machine) runs its few short windows after the others have finished, and the probe measures nothing shared.

The probe names a folder and the number of copies in the environment (COPIES_DIR_VAR, COPIES_VAR). The k-th barrier
of each copy writes `b<k>.<pid>` there and waits until every copy's file for k is in; the copies call it equally
often (the same program with the same arguments: every window opens and closes with one). Bounded: a copy that never
arrives (it failed) costs the others WAIT_S once, and then they stop waiting; the probe sees the failed copy."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

COPIES_DIR_VAR = "BENCH_COPIES_DIR"
COPIES_VAR = "BENCH_COPIES"
WAIT_S = 60.0
POLL_S = 0.005


def barrier_from_env() -> Callable[[], None] | None:
    """The barrier between this process and its copies; None when it runs alone (no folder named, or one copy)."""
    folder, copies = os.environ.get(COPIES_DIR_VAR), os.environ.get(COPIES_VAR, "")
    if not folder or not copies.isdigit() or int(copies) < 2:
        return None
    return CopiesBarrier(Path(folder), int(copies))


class CopiesBarrier:
    def __init__(self, folder: Path, copies: int, wait_s: float = WAIT_S):
        self.folder, self.copies, self.wait_s = folder, copies, wait_s
        self.calls = 0
        self.given_up = False

    def __call__(self) -> None:
        k, self.calls = self.calls, self.calls + 1
        if self.given_up:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"b{k}.{os.getpid()}").touch()
        deadline = time.monotonic() + self.wait_s
        while len(list(self.folder.glob(f"b{k}.*"))) < self.copies:
            if time.monotonic() > deadline:
                self.given_up = True  # a copy is gone: the probe reports it; waiting again would only cost time
                return
            time.sleep(POLL_S)
