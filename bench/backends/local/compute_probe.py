"""The compute probe, run: a co-located cell's own worker program as N plain processes started at once on this
machine — no launcher, no communication library, threads and placement as the local backend gives the cell's
workers (unpinned: no flavour binds them) — and its result stored under the results folder, for every cell with the
same compute settings (bench/analysis/probe.py: the key, the stale rule, the figures).

No communication library: every workload runs as a single process when `import horovod...` fails
(models/measure/common.py single_process_comm, models/workloads/resnet50/tf_env.py); the probe puts a folder first on
the processes' PYTHONPATH whose `horovod` package raises ImportError, so no Horovod, MPI or Gloo is loaded or
initialised in them (their records say engine `none`). The native engine's cells are probed the same way (without
`--engine native`): DDP over one process would still start a Gloo process group. Each window still opens and closes
at a barrier, the copies' own (models/measure/copies.py, a folder of files), so their windows coincide however
unequal their start-up was.

Cost: start-up (imports, and TensorFlow's tracing) is most of it; the windows are PROBE_WARMUP + PROBE_STEPS ×
PROBE_REPEATS steps. Bounded: PROBE_TIMEOUT_S for the whole probe, then the processes' groups are killed.
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.analysis.probe import (PROBE_VERSION, ProbeResult, compute_key, fresh, from_entry, key_text, stale_reason,
                                  summarize, to_entry)
from bench.backends.shared.records import read_records
from bench.planning.cell import PlannedCell
from models.measure.copies import COPIES_DIR_VAR, COPIES_VAR

CACHE = Path("probes") / "compute.json"  # under the results folder (next to the store)
PROBE_WARMUP, PROBE_STEPS, PROBE_REPEATS = 2, 2, 3
PROBE_TIMEOUT_S = 240.0
KEEP_PER_KEY = 20  # entries kept per key (older runs in the store still find the probe they ran with)
NO_HOROVOD = 'raise ImportError("bench compute probe: no communication library in this process")\n'
# What a launcher tells a worker about its job: none of it may reach a probe's copies (each is a world of one).
LAUNCHER_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
                 "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE")


def identity() -> dict[str, Any]:
    """This machine as a probe knows it: a change in any of these makes a stored probe stale."""
    import bench

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return {"hostname": socket.gethostname(), "cores": cores, "kernel": platform.release(),
            "bench_version": bench.__version__, "probe_version": PROBE_VERSION}


def cache_path(results_dir: Path | str) -> Path:
    return Path(results_dir) / CACHE


def read(path: Path | str) -> dict[str, list[dict[str, Any]]]:
    """The file's two lists: `entries` (probes) and `costs` (what co-located cells measured beyond their probe);
    empty when there is no file or it cannot be read as one (it is then rewritten)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    data = data if isinstance(data, dict) else {}
    entries, costs = data.get("entries"), data.get("costs")
    return {"entries": [e for e in entries if isinstance(e, dict) and "key" in e and "rate" in e]
            if isinstance(entries, list) else [],
            "costs": [c for c in costs if isinstance(c, dict) and "key" in c and "parts" in c]
            if isinstance(costs, list) else []}


def load(path: Path | str) -> list[dict[str, Any]]:
    """The stored probes; [] when there are none."""
    return read(path)["entries"]


@contextlib.contextmanager
def _locked(path: Path):
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def store(path: Path | str, entry: dict[str, Any], kind: str = "entries") -> None:
    """Adds one probe (`entries`) or one cell's costs (`costs`), keeping KEEP_PER_KEY of each key; the file is
    written whole and renamed into place, under a lock (two runs may share a results folder)."""
    path = Path(path)
    with _locked(path):
        data = read(path)
        items = data[kind] + [entry]
        want = _index(entry)
        same = sorted((e for e in items if _index(e) == want), key=lambda e: e["measured_unix"])
        drop = {id(e) for e in same[:-KEEP_PER_KEY]}
        data[kind] = [e for e in items if id(e) not in drop]
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"format": 1, **data}, indent=1), encoding="utf-8")
        os.replace(tmp, path)


def _index(entry: dict[str, Any]) -> str:
    return key_text(entry["key"]) + "|" + str(entry.get("stack", ""))


def record_costs(planned: PlannedCell, results_dir: Path, run_id: str, records: list[dict[str, Any]],
                 probe: ProbeResult) -> None:
    """After a co-located cell: what it measured beyond the probe it ran with (the engine's cost on shared cores,
    exposed communication; or the two together), stored for later runs of the same stack on this machine, so a later
    run can tell a part that grew (bench/analysis/probe.py cost_entry). `probe`: the one the cell ran with."""
    from bench.analysis.probe import cost_entry

    path = cache_path(results_dir)
    if not records:
        return
    entry = cost_entry({**planned.cell, "nodes": planned.nodes}, probe, records, run_id, identity())
    if entry is not None:
        store(path, entry, "costs")


@dataclass(frozen=True)
class ProbeOutcome:
    result: ProbeResult | None
    seconds: float  # spent now (0 when reused)
    reused: bool
    note: str  # one line for the run's output
    in_cell_launch: bool = False  # measured in its cell's own launch: its seconds are within the cell's


def probe_cell(planned: PlannedCell, repeats: int = PROBE_REPEATS) -> PlannedCell:
    """The cell as the probe runs it: Horovod's worker (which, with no Horovod, is one plain process), short."""
    cell = {**planned.cell, "engine": "horovod", "warmup_steps": PROBE_WARMUP, "steps": PROBE_STEPS,
            "repeats": repeats, "jobs": 1}
    return replace(planned, cell=cell, cell_id=f"probe-{planned.cell_id}")


def ensure(planned: PlannedCell, results_dir: Path, python: str, threads: int, data_dir: Path | None = None,
           timeout_s: float = PROBE_TIMEOUT_S, now: float | None = None) -> ProbeOutcome:
    """A probe for the cell's compute settings on this machine: the stored one while it stands, else measured now
    and stored."""
    from bench.cells.units import IMAGES, unit_of_cell

    path = cache_path(results_dir)
    key = compute_key(planned.cell)
    unit = unit_of_cell(planned.cell) or IMAGES  # the probe's rates in the cell's own unit
    me, now = identity(), time.time() if now is None else now
    entries = load(path)
    hit = fresh(entries, key, me, now)
    if hit is not None:
        r = from_entry(hit)
        age = (now - r.measured_unix) / 3600
        return ProbeOutcome(r, 0.0, True, f"reused ({age:.1f} h old): {r.describe(unit)}")
    older = [e for e in entries if key_text(e.get("key") or {}) == key_text(key)]
    why = stale_reason(max(older, key=lambda e: e["measured_unix"]), me, now) if older else "none stored"
    started = time.monotonic()
    result, raw, problem = measure(planned, python, threads, data_dir, timeout_s, me)
    if result is None and raw:  # the copies ran but never measured at the same time (start-up skew under load):
        left = timeout_s - (time.monotonic() - started)  # once more, with twice the windows
        if left > 30:
            result, raw, problem = measure(planned, python, threads, data_dir, left, me, 2 * PROBE_REPEATS)
    return kept(path, key, result, raw, time.monotonic() - started, why, lambda r: r.describe(unit),
                problem + "; the cell's expected value falls back to N × its 1-worker rate")


def kept(path: Path, key: dict[str, Any], result: ProbeResult | None, raw: list[list[dict]], seconds: float,
         why: str, words, problem: str, prefix: str = "") -> ProbeOutcome:
    """A probe just measured (`result`; None: it failed, `problem` says why), stored under `key`, as its outcome.
    `words`: its line; `prefix`: what kind of probe the line is of ("engine: ")."""
    if result is None:
        return ProbeOutcome(None, seconds, False, f"{prefix}failed after {seconds:.0f} s ({problem})")
    result = replace(result, seconds=seconds)
    try:
        store(path, to_entry(key, result, raw))
    except OSError as e:
        return ProbeOutcome(result, seconds, False, f"{prefix}{words(result)}; not stored ({e.strerror or e})")
    return ProbeOutcome(result, seconds, False, f"{prefix}measured in {seconds:.0f} s ({why}): {words(result)}")


def measure(planned: PlannedCell, python: str, threads: int, data_dir: Path | None, timeout_s: float,
            me: dict[str, Any], repeats: int = PROBE_REPEATS) -> tuple[ProbeResult | None, list[list[dict]], str]:
    """Starts N copies of the cell's worker program at once, waits for all (or kills all at the deadline), and
    summarises their records."""
    from bench.backends.shared.cell_launch import probe_program

    workers = int(planned.cell["gpus"])
    probe = probe_cell(planned, repeats)
    with tempfile.TemporaryDirectory(prefix="bench-probe-") as scratch:
        shim = Path(scratch) / "shim" / "horovod"
        shim.mkdir(parents=True)
        (shim / "__init__.py").write_text(NO_HOROVOD)
        base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
        procs, outs, logs = [], [], []
        measured_at = time.time()
        busy0, mine0, t0 = busy_cpu_s(), children_cpu_s(), time.monotonic()
        try:
            for i in range(workers):
                out = Path(scratch) / f"p{i}.jsonl"
                argv, extra = probe_program(probe, out, threads, python, data_dir, shim.parent)
                # the copies' windows open and close together (models/measure/copies.py), however skewed start-up is
                env = {**base, **extra, COPIES_DIR_VAR: str(Path(scratch) / "copies"), COPIES_VAR: str(workers)}
                log = open(Path(scratch) / f"p{i}.log", "wb")
                logs.append(log)
                outs.append(out)
                procs.append(subprocess.Popen(list(argv), env=env, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True))
            deadline = time.monotonic() + timeout_s
            while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                time.sleep(0.1)
            late = [p for p in procs if p.poll() is None]
        finally:
            for p in procs:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            for log in logs:
                log.close()
        if late:
            return None, [], f"{len(late)} of {workers} processes still running after {timeout_s:.0f} s"
        failed = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
        if failed:
            i, code = failed[0]
            tail = (Path(scratch) / f"p{i}.log").read_text(errors="replace").strip().splitlines()[-1:] or [""]
            return None, [], f"process {i} exited {code}: {tail[0][:200]}"
        raw = [_records(out) for out in outs]
        busy1, mine1, wall = busy_cpu_s(), children_cpu_s(), time.monotonic() - t0
    # What else ran meanwhile: the machine's busy CPU less the probe's own processes (reaped: RUSAGE_CHILDREN), per
    # second. A probe beside other load measures the node as that load left it (docs/diagnose.md).
    others = None if busy0 is None or busy1 is None or wall <= 0 else \
        max(0.0, (busy1 - busy0) - (mine1 - mine0)) / wall
    result = summarize(raw, int(planned.cell["batch_per_gpu"]), measured_unix=measured_at, identity=me,
                       other_load=others)
    if result is None:
        return None, raw, "no window of one process overlapped every other's"
    return result, raw, ""


def busy_cpu_s() -> float | None:
    """CPU seconds every process on this machine has used (the `cpu` line of /proc/stat, idle and iowait left out)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    busy = sum(fields[:8]) - fields[3] - (fields[4] if len(fields) > 4 else 0)  # user..steal less idle, iowait
    return busy / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _records(path: Path) -> list[dict]:
    """A copy's successful measurements (the shared reader: a truncated last line keeps the lines before it)."""
    return [r for r in read_records(path)[0] if r.get("kind") == "measurement" and r.get("status") == "ok"]
