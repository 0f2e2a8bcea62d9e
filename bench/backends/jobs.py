"""What every backend that starts a launcher process itself (local, hosts) or reads a job directory (Slurm, Azure ML)
shares: the worker's argv, the launcher process and its group, the redacted log, the watchdog that outlives a dead
controller, reading records back, and turning what a job left behind into an Outcome."""
from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import psutil

import models
from bench.backends.base import Outcome
from bench.cell import PlannedCell
from bench.launch import Rendered
from bench.redact import redact_text
from models.registry import COLLECTIVES, WORKLOADS

MODELS_DIR = Path(models.__file__).resolve().parent
TOKEN_VAR = "BENCH_CELL_TOKEN"  # marks every process of a cell, so none can outlive it unnoticed
LOG_TAIL_LINES = 40


def worker_program(planned: PlannedCell, run_id: str, out: Path, threads: int,
                   python: str = sys.executable, data_dir: Path | None = None) -> tuple[str, ...]:
    """The workload's argv: every cell setting becomes an explicit flag, so the command alone reproduces the cell."""
    c = planned.cell
    script = MODELS_DIR / worker_script(c)
    engine = ("--engine", "native") if c["engine"] == "native" else ()
    if c["model"] in COLLECTIVES:
        sweep = ("--max-bytes", str(c["max_message_bytes"])) if c.get("max_message_bytes") else ()
        return (python, str(script), "--op", c["model"], *engine, *sweep, "--warmup-steps", str(c["warmup_steps"]),
                "--steps", str(c["steps"]), "--repeats", str(c["repeats"]), "--threads", str(threads),
                "--cell-id", planned.cell_id, "--run-id", run_id, "--out", str(out))
    data = ("--data", "imagenet", "--data-dir", str(data_dir), "--data-layout", c["data_layout"],
            "--loader-workers", str(c["loader_workers"])) if c["data"] == "imagenet" else ()
    return (python, str(script), *engine, *data,
            "--batch-size", str(c["batch_per_gpu"]), "--image-size", str(c["image_size"]),
            "--warmup-steps", str(c["warmup_steps"]), "--steps", str(c["steps"]), "--repeats", str(c["repeats"]),
            "--precision", c["precision"], "--channels-last" if c["channels_last"] else "--no-channels-last",
            "--threads", str(threads), "--cell-id", planned.cell_id, "--run-id", run_id, "--out", str(out))


def worker_script(cell: dict[str, Any]) -> str:
    """The program under models/ that measures the cell: a collective sweep, or the framework's ResNet-50."""
    spec = COLLECTIVES.get(cell["model"]) or WORKLOADS[cell["framework"]]
    return spec["script"]


def tool_path(tool: str, python: str) -> str:
    venv_tool = Path(python).parent / tool
    return str(venv_tool) if venv_tool.exists() else (shutil.which(tool) or tool)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the launcher process ----------------------------------------------------------------------------------------
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
    stopped: str | None = None  # timeout | interrupted


def start(planned: PlannedCell, rendered: Rendered, cell_dir: Path, timeout_s: float, path_dirs=(),
          token: str | None = None, reap_then: tuple[str, ...] = ()) -> Handle:
    """Starts the launcher in a session of its own, its output redacted into cell_dir/log.txt, with a watchdog.
    `path_dirs` go first on PATH (the cell's runtime: Hydra's proxies and horovodrun find their helpers there);
    `reap_then` is what the watchdog runs after its own kill if this controller dies (a sweep of other hosts)."""
    cell_dir.mkdir(parents=True, exist_ok=True)
    (cell_dir / "records.jsonl").unlink(missing_ok=True)
    token = token or uuid.uuid4().hex
    env = {**os.environ, **rendered.env, TOKEN_VAR: token}
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


def finish(handle: Handle, kill: Callable[[Handle], None]) -> tuple[int, list[dict], str | None, str, str]:
    """Waits for the launcher, reaps what it left, stops the watchdog; (rc, records, bad-record reason, log, tail)."""
    rc = handle.proc.wait()
    kill(handle)  # reap anything the launcher left behind, even after a clean exit
    handle.log_file.join(timeout=10)  # every writer of the pipe is gone: the pump reaches EOF
    if handle.reaper is not None:
        handle.reaper.terminate()  # the job ended under this controller's eyes: no watch needed
        try:
            handle.reaper.wait(timeout=5)
        except subprocess.TimeoutExpired:
            handle.reaper.kill()
    records, bad = read_records(handle.cell_dir / "records.jsonl")
    log = read_end(handle.cell_dir / "log.txt")
    return rc, records, bad, log, tail_of(log)


def judge(records: list[dict], bad: str | None, repeats: int, tail: str | None = None,
          rc: int | None = None) -> Outcome:
    """A job that ended cleanly: ok only with exactly the records it was asked for, all of them readable."""
    if bad:
        return Outcome("failed", records, bad, tail, rc)
    if len(records) != repeats:
        return Outcome("failed", records, f"expected {repeats} records, got {len(records)}", tail, rc)
    return Outcome("ok", records, None, tail, rc)


def kill_family(pid: int | None, token: str) -> int:
    """SIGTERM, then SIGKILL, to a launcher's tree and process group and to every process carrying `token`."""
    procs = _family(pid, token)
    found = len(procs)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in procs:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
        if pid is not None:
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        _, procs = psutil.wait_procs(procs, timeout=5)
        if not procs:
            break
    return found


def _family(pid: int | None, token: str) -> list[psutil.Process]:
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


# The watchdog's extra argv: `python -m bench.backends.jobs --reap <controller> <launcher> <token> [cmd...]`; the
# optional command runs after the local kill (the hosts backend passes its remote sweep).
def start_reaper(launcher_pid: int, token: str, then: tuple[str, ...] = ()) -> subprocess.Popen | None:
    """A small watchdog in a session of its own: if this controller dies (even SIGKILL, which nothing can catch),
    it kills the job's launcher group and every process carrying the cell token, then exits. The controller
    stops it when it collects the job."""
    env = {k: v for k, v in os.environ.items() if k != TOKEN_VAR}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(MODELS_DIR.parent), env.get("PYTHONPATH"))))
    try:
        return subprocess.Popen([sys.executable, "-m", "bench.backends.jobs", "--reap", str(os.getpid()),
                                 str(launcher_pid), token, *then], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None


def _reap_when_orphaned(controller_pid: int, launcher_pid: int, token: str, then: list[str]) -> None:
    try:
        controller = psutil.Process(controller_pid)
        born = controller.create_time()
    except psutil.Error:
        born = None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while born is not None:
        try:
            if controller.create_time() != born or controller.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.Error:
            break
        time.sleep(0.5)
    kill_family(launcher_pid, token)
    if then:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the remote sweep is the last thing left to do: finish it
        subprocess.run(then, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120, check=False)


# --- what a job left behind --------------------------------------------------------------------------------------
def read_records(path: Path) -> tuple[list[dict], str | None]:
    if not path.exists():
        return [], None
    records = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            return records, f"record line {n} is not valid JSON ({e.msg}); the file may be truncated"
    return records, None


def read_end(path: Path, limit: int = 256 * 1024) -> str:
    """The last `limit` bytes of a log: enough to find the error, bounded however much a job printed."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - limit))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def tail_of(log: str) -> str:
    return "\n".join(log.splitlines()[-LOG_TAIL_LINES:])


# Most telling first: the worker's own words, then a Python exception or an MPI error report, then launcher-level
# complaints. horovodrun prefixes worker lines with "[rank]<stderr>:", hence the leading `.*?`. Consequences are
# not causes: "Horovod has been shut down" is what the healthy ranks say after another rank died.
_ERROR_LINES = (
    re.compile(r"^.*?(bench worker: (?!repeat \d+: [\d.]+ img/s)(?!rank \d+ skipped).*)$"),  # not its progress lines
    re.compile(r"^(?:\[\d+\]<std(?:err|out)>:)?\s*((?!RuntimeError: Horovod detected that)(?!.*Horovod has been shut down)"
               r"\w+(?:\.\w+)*(?:Error|Exception|Interrupt)\b.*|.*\*\*\* An error occurred in \S+.*)$"),
    re.compile(r"^(.*Killed.*|.*exited on signal.*|.*signal \d+.*|.*ORTE_ERROR_LOG: .*|.*MPI_ABORT.*)$"),
    re.compile(r"^(.*exited with non-zero status.*)$"),  # the launcher's summary: only when nothing says more
)


def last_error(log: str) -> str | None:
    lines = log.splitlines()
    for pattern in _ERROR_LINES:
        for line in reversed(lines):
            m = pattern.match(line)
            if m:
                return m.group(1).strip()[:300]
    return None


# Where a launcher says a process of the job died (the first one it noticed), by host or by rank:
# Open MPI: "mpirun noticed that process rank 1 with PID 761 on node node2 exited on signal 9 (Killed)."
# Hydra (MPICH, Intel MPI): "=   RANK 1 PID 1700 RUNNING AT node2" / "=   PID 1466 RUNNING AT node2", then
#   "=   KILLED BY SIGNAL: 9 (Killed)" or "=   EXIT CODE: 9"
# horovodrun, Open MPI's exit-status report: "Process name: 1" (or "[[29473,1],1]") then "Exit code: 255"
_DIED_ON_HOST = re.compile(r"process rank (\d+) with PID \d+ on node (\S+) (exited on signal \d+(?: \([^)]*\))?|"
                           r"exited[^.]*)")
_HYDRA_AT = re.compile(r"^=\s+(?:RANK (\d+) )?PID \d+ RUNNING AT (\S+)")
_HYDRA_HOW = re.compile(r"^=\s+(KILLED BY SIGNAL: .*?|EXIT CODE: \d+)\s*$")
_PROCESS_NAME = re.compile(r"^\s*Process name:\s*(?:\[\[\d+,\d+\],(\d+)\]|(\d+))\s*$")
_EXIT_CODE = re.compile(r"^\s*Exit code:\s*(-?\d+)")


def failed_node(log: str, hosts: tuple[str, ...], per_node: int) -> tuple[str, str] | None:
    """(host, what happened) for the first process the launcher reported dead, from its own lines; a rank without
    a host is placed by the launchers' block mapping (ranks per_node*i .. per_node*(i+1)-1 on hosts[i])."""
    lines = log.splitlines()
    for line in lines:
        if m := _DIED_ON_HOST.search(line):
            return m.group(2), f"rank {m.group(1)} {m.group(3).rstrip('. ')}"
    for i, line in enumerate(lines):
        if m := _HYDRA_AT.match(line):
            how = next((h.group(1) for h in map(_HYDRA_HOW.match, lines[i + 1:i + 3]) if h), "")
            how = (f"killed by signal {how.split(':', 1)[1].strip()}" if how.startswith("KILLED") else
                   f"exited with code {how.split(':', 1)[1].strip()}" if how else "terminated badly")
            return m.group(2), f"{f'rank {m.group(1)}' if m.group(1) else 'a process'} {how}"
    for i, line in enumerate(lines):
        if m := _PROCESS_NAME.match(line):
            rank = int(m.group(1) or m.group(2))
            code = next((c.group(1) for c in map(_EXIT_CODE.match, lines[i + 1:i + 3]) if c), "?")
            if per_node > 0 and rank // per_node < len(hosts):
                return hosts[rank // per_node], f"rank {rank} exited with code {code}"
    return None


# --- the leash: bench's hold on a cell's processes on another host ------------------------------------------------
LEASH_BEAT_S = 1.0  # the controller's heartbeat down each leash's ssh
LEASH_GRACE_S = 15.0  # a leash that hears nothing this long takes the controller (or the link) for gone


def leash(token: str, grace_s: float) -> str:
    """Runs on another host for as long as a cell runs there, started over ssh; each byte on stdin is the
    controller's heartbeat. On end of input (the cell ended, or the ssh session died) or `grace_s` without a beat
    (the link or the controller is gone: nothing else on this host would notice), it kills everything here carrying
    the token, and the processes between them and sshd that the launcher started (Open MPI's orted, Hydra's proxy,
    a remote shell): those carry no token, yet would wait on a dead link for minutes."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the session's end is read as end of input, then swept
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    fd = sys.stdin.fileno()
    between: dict[int, psutil.Process] = {}
    why = "end of input"
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], grace_s)
            if not ready:
                why = f"no heartbeat for {grace_s:g} s"
                break
            if not os.read(fd, 4096):
                break
            for p in _family(None, token):
                for parent in _launcher_chain(p):
                    between.setdefault(parent.pid, parent)
    except KeyboardInterrupt:
        why = "terminated"
    killed = kill_family(None, token)
    alive = []
    for p in between.values():
        try:
            if p.is_running():  # same process (psutil compares the start time), not a reused pid
                alive.append(p)
        except psutil.Error:
            pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in alive:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(alive, timeout=5)
        if not alive:
            break
    return f"leash on {socket.gethostname()}: {why}; {killed} process(es) of the cell killed"


def _launcher_chain(p: psutil.Process) -> list[psutil.Process]:
    """p's ancestors below the ssh session (sshd) that started them; none if p was not started through sshd."""
    chain = []
    try:
        for parent in p.parents():
            if parent.name().startswith("sshd"):
                return chain
            chain.append(parent)
    except psutil.Error:
        pass
    return []


if __name__ == "__main__" and sys.argv[1:2] == ["--reap"]:
    _reap_when_orphaned(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:])
elif __name__ == "__main__" and sys.argv[1:2] == ["--sweep"]:
    # Run on another host over ssh: end whatever carries the cell token there.
    print(kill_family(None, sys.argv[2]))
elif __name__ == "__main__" and sys.argv[1:2] == ["--leash"]:
    print(f"leash up on {socket.gethostname()}", flush=True)
    said = leash(sys.argv[2], float(sys.argv[3]))
    try:
        print(said, flush=True)
    except OSError:
        pass  # the session is gone: nobody to tell


# --- the ImageNet data set a machine offers (the same rule for every backend that runs workers on its own hosts) ---
def imagenet_reach_reason(cell: dict, imagenet_dir: Path | None, sample: Any) -> str | None:
    """Why a real-data cell cannot run where the data set is configured (None if it can, or the cell is synthetic)."""
    if cell["data"] != "imagenet":
        return None
    if imagenet_dir is None:
        return "data=imagenet: no dataset configured (set backend.imagenet_dir)"
    if not imagenet_dir.exists() and sample is None:
        return f"data=imagenet: no dataset at {imagenet_dir}"
    return None


def make_imagenet_sample_if_needed(planned: list, imagenet_dir: Path | None, sample: Any, say: Any = print) -> None:
    """Makes the matrix's generated ImageNet sample when runnable real-data cells need it and none is there yet."""
    if sample is None or imagenet_dir is None or imagenet_dir.exists():
        return
    if any(p.runnable and p.cell["data"] == "imagenet" for p in planned):
        from bench.datasets import make_imagenet_sample

        made = make_imagenet_sample(imagenet_dir, sample.classes, sample.per_class)
        say(f"made an ImageNet sample for the real-data cells: {made['images']} images, "
            f"{made['classes']} classes, {' and '.join(made['layouts'])} layouts, in {made['dir']}")
