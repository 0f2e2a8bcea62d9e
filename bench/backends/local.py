"""Local backend: each cell is a real launcher process group (mpirun or horovodrun) on this machine."""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

import models
from bench.backends.base import Outcome
from bench.catalog import catalog
from bench.cell import PlannedCell
from bench.launch import LAUNCHERS, TORCHRUN, LaunchSpec, Rendered
from bench.launch.cellenv import cell_env
from bench.redact import redact_text
from bench.runtimes import runtime_for
from models.registry import WORKLOADS

MODELS_DIR = Path(models.__file__).resolve().parent
TOKEN_VAR = "BENCH_CELL_TOKEN"  # marks every process of a cell, so none can outlive it unnoticed
LOG_TAIL_LINES = 40


@functools.cache
def local_gpus() -> tuple[str, ...]:
    if not shutil.which("nvidia-smi"):
        return ()
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(line.strip() for line in out.splitlines() if line.strip())


def worker_program(planned: PlannedCell, run_id: str, out: Path, threads: int,
                   python: str = sys.executable, data_dir: Path | None = None) -> tuple[str, ...]:
    """The workload's argv: every cell setting becomes an explicit flag, so the command alone reproduces the cell."""
    c = planned.cell
    script = MODELS_DIR / WORKLOADS[c["framework"]]["script"]
    data = ("--data", "imagenet", "--data-dir", str(data_dir), "--data-layout", c["data_layout"],
            "--loader-workers", str(c["loader_workers"])) if c["data"] == "imagenet" else ()
    engine = ("--engine", "native") if c["engine"] == "native" else ()
    return (python, str(script), *engine, *data,
            "--batch-size", str(c["batch_per_gpu"]), "--image-size", str(c["image_size"]),
            "--warmup-steps", str(c["warmup_steps"]), "--steps", str(c["steps"]), "--repeats", str(c["repeats"]),
            "--precision", c["precision"], "--channels-last" if c["channels_last"] else "--no-channels-last",
            "--threads", str(threads), "--cell-id", planned.cell_id, "--run-id", run_id, "--out", str(out))


@dataclass
class Handle:
    planned: PlannedCell
    rendered: Rendered
    proc: subprocess.Popen
    cell_dir: Path
    token: str
    started: float
    deadline: float
    log_file: Any  # the _LogPump writing the job's redacted log
    reaper: subprocess.Popen | None = None
    stopped: str | None = None  # timeout | interrupted


class LocalBackend:
    name = "local"

    def __init__(self, results_dir: Path, timeout_s: float, python: str = sys.executable,
                 imagenet_dir: str | None = None, imagenet_sample=None):
        self.results_dir = Path(results_dir).resolve()  # workers may run elsewhere: no relative paths
        self.timeout_s = timeout_s
        self.python = python
        self.imagenet_dir = Path(imagenet_dir).resolve() if imagenet_dir else None
        self.imagenet_sample = imagenet_sample

    @classmethod
    def from_settings(cls, settings, results_dir: Path, timeout_s: float | None = None) -> "LocalBackend":
        return cls(results_dir, timeout_s or settings.timeout_s, imagenet_dir=settings.imagenet_dir,
                   imagenet_sample=settings.imagenet_sample)

    def prepare(self, planned: list[PlannedCell], say=print) -> None:
        """Makes the generated ImageNet sample if runnable cells need it and the matrix asked for one."""
        if self.imagenet_sample is None or self.imagenet_dir is None or self.imagenet_dir.exists():
            return
        if any(p.runnable and p.cell["data"] == "imagenet" for p in planned):
            from bench.datasets import make_imagenet_sample

            made = make_imagenet_sample(self.imagenet_dir, self.imagenet_sample.classes,
                                        self.imagenet_sample.per_class)
            say(f"made an ImageNet sample for the real-data cells: {made['images']} images, "
                f"{made['classes']} classes, {' and '.join(made['layouts'])} layouts, in {made['dir']}")

    # --- planning -----------------------------------------------------------------------------------------------
    def reach_reason(self, cell: dict[str, Any], nodes: int) -> str | None:
        if cell["data"] == "imagenet":
            if self.imagenet_dir is None:
                return "data=imagenet: no dataset configured (set backend.imagenet_dir)"
            if not self.imagenet_dir.exists() and self.imagenet_sample is None:
                return f"data=imagenet: no dataset at {self.imagenet_dir}"
        if nodes > 1:
            return f"needs {nodes} nodes; the local backend runs on this one machine"
        sku = catalog()[cell["gpu"]]
        workers = cell["gpus"]
        if sku.is_cpu:
            cores = os.cpu_count() or 1
            if workers > cores:
                return f"{workers} CPU workers would oversubscribe this machine's {cores} cores"
            return None
        gpus = local_gpus()
        if not gpus:
            return f"{cell['gpu']} cell needs {workers}x {sku.gpu_model}; this machine has no GPU"
        family = cell["gpu"].split("-")[0]
        matching = [g for g in gpus if family in g]
        if len(matching) < workers:
            return f"{cell['gpu']} cell needs {workers}x {sku.gpu_model}; this machine has {len(gpus)}x {gpus[0]}"
        return None

    def threads_for(self, planned: PlannedCell) -> int:
        if planned.cell["threads"]:
            return planned.cell["threads"]
        if planned.sku.is_cpu:
            return max(1, (os.cpu_count() or 1) // planned.cell["gpus"])
        return 4  # GPU workers: a few threads each for the host side

    def cell_dir(self, planned: PlannedCell, run_id: str, job: int = 0) -> Path:
        return self.results_dir / "runs" / run_id / planned.cell_id / f"job{job}"

    def render(self, planned: PlannedCell, run_id: str, job: int = 0) -> Rendered:
        c = planned.cell
        threads = self.threads_for(planned)
        out = self.cell_dir(planned, run_id, job) / "records.jsonl"
        rt = runtime_for(c["mpi"], self.python)
        spec = LaunchSpec(workers=c["gpus"], hosts=(("localhost", c["gpus"]),),
                          program=worker_program(planned, run_id, out, threads, rt.python, self.imagenet_dir),
                          env=cell_env(planned, threads, rt), ib=c["ib"], as_root=os.geteuid() == 0,
                          sriov=planned.sku.sriov)
        if c["engine"] == "native":
            if c["mpi"] == "gloo":
                return TORCHRUN.render(spec, rt.python)
            # DDP's processes started by mpirun rendezvous over TCP on this machine.
            spec = replace(spec, env={**spec.env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())})
        launcher = LAUNCHERS[c["mpi"]]
        return launcher.render(spec, rt.tool(launcher.TOOL) or _tool_path(launcher.TOOL, rt.python))

    def describe(self, planned: PlannedCell, run_id: str) -> dict[str, Any]:
        r = self.render(planned, run_id)
        return {"argv": list(r.argv), "env": r.env}

    # --- running ------------------------------------------------------------------------------------------------
    def submit(self, planned: PlannedCell, run_id: str, job: int = 0) -> Handle:
        rendered = self.render(planned, run_id, job)
        cell_dir = self.cell_dir(planned, run_id, job)
        cell_dir.mkdir(parents=True, exist_ok=True)
        (cell_dir / "records.jsonl").unlink(missing_ok=True)
        token = uuid.uuid4().hex
        env = {**os.environ, **rendered.env, TOKEN_VAR: token}
        # The cell's runtime first on PATH: Hydra's proxies and horovodrun find their helpers there.
        bins = runtime_for(planned.cell["mpi"], self.python).bin_dirs
        env["PATH"] = os.pathsep.join((*bins, env.get("PATH", "")))
        now = time.monotonic()
        # The launcher's output goes through a pipe into a redacting writer: a secret a worker prints never
        # reaches the disk (log.txt is what bench keeps). And if this controller dies, the launcher loses its
        # reader: a worker that writes again gets EPIPE.
        proc = subprocess.Popen(rendered.argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        pump = _LogPump(proc.stdout, cell_dir / "log.txt")
        pump.start()
        return Handle(planned, rendered, proc, cell_dir, token, now, now + self.timeout_s, pump,
                      _start_reaper(proc.pid, token))

    def poll(self, handle: Handle) -> bool:
        if handle.proc.poll() is not None:
            return True
        if time.monotonic() > handle.deadline:
            handle.stopped = "timeout"
            self._kill(handle)
            return True
        return False

    def cancel(self, handle: Handle) -> None:
        handle.stopped = handle.stopped or "interrupted"
        self._kill(handle)

    def collect(self, handle: Handle) -> Outcome:
        rc = handle.proc.wait()
        self._kill(handle)  # reap anything the launcher left behind, even after a clean exit
        handle.log_file.join(timeout=10)  # every writer of the pipe is gone: the pump reaches EOF
        if handle.reaper is not None:
            handle.reaper.terminate()  # the job ended under this controller's eyes: no watch needed
            try:
                handle.reaper.wait(timeout=5)
            except subprocess.TimeoutExpired:
                handle.reaper.kill()
        records, bad = _read_records(handle.cell_dir / "records.jsonl")
        log = _read_end(handle.cell_dir / "log.txt")
        tail = "\n".join(log.splitlines()[-LOG_TAIL_LINES:])
        outcome = self._outcome(handle, rc, records, bad, log, tail)
        outcome.log_path = handle.cell_dir / "log.txt"
        return outcome

    def _outcome(self, handle: Handle, rc: int, records: list[dict], bad: str | None, log: str,
                 tail: str) -> Outcome:
        repeats = handle.planned.cell["repeats"]
        if handle.stopped == "timeout":
            return Outcome("timeout", records, f"timed out after {self.timeout_s:g} s; the process group was killed",
                           tail, rc)
        if handle.stopped == "interrupted":
            return Outcome("interrupted", records, "interrupted; the process group was killed", tail, rc)
        if rc != 0:
            return Outcome("failed", records, f"exit code {rc}: {_last_error(log) or 'see log.txt'}", tail, rc)
        if bad:
            return Outcome("failed", records, bad, tail, rc)
        if len(records) != repeats:
            return Outcome("failed", records, f"expected {repeats} records, got {len(records)}", tail, rc)
        return Outcome("ok", records, None, tail, rc)

    def _kill(self, handle: Handle) -> None:
        """End the whole cell: the launcher's tree, its process group, and anything carrying the cell's token
        (horovodrun starts workers in sessions of their own, out of reach of a process-group kill)."""
        kill_family(handle.proc.pid, handle.token)
        try:
            handle.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def sweep(self, token: str) -> int:
        """Kill whatever still carries a cell token: the jobs of a controller that died (a stale claim)."""
        return kill_family(None, token)


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


class _LogPump(threading.Thread):
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


def _start_reaper(launcher_pid: int, token: str) -> subprocess.Popen | None:
    """A small watchdog in a session of its own: if this controller dies (even SIGKILL, which nothing can catch),
    it kills the job's launcher group and every process carrying the cell token, then exits. The controller
    stops it when it collects the job."""
    env = {k: v for k, v in os.environ.items() if k != TOKEN_VAR}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(MODELS_DIR.parent), env.get("PYTHONPATH"))))
    try:
        return subprocess.Popen([sys.executable, "-m", "bench.backends.local", "--reap", str(os.getpid()),
                                 str(launcher_pid), token], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None


def _reap_when_orphaned(controller_pid: int, launcher_pid: int, token: str) -> None:
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tool_path(tool: str, python: str) -> str:
    venv_tool = Path(python).parent / tool
    return str(venv_tool) if venv_tool.exists() else (shutil.which(tool) or tool)


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


def _read_records(path: Path) -> tuple[list[dict], str | None]:
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


def _read_end(path: Path, limit: int = 256 * 1024) -> str:
    """The last `limit` bytes of a log: enough to find the error, bounded however much a job printed."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - limit))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


# Most telling first: the worker's own words, then a Python exception or an MPI error report, then launcher-level
# complaints. horovodrun prefixes worker lines with "[rank]<stderr>:", hence the leading `.*?`. Consequences are
# not causes: "Horovod has been shut down" is what the healthy ranks say after another rank died.
_ERROR_LINES = (
    re.compile(r"^.*?(bench worker: .*)$"),
    re.compile(r"^(?:\[\d+\]<std(?:err|out)>:)?\s*((?!RuntimeError: Horovod detected that)(?!.*Horovod has been shut down)"
               r"\w+(?:\.\w+)*(?:Error|Exception|Interrupt)\b.*|.*\*\*\* An error occurred in \S+.*)$"),
    re.compile(r"^(.*Killed.*|.*exited on signal.*|.*signal \d+.*|.*ORTE_ERROR_LOG: .*|.*MPI_ABORT.*)$"),
    re.compile(r"^(.*exited with non-zero status.*)$"),  # the launcher's summary: only when nothing says more
)


def _last_error(log: str) -> str | None:
    lines = log.splitlines()
    for pattern in _ERROR_LINES:
        for line in reversed(lines):
            m = pattern.match(line)
            if m:
                return m.group(1).strip()[:300]
    return None


if __name__ == "__main__" and sys.argv[1:2] == ["--reap"]:
    _reap_when_orphaned(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
