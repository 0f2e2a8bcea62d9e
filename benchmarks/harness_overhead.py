"""Harness overhead: the wall time `bench run` adds around a cell's own launcher process.

Runs one CPU cell both ways, interleaved: (a) `python -m bench run m.yaml --rerun` (CLI start, plan, store,
progress, collection, kill sweep), (b) the exact launcher command `bench plan --show-commands` prints for it.
Overhead = median(a) - median(b), reported as a share of (a). Target: <= 3%.

    .venv/bin/python benchmarks/harness_overhead.py [--rounds 3] [--steps 8] [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MATRIX = """
name: overhead
workload: {{batch_per_gpu: 16, image_size: 64, warmup_steps: 3, steps: {steps}, repeats: {repeats}, threads: 1,
           channels_last: false}}
axes: {{gpu: [cpu], mpi: [openmpi], gpus: [2]}}
"""


def timed(argv: list[str], cwd: Path, env: dict | None = None) -> float:
    t = time.perf_counter()
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - t
    if out.returncode:
        raise SystemExit(f"{argv[:4]} failed:\n{out.stdout[-1500:]}\n{out.stderr[-1500:]}")
    return elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "m.yaml").write_text(MATRIX.format(steps=a.steps, repeats=a.repeats))
        plan = subprocess.run([sys.executable, "-m", "bench", "plan", "m.yaml", "--format", "json",
                               "--show-commands"], cwd=d, capture_output=True, text=True, check=True)
        command = json.loads(plan.stdout)[0]["command"]
        argv = command["argv"]
        out = Path(argv[argv.index("--out") + 1])
        out.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **command["env"], "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        harness, direct = [], []
        for r in range(a.rounds):
            # --no-probe: the compute probe before a co-located cell is its own cost, reported by `bench run` and
            # measured in docs/measurements.md ("Compute probe"); this measures the harness around one cell.
            harness.append(timed([sys.executable, "-m", "bench", "run", "m.yaml", "--rerun", "--no-probe"], d))
            out.unlink(missing_ok=True)
            direct.append(timed(argv, d, env))
            print(f"round {r + 1}: bench run {harness[-1]:.2f} s, launcher alone {direct[-1]:.2f} s", flush=True)
    h, dl = statistics.median(harness), statistics.median(direct)
    print(f"\nmedian bench run {h:.2f} s, launcher alone {dl:.2f} s: harness adds {h - dl:.2f} s "
          f"= {100 * (h - dl) / h:.1f}% of the cell's wall time")


if __name__ == "__main__":
    main()
