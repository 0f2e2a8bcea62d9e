"""Detection and false-alarm rates of `bench ab`, measured: alternating tries of a real slowdown (side B under a CPU
quota) and of the same environment on both sides, each try a whole `bench ab` session in its own store.

    .venv/bin/python benchmarks/ab_power.py --out /tmp/ab-power --tries 20 --pairs 5 --cpu-weight 10 \
        --slow cpus=0.9 --deadline-min 75          # then: benchmarks/ab_power_summary.py /tmp/ab-power

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


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--matrix", default=str(ROOT / "benchmarks" / "ab-tiny.yaml"))
    p.add_argument("--tries", type=int, default=20, help="total tries, alternating slow / same")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--cpu-weight", default="10")
    p.add_argument("--slow", default="cpus=0.9", help="side B of a slow try")
    p.add_argument("--deadline-min", type=float, default=75)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "tries.tsv"
    if not log.exists():
        log.write_text("try\tkind\tb\texit\tseconds\tstarted_utc\tstore\n")
    stop_at = time.time() + args.deadline_min * 60
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for i in range(args.tries):
        if time.time() > stop_at:
            print(f"deadline reached after {i} tries", flush=True)
            break
        kind = "slow" if i % 2 == 0 else "same"
        b = args.slow if kind == "slow" else "current"
        store = out / f"try{i:02d}-{kind}.db"
        started = time.time()
        argv = [sys.executable, "-m", "bench", "ab", args.matrix, "--b", b, "--pairs", str(args.pairs),
                "--store", str(store), "--json", str(out / f"try{i:02d}-{kind}.json")]
        if args.cpu_weight:
            argv += ["--cpu-weight", args.cpu_weight]
        with open(out / f"try{i:02d}-{kind}.log", "w") as f:
            code = subprocess.run(argv, env=env, cwd=str(ROOT), stdout=f, stderr=subprocess.STDOUT).returncode
        took = time.time() - started
        with open(log, "a") as f:
            f.write(f"{i}\t{kind}\t{b}\t{code}\t{took:.0f}\t{time.strftime('%H:%M:%S', time.gmtime(started))}"
                    f"\t{store}\n")
        print(f"try {i} {kind}: exit {code}, {took:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
