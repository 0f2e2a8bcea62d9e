"""How a cell is launched, for every backend: the worker's argv, its environment, its job directory, its threads,
the runtime and launcher that start it, and the native engine's rendezvous. A backend says only where the cell goes
(a `Placement`) and places the result: starts it here, over ssh, in an sbatch script or in an Azure ML job."""
from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import models
from bench.backends.shared.process import TOKEN_VAR
from bench.launch import LAUNCHERS, TORCHRUN, Flavour, LaunchSpec, Rendered, Ssh
from bench.launch.cellenv import cell_env
from bench.launch.runtimes import Runtime, image_runtime, runtime_for
from bench.planning.cell import PlannedCell
from models.registry.collectives import COLLECTIVES
from models.registry.engines import TORCH_DISTRIBUTED_ENGINES
from models.registry.workloads import workload_spec

MODELS_DIR = Path(models.__file__).resolve().parent
GPU_THREADS = 4  # GPU workers: a few threads each for the host side


@dataclass(frozen=True)
class Placement:
    """Where a backend puts a cell: all a cell's launch depends on besides the cell itself."""

    root: Path  # job directories are root/runs/<run>/<cell>/job<k>, on every host of the cell
    python: str = sys.executable  # this machine's Python: picks the cell's runtime (its environment)
    hosts: tuple[str, ...] = ()  # the nodes of a multi-node cell (names, or placeholders); one node runs "localhost"
    iface: str | None = None  # multi-node cells: the interface between the nodes
    ssh: Ssh | None = None  # multi-node cells: how the launcher reaches the other nodes
    cores: int | None = None  # cores of the (smallest) node: CPU workers share them when the cell names no threads
    worker_threads: int | None = None  # threads of every worker when the cell names none (Slurm's cpus-per-task)
    data_dir: Path | None = None  # where data=imagenet cells read the data set
    master_port: str | None = None  # the native engine's rendezvous port under a launcher; None = a free one here
    token: str | None = None  # set in every worker's env, so the launcher forwards it to every host
    # Workers inside a container (bench/backends/shared/container.py): the argv that runs a program in the image on a
    # node, and where the image keeps the worker's Python and models/. () / None = the workers run on the node itself.
    program_prefix: tuple[str, ...] = ()
    worker_python: str | None = None
    models_dir: str | None = None


@dataclass(frozen=True)
class CellLaunch:
    planned: PlannedCell
    dir: Path  # the job directory: records.jsonl, log.txt
    threads: int  # per worker
    runtime: Runtime  # the environment that runs the workers (and its launcher)
    flavour: Flavour
    spec: LaunchSpec  # workers, hosts, the worker program and its env

    @property
    def tool(self) -> str | None:
        """The launcher's path; None = its name on PATH."""
        return self.flavour.tool_path(self.runtime)

    def render(self) -> Rendered:
        """The argv and env that start every worker: the native engine's torchrun, or the flavour's launcher."""
        if self.planned.cell["engine"] in TORCH_DISTRIBUTED_ENGINES and self.flavour.native == "torchrun":
            return TORCHRUN.render(self.spec, self.runtime.python)
        return self.flavour.render(self.spec, self.tool)


def launch_for(planned: PlannedCell, run_id: str, job: int, *, where: Placement) -> CellLaunch:
    c = planned.cell
    one = planned.nodes == 1  # one node: the launcher starts every worker where it runs, as on the local backend
    iface = None if one else where.iface
    threads = threads_for(planned, where.cores, where.worker_threads)
    rt = runtime_for(c["mpi"], where.python)
    job_dir = cell_dir(where.root, planned, run_id, job)
    env = cell_env(planned, threads, rt, iface=iface)
    if where.token:
        env[TOKEN_VAR] = where.token  # every flavour forwards the cell's env to every worker, remote ones too
    flavour = LAUNCHERS[c["mpi"]]
    spec = LaunchSpec(workers=c["gpus"], hosts=(("localhost", c["gpus"]),) if one else
                      tuple((h, planned.per_node) for h in where.hosts),
                      program=(*where.program_prefix,
                                               *worker_program(planned, run_id, job_dir / "records.jsonl", threads,
                                                               where.worker_python or rt.python, where.data_dir,
                                                               where.models_dir or MODELS_DIR)),
                      env=env, ib=c["ib"], as_root=os.geteuid() == 0, sriov=planned.sku.sriov, iface=iface,
                      ssh=None if one else where.ssh)
    if c["engine"] in TORCH_DISTRIBUTED_ENGINES and flavour.native != "torchrun":
        # DDP's processes started by the launcher rendezvous over TCP at the first node.
        spec = replace(spec, env={**spec.env, "MASTER_ADDR": "127.0.0.1" if one else where.hosts[0],
                                  "MASTER_PORT": where.master_port or str(free_port())})
    return CellLaunch(planned, job_dir, threads, rt, flavour, spec)


def launch_in_image(planned: PlannedCell, run_id: str, hosts: tuple[tuple[str, int], ...], *, python: str,
                    models_dir: str, ssh: Ssh | None = None) -> tuple[LaunchSpec, Runtime, str]:
    """A cell's launch where its workers run in the cell's own bench image on nodes bench does not reach itself (a
    cluster's pods): the image's runtime and paths, the cell's env, the hosts as the launcher will reach them, and
    rank 0's records printed on stdout (the backend reads them back from a log). Unprivileged, as the images run.
    Also the launcher as the image has it: Open MPI's mpirun and horovodrun by name on the image's PATH, the
    MPICH-ABI flavours' from the image's environment (Intel MPI's from its own prefix, first)."""
    c = planned.cell
    runtime = image_runtime(c["mpi"], python)
    threads = threads_for(planned, None)
    program = worker_program(planned, run_id, None, threads, runtime.python, models_dir=models_dir)
    spec = LaunchSpec(workers=c["gpus"], hosts=hosts, program=program, env=cell_env(planned, threads, runtime),
                      ib=c["ib"], as_root=False, sriov=planned.sku.sriov, ssh=ssh)
    flavour = LAUNCHERS[c["mpi"]]
    tool = f"{runtime.bin_dirs[0]}/{flavour.tool}" if runtime.env else flavour.tool
    return spec, runtime, tool


def runtime_of(planned: PlannedCell, python: str = sys.executable) -> Runtime:
    """The environment that runs the cell's workers, without rendering its launch."""
    return runtime_for(planned.cell["mpi"], python)


def cell_dir(root: Path, planned: PlannedCell, run_id: str, job: int = 0) -> Path:
    return root / "runs" / run_id / planned.cell_id / f"job{job}"


def threads_for(planned: PlannedCell, cores: int | None, worker_threads: int | None = None) -> int:
    """Threads per worker: the cell's own, else what the backend gives every worker, else a few for a GPU worker's
    host side, else the node's cores shared among the workers on it (1 if the cores are unknown)."""
    if planned.cell["threads"]:
        return planned.cell["threads"]
    if worker_threads:
        return worker_threads
    if not planned.sku.is_cpu:
        return GPU_THREADS
    return max(1, cores // planned.per_node) if cores else 1


def worker_program(planned: PlannedCell, run_id: str, out: Path | str | None, threads: int,
                   python: str = sys.executable, data_dir: Path | str | None = None,
                   models_dir: Path | str = MODELS_DIR) -> tuple[str, ...]:
    """The workload's argv: every cell setting becomes an explicit flag, so the command alone reproduces the cell.
    `models_dir` is where the worker programs are on the workers (this repository's models/, or a job's snapshot).
    `out` None: rank 0 prints its records on stdout (models/measure/record.py's STDOUT_PREFIX), for jobs read from a
    log."""
    c = planned.cell
    to = ("--out", str(out)) if out is not None else ()
    name = worker_script(c)
    script = name if os.path.isabs(name) else f"{models_dir}/{name}"  # a registered workload's script: its own path
    engine = ("--engine", "native") if c["engine"] in TORCH_DISTRIBUTED_ENGINES else ()
    if c["model"] in COLLECTIVES:
        sweep = ("--max-bytes", str(c["max_message_bytes"])) if c.get("max_message_bytes") else ()
        return (python, script, "--op", c["model"], *engine, *sweep, "--warmup-steps", str(c["warmup_steps"]),
                "--steps", str(c["steps"]), "--repeats", str(c["repeats"]), "--threads", str(threads),
                "--cell-id", planned.cell_id, "--run-id", run_id, *to)
    spec = workload_spec(c["model"], c["framework"])
    if spec is not None and "argv" in spec:  # a workload that declares its flags (the transformer, a registered one)
        return (python, script, *declared_flags(spec, c), "--threads", str(threads), "--cell-id", planned.cell_id,
                "--run-id", run_id, *to)
    data = ("--data", "imagenet", "--data-dir", str(data_dir), "--data-layout", c["data_layout"],
            "--loader-workers", str(c["loader_workers"]), "--loader", c["loader"]) if c["data"] == "imagenet" else ()
    step = ("--compile", c["compile"], "--optimizer-impl", c["optimizer_impl"],
            "--cuda-graphs" if c["cuda_graphs"] else "--no-cuda-graphs")
    return (python, script, *engine, *data,
            "--batch-size", str(c["batch_per_gpu"]), "--image-size", str(c["image_size"]),
            "--warmup-steps", str(c["warmup_steps"]), "--steps", str(c["steps"]), "--repeats", str(c["repeats"]),
            "--precision", c["precision"], "--channels-last" if c["channels_last"] else "--no-channels-last", *step,
            "--threads", str(threads), "--cell-id", planned.cell_id, "--run-id", run_id, *to)


def declared_flags(spec: dict[str, Any], cell: dict[str, Any]) -> tuple[str, ...]:
    """The flags a workload's `argv` declares, from the cell: `--flag value`, a bool as --flag or --no-flag, a null
    value left out (the worker's own default)."""
    out: list[str] = []
    for flag, key in spec["argv"]:
        value = cell.get(key)
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + flag.removeprefix("--"))
        elif value is not None:
            out += [flag, str(value)]
    return tuple(out)


def probe_program(planned: PlannedCell, out: Path, threads: int, python: str, data_dir: Path | str | None,
                  no_comm_dir: Path) -> tuple[tuple[str, ...], dict[str, str]]:
    """One copy of a cell's compute probe (bench/backends/local/compute_probe.py): the cell's own worker program (argv
    and threads as the cell's) with no launcher and no communication library: `no_comm_dir` goes first on PYTHONPATH and
    holds a `horovod` package that fails to import, so the workload runs as a single process. Returns (argv, the
    environment to add; rank variables a launcher would set are for the caller to drop)."""
    argv = worker_program(planned, "probe", out, threads, python, data_dir)
    env = {"OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(no_comm_dir), os.environ.get("PYTHONPATH")) if p)}
    return argv, env


def worker_script(cell: dict[str, Any]) -> str:
    """The program under models/ that measures the cell: a collective sweep, or its workload's (models/registry/)."""
    spec = COLLECTIVES.get(cell["model"]) or workload_spec(cell["model"], cell["framework"])
    return spec["script"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
