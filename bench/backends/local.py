"""Local backend: each cell is a real launcher process group (mpirun or horovodrun) on this machine."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.backends import jobs
from bench.backends.base import Outcome
from bench.backends.jobs import Handle, free_port, imagenet_reach_reason, last_error, make_imagenet_sample_if_needed, \
    tool_path, worker_program
from bench.catalog import catalog
from bench.cell import PlannedCell
from bench.launch import LAUNCHERS, TORCHRUN, LaunchSpec, Rendered
from bench.launch.cellenv import cell_env
from bench.launch.runtimes import runtime_for


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
        make_imagenet_sample_if_needed(planned, self.imagenet_dir, self.imagenet_sample, say)

    # --- planning -----------------------------------------------------------------------------------------------
    def reach_reason(self, cell: dict[str, Any], nodes: int) -> str | None:
        if reason := imagenet_reach_reason(cell, self.imagenet_dir, self.imagenet_sample):
            return reason
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
        matching = [g for g in gpus if sku.is_this_gpu(g)]
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
        launcher = LAUNCHERS[c["mpi"]]
        if c["engine"] == "native":
            if launcher.native == "torchrun":
                return TORCHRUN.render(spec, rt.python)
            # DDP's processes started by mpirun rendezvous over TCP on this machine.
            spec = replace(spec, env={**spec.env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
        return launcher.render(spec, rt.tool(launcher.TOOL) or tool_path(launcher.TOOL, rt.python))

    def describe(self, planned: PlannedCell, run_id: str) -> dict[str, Any]:
        r = self.render(planned, run_id)
        return {"argv": list(r.argv), "env": r.env}

    # --- running ------------------------------------------------------------------------------------------------
    def submit(self, planned: PlannedCell, run_id: str, job: int = 0) -> Handle:
        bins = runtime_for(planned.cell["mpi"], self.python).bin_dirs
        return jobs.start(planned, self.render(planned, run_id, job), self.cell_dir(planned, run_id, job),
                          self.timeout_s, bins)

    def poll(self, handle: Handle) -> bool:
        return jobs.poll(handle, jobs.kill)

    def cancel(self, handle: Handle) -> None:
        handle.stopped = handle.stopped or "interrupted"
        jobs.kill(handle)

    def collect(self, handle: Handle) -> Outcome:
        rc, records, bad, log, tail = jobs.finish(handle, jobs.kill)
        outcome = self._outcome(handle, rc, records, bad, log, tail)
        outcome.log_path = handle.cell_dir / "log.txt"
        return outcome

    def _outcome(self, handle: Handle, rc: int, records: list[dict], bad: str | None, log: str,
                 tail: str) -> Outcome:
        if handle.stopped == "timeout":
            return Outcome("timeout", records, f"timed out after {self.timeout_s:g} s; the process group was killed",
                           tail, rc)
        if handle.stopped == "interrupted":
            return Outcome("interrupted", records, "interrupted; the process group was killed", tail, rc)
        if rc != 0:
            return Outcome("failed", records, f"exit code {rc}: {last_error(log) or 'see log.txt'}", tail, rc)
        return jobs.judge(records, bad, handle.planned.cell["repeats"], tail, rc)

    def sweep(self, token: str) -> int:
        """Kill whatever still carries a cell token: the jobs of a controller that died (a stale claim)."""
        return jobs.kill_family(None, token)
