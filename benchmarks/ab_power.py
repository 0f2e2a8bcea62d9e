"""Detection, false alarms and time to decide of `bench ab`, measured: alternating tries of a real slowdown on side
B and of the same environment on both sides, each try a whole `bench ab` session (pairs added until it decides, or
its budget is spent) in its own store.

    .venv/bin/python benchmarks/ab_power.py --out /tmp/ab-power --tries 40 --deadline-min 150
    .venv/bin/python benchmarks/ab_power_summary.py /tmp/ab-power

The slowdown, by default, is a planted one of 10% per step: side B runs with the worker test hook
`BENCH_FAULT=slow:rank=0:step=1:frac=0.1` (models/measure/faults.py: each step spins 1/9 of the typical step, so the
throughput falls by 10%), the only difference between the sides. `--slow cpus=0.9` plants a CPU quota instead.

Bounded in count (--tries) and time (no try starts after --deadline-min); every try's exit code, time and store are
logged to OUT/tries.tsv as it ends. Run from the repository root (PYTHONPATH=. for a checkout that is not installed).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLANTED = "env.BENCH_FAULT=slow:rank=0:step=1:frac=0.1"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--matrix", default=str(ROOT / "benchmarks" / "ab-tiny.yaml"))
    p.add_argument("--tries", type=int, default=40, help="total tries, alternating slow / same")
    p.add_argument("--slow", default=PLANTED, help=f"side B of a slow try (default {PLANTED})")
    p.add_argument("--ab-args", default="", help="more `bench ab` options, e.g. '--budget 8m --min-effect 0.1'")
    p.add_argument("--deadline-min", type=float, default=150)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "tries.tsv"
    if not log.exists():
        log.write_text("try\tkind\tb\texit\tseconds\tstarted_utc\tstore\tjson\n")
    done = len(log.read_text().splitlines()) - 1  # a second call with the same --out goes on where it ended
    stop_at = time.time() + args.deadline_min * 60
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for i in range(done, args.tries):
        if time.time() > stop_at:
            print(f"deadline reached after {i} tries", flush=True)
            break
        kind = "slow" if i % 2 == 0 else "same"
        b = args.slow if kind == "slow" else "current"
        store, result = out / f"try{i:02d}-{kind}.db", out / f"try{i:02d}-{kind}.json"
        started = time.time()
        argv = [sys.executable, "-m", "bench", "ab", args.matrix, "--b", b, "--store", str(store),
                "--json", str(result), *args.ab_args.split()]
        with open(out / f"try{i:02d}-{kind}.log", "w") as f:
            code = subprocess.run(argv, env=env, cwd=str(ROOT), stdout=f, stderr=subprocess.STDOUT).returncode
        took = time.time() - started
        with open(log, "a") as f:
            f.write(f"{i}\t{kind}\t{b}\t{code}\t{took:.0f}\t{time.strftime('%H:%M:%S', time.gmtime(started))}"
                    f"\t{store}\t{result}\n")
        print(f"try {i} {kind}: exit {code}, {took:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
