"""A cell's launcher run as a job on this machine (the local and hosts backends): started in a session of its own
under a watchdog, its output pumped into a redacted log.txt, stopped at its deadline, and collected into a JobEnd."""
from __future__ import annotations

import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bench.backends.shared.guard import start_reaper, stop_reaper
from bench.backends.shared.outcome import JobEnd
from bench.backends.shared.process import TOKEN_VAR, LogPump, kill_family
from bench.backends.shared.records import read_end, read_records, tail_of
from bench.launch import Rendered
from bench.planning.cell import PlannedCell


@dataclass
class Handle:
    planned: PlannedCell
    rendered: Rendered
    proc: subprocess.Popen
    cell_dir: Path
    token: str
    started: float
    deadline: float
    log_file: Any  # the LogPump writing the job's redacted log
    reaper: subprocess.Popen | None = None
    stopped: str | None = None  # timeout | interrupted (| lost, on the hosts backend)


def start(planned: PlannedCell, rendered: Rendered, cell_dir: Path, timeout_s: float, path_dirs=(),
          token: str | None = None, reap_then: tuple[str, ...] = (),
          extra_env: dict[str, str] | None = None) -> Handle:
    """Starts the launcher in a session of its own, its output redacted into cell_dir/log.txt, with a watchdog.
    `path_dirs` go first on PATH (the cell's runtime: Hydra's proxies and horovodrun find their helpers there);
    `reap_then` is what the watchdog runs after its own kill if this controller dies (a sweep of other hosts);
    `extra_env`: asked of this launch only, never recorded as the cell's launch environment (the engine probe run
    first, bench/backends/local/engine_probe.py)."""
    cell_dir.mkdir(parents=True, exist_ok=True)
    (cell_dir / "records.jsonl").unlink(missing_ok=True)
    token = token or uuid.uuid4().hex
    env = {**os.environ, **rendered.env, **(extra_env or {}), TOKEN_VAR: token}
    env["PATH"] = os.pathsep.join((*path_dirs, env.get("PATH", "")))
    now = time.monotonic()
    # The launcher's output goes through a pipe into a redacting writer: a secret a worker prints never reaches the
    # disk (log.txt is what bench keeps). And if this controller dies, the launcher loses its reader: a worker that
    # writes again gets EPIPE.
    proc = subprocess.Popen(rendered.argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    pump = LogPump(proc.stdout, cell_dir / "log.txt")
    pump.start()
    return Handle(planned, rendered, proc, cell_dir, token, now, now + timeout_s, pump,
                  start_reaper(proc.pid, token, reap_then))


def poll(handle: Handle, kill: Callable[[Handle], None]) -> bool:
    """True once the launcher has exited, or was killed here for passing its deadline."""
    if handle.proc.poll() is not None:
        return True
    if time.monotonic() > handle.deadline:
        handle.stopped = "timeout"
        kill(handle)
        return True
    return False


def kill(handle: Handle) -> None:
    """End the whole cell on this machine: the launcher's tree, its process group, and anything carrying the cell's
    token (horovodrun starts workers in sessions of their own, out of reach of a process-group kill)."""
    kill_family(handle.proc.pid, handle.token)
    try:
        handle.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def finish(handle: Handle, kill: Callable[[Handle], None]) -> JobEnd:
    """Waits for the launcher, reaps what it left, stops the watchdog; what the job left behind."""
    rc = handle.proc.wait()
    kill(handle)  # reap anything the launcher left behind, even after a clean exit
    handle.log_file.join(timeout=10)  # every writer of the pipe is gone: the pump reaches EOF
    stop_reaper(handle.reaper)
    records, bad = read_records(handle.cell_dir / "records.jsonl")
    log = read_end(handle.cell_dir / "log.txt")
    return JobEnd(records, bad, log, tail_of(log), rc, stopped=handle.stopped)
