"""A cell's processes on one machine: the token that marks every one of them, finding and ending them all (a tree,
its process group, and whatever carries the token), and the pump that copies their output into a redacted log."""
from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import psutil

from bench.core.redact import redact_text

TOKEN_VAR = "BENCH_CELL_TOKEN"  # marks every process of a cell, so none can outlive it unnoticed


def kill_family(pid: int | None, token: str) -> int:
    """SIGTERM, then SIGKILL, to a launcher's tree and process group and to every process carrying `token`."""
    procs = family(pid, token)
    terminate(procs, group=pid)
    return len(procs)


def terminate(procs: list[psutil.Process], group: int | None = None) -> None:
    """SIGTERM, then (for what is still there after 5 s) SIGKILL, to each process and to the process group `group`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in procs:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
        if group is not None:
            try:
                os.killpg(group, sig)
            except (ProcessLookupError, PermissionError):
                pass
        _, procs = psutil.wait_procs(procs, timeout=5)
        if not procs:
            break


def family(pid: int | None, token: str) -> list[psutil.Process]:
    """The process `pid` and its descendants, and every other process (but this one) carrying `token`."""
    found: dict[int, psutil.Process] = {}
    try:
        if pid is not None:
            root = psutil.Process(pid)
            for p in [root, *root.children(recursive=True)]:
                found[p.pid] = p
    except psutil.Error:
        pass
    me = os.getpid()
    for p in psutil.process_iter():
        if p.pid in found or p.pid == me:
            continue
        try:
            if p.environ().get(TOKEN_VAR) == token:
                found[p.pid] = p
        except psutil.Error:
            continue
    return list(found.values())


class LogPump(threading.Thread):
    """Copies a job's combined output into log.txt line by line, redacted. A full disk stops the writing, not
    the draining (a launcher blocked on a full pipe would hang the cell)."""

    MAX_LINE = 1 << 20

    def __init__(self, pipe, path: Path):
        super().__init__(daemon=True, name=f"log-pump {path}")
        self.pipe = pipe
        self.file = open(path, "wb")
        self.error: OSError | None = None

    def run(self) -> None:
        pending = b""
        fd = self.pipe.fileno()
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                pending += chunk
                cut = pending.rfind(b"\n") + 1
                if not cut and len(pending) > self.MAX_LINE:
                    cut = len(pending)
                if cut:
                    self._write(pending[:cut])
                    pending = pending[cut:]
            if pending:
                self._write(pending)
        finally:
            self.pipe.close()
            try:
                self.file.close()
            except OSError as e:
                self.error = self.error or e

    def _write(self, data: bytes) -> None:
        if self.error is not None:
            return
        text = redact_text(data.decode("utf-8", errors="surrogateescape"))
        try:
            self.file.write(text.encode("utf-8", errors="surrogateescape"))
            self.file.flush()
        except OSError as e:
            self.error = e
