"""Does an engine probe give the same rate launch after launch, and where does a slow launch's CPU go? The engine
probe of one 2-worker ResNet-50 CPU cell (the default matrix's settings), launched --launches times in a row under
each --mpi flavour, with every thread of the machine's processes sampled from /proc once a second: for each launch,
the probe's rate a rank, its windows, and each rank's threads' CPU-s/s over its measured windows (the main thread,
which computes, and the engine's: Horovod's background loop, the MPI library's own).

    .venv/bin/python benchmarks/engine_probe_modes.py --mpi mpich openmpi --launches 6
    .venv/bin/python benchmarks/engine_probe_modes.py --mpi mpich --launches 4 --cell
    .venv/bin/python benchmarks/engine_probe_modes.py --mpi mpich --first-runs 6

--first-runs K: instead, K first runs of the cell as a user makes them (`bench run` in a new folder, then
`bench status`): the first engine probe's rate, the probes measured again after the cell, and the verdict.

Prints one JSON line a launch (and appends it to --out when given). docs/diagnose.md, "An engine probe in two
modes", quotes its figures. Run from the repository root with nothing else running: a co-runner's threads share
the cores the probe measures.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.backends.local import engine_probe  # noqa: E402
from bench.backends.local.backend import LocalBackend  # noqa: E402
from bench.backends.local.compute_probe import identity  # noqa: E402
from bench.planning.matrix import load_matrix_text  # noqa: E402
from bench.planning.plan import plan_cells  # noqa: E402

MATRIX = """name: engine-probe-modes
workload: {{model: resnet50, batch_per_gpu: 16, image_size: 64, warmup_steps: 3, steps: 8, repeats: 5, threads: 1,
            channels_last: false}}
axes: {{gpu: [cpu], framework: [pytorch], mpi: [{mpi}], ib: [false], gpus: [2]}}
"""
# Steps a window: longer than the probe's own (3 at ResNet-50's 0.43 s step here), so that sampling the threads once
# a second puts several samples inside the windows. The modes are the same at 3 steps: the measured series' probes
# read 22.8 and 33.4 img/s a rank (docs/diagnose.md).
STEPS = 17
TICK = os.sysconf("SC_CLK_TCK")


def threads_cpu() -> dict[tuple[int, int], tuple[str, float]]:
    """(pid, tid) → (process name, CPU seconds so far) for every thread of every process but this one."""
    out = {}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        if pid == os.getpid():
            continue
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            out[(pid, int(tid))] = (name, (int(fields[11]) + int(fields[12])) / TICK)  # utime + stime
    return out


def one_launch(planned, backend, results: Path) -> dict:
    samples: list[tuple[float, dict]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.time(), threads_cpu()))
            stop.wait(1.0)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result, raw, problem = engine_probe.measure(planned, backend, results, engine_probe.ENGINE_TIMEOUT_S,
                                                    identity(), STEPS)
    finally:
        stop.set()
        sampler.join()
    if result is None:
        return {"rate": None, "problem": problem}
    begin = min(w["start_unix"] for rank in raw for w in rank)
    end = max(w["end_unix"] for rank in raw for w in rank)
    inside = [(t, s) for t, s in samples if begin <= t <= end]
    if len(inside) < 2:
        return {"rate": result.rate, "problem": "windows shorter than two samples"}
    (t0, s0), (t1, s1) = inside[0], inside[-1]
    per_process: dict[int, list[float]] = {}
    for (pid, tid), (name, cpu) in s1.items():
        if (pid, tid) in s0 and name.startswith("python"):
            used = (cpu - s0[(pid, tid)][1]) / (t1 - t0)
            if used >= 0.02:
                per_process.setdefault(pid, []).append(round(used, 2))
    ranks = [sorted(v, reverse=True) for v in per_process.values()]
    return {"rate": round(result.rate, 1), "windows": [round(w["samples_per_sec"], 1) for w in raw[0]],
            "threads_cpu_s_per_s": ranks, "sampled_s": round(t1 - t0, 1)}


VERDICT = re.compile(r"/2w .*: measured ([\d.,]+) img/s, expected ([\d.,]+) .*?\): "
                     r"((?:as|above|below) expected[^;:\n]*)")
PROBE = re.compile(r"engine(, again)?: measured in (\d+) s .*?no gradient traffic: ([\d.]+) img/s")


def first_run(mpi: str, folder: Path) -> dict:
    """One first run of the cell in `folder`: what `bench run` printed of its engine probes, what `bench status`
    said of the cell."""
    (folder / "m.yaml").write_text(MATRIX.format(mpi=mpi) + "backend: {name: local, timeout_s: 900}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "bench", "run", "m.yaml"], cwd=folder, env=env, capture_output=True,
                         text=True)
    status = subprocess.run([sys.executable, "-m", "bench", "status"], cwd=folder, env=env, capture_output=True,
                            text=True)
    probes = [(bool(m[1]), int(m[2]), float(m[3])) for m in PROBE.finditer(run.stdout + run.stderr)]
    v = VERDICT.search(status.stdout)
    return {"exit": run.returncode, "first_probe": next((r for again, _, r in probes if not again), None),
            "again": [r for again, _, r in probes if again], "again_s": sum(t for again, t, _ in probes if again),
            "measured": v and float(v[1].replace(",", "")), "expected": v and float(v[2].replace(",", "")),
            "verdict": v and v[3]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mpi", nargs="+", default=["mpich"], help="flavours (default: mpich)")
    ap.add_argument("--launches", type=int, default=6, help="launches a flavour (default 6)")
    ap.add_argument("--out", type=Path, help="also append each launch's line to this file")
    ap.add_argument("--first-runs", type=int, default=0, help="K first runs of the cell through bench run instead")
    ap.add_argument("--cell", action="store_true",
                    help="launch the cell itself instead (gradients averaged), the same way and sampled the same")
    args = ap.parse_args()
    if not 1 <= args.launches <= 20:
        print("engine_probe_modes: --launches must be 1 to 20", file=sys.stderr)
        return 2
    if not 0 <= args.first_runs <= 20:
        print("engine_probe_modes: --first-runs must be 0 to 20", file=sys.stderr)
        return 2
    for mpi in args.mpi if args.first_runs else []:
        for k in range(args.first_runs):
            with tempfile.TemporaryDirectory(prefix="engine-probe-first-run-") as folder:
                line = json.dumps({"mpi": mpi, "what": "first run", "run": k, **first_run(mpi, Path(folder))})
            print(line, flush=True)
            if args.out:
                with args.out.open("a") as f:
                    f.write(line + "\n")
    if args.first_runs:
        return 0
    if args.cell:
        # engine_probe.measure asks the workers for the probe through this variable: pointed at one no worker
        # reads, the same launch runs the cell as `bench run` would (its windows sized as the probe's here)
        engine_probe.ENV = "BENCH_ENGINE_PROBE_MODES_CELL"
    with tempfile.TemporaryDirectory(prefix="engine-probe-modes-") as scratch:
        results = Path(scratch)
        backend = LocalBackend(results, engine_probe.ENGINE_TIMEOUT_S)
        for mpi in args.mpi:
            planned = [p for p in plan_cells(load_matrix_text(MATRIX.format(mpi=mpi), "modes.yaml").cells(),
                                             backend) if p.runnable]
            if not planned:
                print(f"engine_probe_modes: the {mpi} cell does not run here (bench plan says why)", file=sys.stderr)
                return 2
            for k in range(args.launches):
                line = json.dumps({"mpi": mpi, "what": "cell" if args.cell else "engine probe", "launch": k,
                                   **one_launch(planned[0], backend, results)})
                print(line, flush=True)
                if args.out:
                    with args.out.open("a") as f:
                        f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
