"""Slurm backend: each job of a cell is one sbatch script; inside the allocation the cell's MPI launcher (or srun)
starts the workers, which write their records into the job directory (on a directory the nodes share)."""
from __future__ import annotations

import functools
import math
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.backend_settings.slurm import SlurmConfig
from bench.backends.base import Backend
from bench.backends.shared.cell_launch import CellLaunch, Placement, cell_dir, launch_for
from bench.backends.shared.container import apptainer_prefix, pyxis_options
from bench.backends.shared.data_reach import imagenet_reach_reason, make_imagenet_sample_if_needed
from bench.backends.shared.outcome import JobEnd, Outcome, classify
from bench.backends.shared.records import read_end, read_records, tail_of
from bench.core.errors import BenchInputError
from bench.launch import Rendered, flavour_named
from bench.planning.cell import PlannedCell
from models.registry.engines import TORCH_DISTRIBUTED_ENGINES

# Job states in which the job has not finished yet (everything else is final).
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
                 "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"}
POLL_EVERY_S = 0.5  # the runner polls every 0.2 s; slurmctld need not answer that often
CANCEL_WAIT_S = 120  # scancel → job gone: KillWait (30 s by default) plus slack
CLI_TIMEOUT_S = 30
# Nodes of a multi-node job are known only inside the allocation: the launcher's host list names these
# placeholders, which the script replaces with the allocation's hosts (`scontrol show hostnames`).
NODE_MARK = "__BENCH_NODE_{}__"
# Values the script computes itself at run time (trusted text, written unquoted).
RUNTIME_ENV = {"MASTER_PORT": "$((20000 + SLURM_JOB_ID % 20000))"}


@dataclass
class Handle:
    planned: PlannedCell
    rendered: Rendered
    job_dir: Path
    job_id: str | None = None
    submit_error: str | None = None
    state: str = "PENDING"
    info: dict[str, str] | None = None  # the last `scontrol show job` fields
    deadline: float | None = None  # set when the job starts running: queue time does not count
    last_check: float = 0.0
    stopped: str | None = None  # timeout | interrupted
    lost: str | None = None  # why we stopped being able to ask about the job


class SlurmBackend(Backend):
    name = "slurm"

    def __init__(self, config: SlurmConfig, results_dir: Path, timeout_s: float, python: str = sys.executable,
                 imagenet_dir: str | None = None, imagenet_sample=None):
        self.config = config
        # Job directories must be visible to the nodes: the shared directory if given, else the results directory.
        self.jobs_root = Path(config.shared_dir or results_dir).resolve()
        self.timeout_s = timeout_s
        self.python = python
        self.imagenet_dir = Path(imagenet_dir).resolve() if imagenet_dir else None
        self.imagenet_sample = imagenet_sample

    @classmethod
    def from_settings(cls, settings, results_dir: Path, timeout_s: float | None = None) -> SlurmBackend:
        return cls(settings.slurm, results_dir, timeout_s or settings.timeout_s, imagenet_dir=settings.imagenet_dir,
                   imagenet_sample=settings.imagenet_sample)

    # --- what the cluster has -------------------------------------------------------------------------------------
    @functools.cached_property
    def _cluster(self) -> tuple[int | None, int | None]:
        """(cores, GPUs) of the partition's smallest node, from sinfo; (None, None) when the cluster does not answer
        (plan on a laptop): the explicit settings, if any, still apply."""
        argv = ["sinfo", "-h", "-o", "%c|%G"] + (["-p", self.config.partition] if self.config.partition else [])
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None, None
        rows = [line.split("|", 1) for line in out.stdout.splitlines() if "|" in line]
        if out.returncode != 0 or not rows:
            return None, None
        cores = min((int(c.rstrip("+")) for c, _ in rows if c.rstrip("+").isdigit()), default=None)
        return cores, min(_gres_gpus(g) for _, g in rows)

    @property
    def cores_per_node(self) -> int | None:
        return self.config.cores_per_node or self._cluster[0]

    @property
    def gpus_per_node(self) -> int | None:
        return self.config.gpus_per_node if self.config.gpus_per_node is not None else self._cluster[1]

    def check(self, planned: list[PlannedCell]) -> None:
        """Before anything is written: the Slurm tools are here, the cluster answers, the partition exists."""
        if not any(p.runnable for p in planned):
            return
        missing = [t for t in ("sbatch", "squeue", "scontrol", "scancel", "sinfo") if not shutil.which(t)]
        if missing:
            raise BenchInputError(f"slurm backend: {', '.join(missing)} not found on PATH (is this a Slurm "
                                  f"submit host?)")
        argv = ["sinfo", "-h", "-o", "%P"]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise BenchInputError(f"slurm backend: the cluster does not answer (sinfo took over {CLI_TIMEOUT_S} s)")
        if out.returncode != 0:
            raise BenchInputError(f"slurm backend: the cluster does not answer: {_last_line(out.stderr)}")
        partitions = {p.rstrip("*") for p in out.stdout.split()}
        if self.config.partition and self.config.partition not in partitions:
            raise BenchInputError(f"slurm backend: no partition '{self.config.partition}' "
                                  f"(the cluster has: {', '.join(sorted(partitions)) or 'none'})")

    def prepare(self, planned: list[PlannedCell], say=print) -> None:
        """Checks the Slurm tools are here and the cluster answers; makes the ImageNet sample if asked for."""
        if not any(p.runnable for p in planned):
            return
        self.check(planned)
        make_imagenet_sample_if_needed(planned, self.imagenet_dir, self.imagenet_sample, say)

    # --- planning -------------------------------------------------------------------------------------------------
    def reach_reason(self, cell: dict[str, Any], nodes: int) -> str | None:
        from bench.facts.catalog import catalog

        if reason := imagenet_reach_reason(cell, self.imagenet_dir, self.imagenet_sample):
            return reason
        if nodes > self.config.max_nodes:
            return f"needs {nodes} nodes; backend.slurm.max_nodes is {self.config.max_nodes}"
        if (cell["engine"] in TORCH_DISTRIBUTED_ENGINES and nodes > 1
                and flavour_named(cell["mpi"]).native == "torchrun"):
            return (f"engine={cell['engine']} with mpi={cell['mpi']} on {nodes} nodes: the slurm backend starts one "
                    f"torchrun, on one node (an MPI flavour's launcher starts torch.distributed across nodes)")
        if (c := self.config.container) is not None and c.engine == "pyxis" and (
                self.config.launch != "srun" or cell["engine"] in TORCH_DISTRIBUTED_ENGINES
                or not flavour_named(cell["mpi"]).srun_starts_ranks):
            return ("container.engine pyxis needs srun to start every rank (launch: srun, an MPI flavour, "
                    "engine horovod); use apptainer for launcher-started cells")
        if nodes > 1 and self.config.iface:
            try:  # what only the launch line can tell: a CIDR for a layer that takes only an interface name
                self.render(PlannedCell(cell, "plan", "planned", nodes=nodes), "plan")
            except ValueError as e:
                return str(e)
        sku = catalog()[cell["gpu"]]
        per_node = math.ceil(cell["gpus"] / nodes)
        if sku.is_cpu:
            cores = self.cores_per_node
            if cores is not None and per_node > cores:
                return f"{per_node} CPU workers per node would oversubscribe the Slurm nodes' {cores} cores"
            return None
        gpus = self.gpus_per_node
        if gpus == 0:
            return f"{cell['gpu']} cell needs GPUs; the Slurm partition has none (sinfo shows no gpu GRES)"
        if gpus is not None and per_node > gpus:
            return f"{cell['gpu']} cell needs {per_node} GPUs per node; the Slurm partition's nodes have {gpus}"
        return None

    def job_dir(self, planned: PlannedCell, run_id: str, job: int = 0) -> Path:
        return cell_dir(self.jobs_root, planned, run_id, job)

    def _cpus_per_task(self, planned: PlannedCell) -> int:
        if self.config.cpus_per_task:
            return self.config.cpus_per_task
        cores = self.cores_per_node
        per_node = math.ceil(planned.cell["gpus"] / planned.nodes)
        return max(1, cores // per_node) if cores else 1

    def launch(self, planned: PlannedCell, run_id: str, job: int = 0) -> CellLaunch:
        """Each worker gets its task's CPUs; a multi-node host list holds NODE_MARK placeholders, and the native
        engine's port comes from the job id, both filled by the script at run time."""
        where = Placement(self.jobs_root, self.python, tuple(NODE_MARK.format(i) for i in range(planned.nodes)),
                          self.config.iface, worker_threads=self._cpus_per_task(planned), data_dir=self.imagenet_dir,
                          master_port=RUNTIME_ENV["MASTER_PORT"], **self._container_placement())
        return launch_for(planned, run_id, job, where=where)

    def _mounts(self) -> list[str]:
        return [str(self.jobs_root), *([str(self.imagenet_dir)] if self.imagenet_dir else [])]

    def _container_placement(self) -> dict[str, Any]:
        """Workers in the image: apptainer as each rank's program; pyxis adds srun options instead (render)."""
        c = self.config.container
        if c is None:
            return {}
        prefix = apptainer_prefix(c, self._mounts()) if c.engine == "apptainer" else ()
        return {"program_prefix": prefix, "worker_python": c.python, "models_dir": c.models}

    def render(self, planned: PlannedCell, run_id: str, job: int = 0) -> Rendered:
        """The line that starts the workers inside the allocation."""
        launch = self.launch(planned, run_id, job)
        c, spec = planned.cell, launch.spec
        if (c["engine"] not in TORCH_DISTRIBUTED_ENGINES and self.config.launch == "srun"
                and launch.flavour.controller == "mpi"):
            # srun starts MPI ranks, not horovodrun; no launcher flags under srun: the flavour's fabric settings (the
            # interface too) go as its variables.
            argv = ("srun", f"--mpi={self.config.srun_mpi}", f"--ntasks={c['gpus']}",
                    f"--ntasks-per-node={planned.per_node}", f"--cpus-per-task={self._cpus_per_task(planned)}",
                    "--kill-on-bad-exit=1", *self._pyxis(launch), *spec.program)
            return Rendered(argv, {**launch.flavour.launcher_env(spec), **spec.env})
        return launch.render()

    def _pyxis(self, launch: CellLaunch) -> tuple[str, ...]:
        c = self.config.container
        return pyxis_options(c, self._mounts(), str(launch.dir)) if c is not None and c.engine == "pyxis" else ()

    def script(self, planned: PlannedCell, run_id: str, job: int = 0) -> str:
        """The sbatch script. Every value that comes from the matrix or a path is shlex-quoted; the #SBATCH lines
        are read by sbatch's own parser, which honours the same quotes."""
        c, cfg = planned.cell, self.config
        nodes, workers = planned.nodes, c["gpus"]
        per_node = math.ceil(workers / nodes)
        job_dir = self.job_dir(planned, run_id, job)
        rendered = self.render(planned, run_id, job)
        bin_dirs = self.launch(planned, run_id, job).runtime.bin_dirs
        q = shlex.quote
        options = [f"--job-name=bench-{planned.cell_id}", f"--nodes={nodes}", f"--ntasks={workers}",
                   f"--ntasks-per-node={per_node}", f"--cpus-per-task={self._cpus_per_task(planned)}"]
        if not planned.sku.is_cpu:
            options.append(f"--gpus-per-node={per_node}")
        # Slurm's own limit is a backstop for when bench itself is gone; bench cancels at timeout_s of run time.
        options.append(f"--time={math.ceil(self.timeout_s / 60) + 1}")
        if cfg.partition:
            options.append(f"--partition={cfg.partition}")
        if cfg.account:
            options.append(f"--account={cfg.account}")
        if cfg.exclusive:
            options.append("--exclusive")
        # sbatch expands %j and friends in these paths: %% keeps a literal '%'.
        options += [f"--output={_no_newline(job_dir / 'log.txt')}".replace("%", "%%"),
                    f"--chdir={_no_newline(job_dir)}"]
        lines = ["#!/bin/bash", *(f"#SBATCH {q(o)}" for o in options),
                 f"# bench cell {planned.cell_id} ({planned.label()}), run {q(run_id)}, job {job}",
                 "set -eu",
                 # The workers' environment: its launcher and Python first on PATH, then the cell's settings.
                 f"export PATH={':'.join(q(d) for d in bin_dirs)}:\"$PATH\""]
        if nodes > 1:  # the allocation's hosts, for the launcher's host list (and torch.distributed's first node)
            lines.append('BENCH_NODES=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))')
        for name, value in sorted(rendered.env.items()):
            lines.append(f"export {name}={RUNTIME_ENV[name] if name in RUNTIME_ENV else _shell_word(value)}")
        lines.append("exec " + " ".join(_shell_word(a) for a in rendered.argv))
        return "\n".join(lines) + "\n"

    def describe(self, planned: PlannedCell, run_id: str) -> dict[str, Any]:
        return {"sbatch": self.script(planned, run_id),
                "argv": ["sbatch", "--parsable", str(self.job_dir(planned, run_id) / "job.sbatch")]}

    # --- running --------------------------------------------------------------------------------------------------
    def submit(self, planned: PlannedCell, run_id: str, job: int = 0) -> Handle:
        job_dir = self.job_dir(planned, run_id, job)
        handle = Handle(planned, self.render(planned, run_id, job), job_dir)
        try:
            job_dir.mkdir(parents=True, exist_ok=True)
            (job_dir / "records.jsonl").unlink(missing_ok=True)
            path = job_dir / "job.sbatch"
            path.write_text(self.script(planned, run_id, job), encoding="utf-8")
            out = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True,
                                 timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.TimeoutExpired, BenchInputError) as e:
            handle.submit_error = f"could not submit: {e}"
            return handle
        if out.returncode != 0 or not out.stdout.strip():
            handle.submit_error = f"sbatch failed: {_last_line(out.stderr) or f'exit code {out.returncode}'}"
        else:
            handle.job_id = out.stdout.strip().split(";")[0]  # "<id>" or "<id>;<cluster>"
        return handle

    def poll(self, handle: Handle) -> bool:
        if handle.job_id is None or handle.stopped or handle.lost:
            return True
        now = time.monotonic()
        if now - handle.last_check < POLL_EVERY_S:
            return False
        handle.last_check = now
        self._refresh(handle)
        if handle.lost:
            self._scancel(handle)  # best effort: we can no longer watch it
            return True
        if handle.state not in ACTIVE_STATES:
            return True
        if handle.state == "RUNNING" and handle.deadline is None:
            handle.deadline = now + self.timeout_s
        if handle.deadline is not None and now > handle.deadline:
            handle.stopped = "timeout"
            self._stop(handle)
            return True
        return False

    def cancel(self, handle: Handle) -> None:
        handle.stopped = handle.stopped or "interrupted"
        self._stop(handle)

    def collect(self, handle: Handle) -> Outcome:
        outcome = self._collect(handle)
        outcome.log_path = handle.job_dir / "log.txt"  # the runner reads the effective transport from it
        return outcome

    def _collect(self, handle: Handle) -> Outcome:
        if handle.submit_error:
            return classify(JobEnd(error=handle.submit_error), handle.planned.cell["repeats"], self.timeout_s, "")
        if not handle.stopped and not handle.lost:
            self._wait_gone(handle, CLI_TIMEOUT_S)  # the runner may collect without a final poll
        records, bad = read_records(handle.job_dir / "records.jsonl")
        log = read_end(handle.job_dir / "log.txt")
        info = handle.info or {}
        rc, sig = _exit_code(info.get("ExitCode", ""))
        job = f"Slurm job {handle.job_id}"
        failed = handle.state != "COMPLETED" or rc != 0
        how = f"{job} {handle.state}, exit code {rc}" + (f", signal {sig}" if sig else "")
        end = JobEnd(records, bad, log, tail_of(log), rc, stopped=handle.stopped,
                     lost=f"{job}: {handle.lost}" if handle.lost else None,
                     time_limit=f"{job} reached its Slurm time limit" if handle.state == "TIMEOUT" else None,
                     failure=how if failed else None)
        return classify(end, handle.planned.cell["repeats"], self.timeout_s, f"{job} was cancelled",
                        fallback=_slurm_reason(info) or "see log.txt")

    # --- talking to Slurm -----------------------------------------------------------------------------------------
    def _refresh(self, handle: Handle) -> None:
        try:
            out = subprocess.run(["scontrol", "show", "job", "-o", handle.job_id], capture_output=True, text=True,
                                 timeout=CLI_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            handle.lost = f"scontrol failed: {e}"
            return
        if out.returncode != 0:
            # A job purged from slurmctld's memory (older than MinJobAge) is reported as invalid.
            handle.lost = f"Slurm no longer knows the job ({_last_line(out.stderr)})"
            return
        handle.info = _fields(out.stdout)
        handle.state = handle.info.get("JobState", "UNKNOWN")

    def _scancel(self, handle: Handle) -> None:
        if handle.job_id:
            subprocess.run(["scancel", handle.job_id], capture_output=True, timeout=CLI_TIMEOUT_S, check=False)

    def _stop(self, handle: Handle) -> None:
        """Cancels the job and waits until Slurm has ended it, so no worker outlives the cell."""
        if handle.job_id is None:
            return
        self._scancel(handle)
        self._wait_gone(handle, CANCEL_WAIT_S)

    def _wait_gone(self, handle: Handle, limit_s: float) -> None:
        end = time.monotonic() + limit_s
        while True:
            self._refresh(handle)
            if handle.lost or handle.state not in ACTIVE_STATES or time.monotonic() > end:
                return
            time.sleep(POLL_EVERY_S)


def _shell_word(arg: str) -> str:
    """One argv element for the script: quoted, except that node placeholders become the allocation's hosts."""
    if "__BENCH_NODE_" not in arg:
        return shlex.quote(arg)
    if not re.fullmatch(r"[A-Za-z0-9_:,.=-]+", arg):
        raise ValueError(f"unexpected host argument {arg!r}")
    return '"' + re.sub(r"__BENCH_NODE_(\d+)__", r"${BENCH_NODES[\1]}", arg) + '"'


def _no_newline(path: Path) -> str:
    # A newline would end an #SBATCH line and start a line that bash runs.
    if "\n" in str(path) or "\r" in str(path):
        raise BenchInputError(f"slurm backend: path {str(path)!r} contains a line break")
    return str(path)


def _fields(text: str) -> dict[str, str]:
    """`scontrol show job -o` prints Key=Value pairs on one line; values do not contain ' Key='."""
    return dict(m.groups() for m in re.finditer(r"(?:^|\s)([A-Za-z/:]+)=(.*?)(?=\s+[A-Za-z/:]+=|\s*$)", text))


def _exit_code(text: str) -> tuple[int | None, int]:
    m = re.fullmatch(r"(\d+):(\d+)", text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else (None, 0)


def _slurm_reason(info: dict[str, str]) -> str | None:
    reason = info.get("Reason")
    return None if reason in (None, "None", "(null)") else f"Slurm reason {reason}"


def _gres_gpus(gres: str) -> int:
    """GPUs per node from sinfo's %G, e.g. 'gpu:8', 'gpu:a100:4(S:0-1),nic:1', '(null)'."""
    return sum(int(m.group(1)) for m in re.finditer(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)", gres))


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
