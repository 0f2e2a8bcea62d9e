"""What holding freed memory (models/measure/allocator.py) does to the PyTorch workload on this CPU.

Runs the workload as one process, with and without `--no-hold-freed-memory`, interleaved round by round, and
prints images/sec and the minor page faults and system CPU time the process took:

    .venv/bin/python benchmarks/allocator_effect.py --batch 8 32 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORKLOAD = Path(__file__).resolve().parent.parent / "models" / "workloads" / "resnet50" / "pytorch_worker.py"


def run(batch: int, a, hold: bool) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / "r.jsonl"
        cmd = [sys.executable, str(WORKLOAD), "--batch-size", str(batch), "--image-size", "224", "--threads",
               str(a.threads), "--warmup-steps", "2", "--steps", str(a.steps), "--repeats", "2", "--out", str(rec),
               "--hold-freed-memory" if hold else "--no-hold-freed-memory"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
        if out.returncode or not rec.exists():
            raise SystemExit(f"workload failed:\n{out.stderr[-2000:]}")
        rate = statistics.median(json.loads(line)["samples_per_sec"] for line in rec.read_text().splitlines())
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"samples_per_sec": rate, "minor_faults": after.ru_minflt - before.ru_minflt,
            "system_s": after.ru_stime - before.ru_stime}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, nargs="+", default=[8, 32])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=4, help="steps per measured window (2 windows per run)")
    a = p.parse_args()
    results = {(b, hold): [] for b in a.batch for hold in (True, False)}
    for r in range(a.rounds):
        for (batch, hold), runs in results.items():
            runs.append(run(batch, a, hold))
            print(f"round {r + 1}: batch {batch} {'held' if hold else 'glibc default'}: "
                  f"{runs[-1]['samples_per_sec']:.2f} img/s", flush=True)
    print(f"\nResNet-50 224x224, {a.threads} threads, channels-last fp32, 1 process; medians of {a.rounds} rounds")
    for batch in a.batch:
        held, default = (statistics.median(x["samples_per_sec"] for x in results[batch, h]) for h in (True, False))
        for hold, rate in ((True, held), (False, default)):
            runs = results[batch, hold]
            print(f"batch {batch:>3} {'held memory' if hold else 'glibc default':<14} {rate:7.2f} img/s  "
                  f"page faults/run {statistics.median(x['minor_faults'] for x in runs):>10,.0f}  "
                  f"system CPU/run {statistics.median(x['system_s'] for x in runs):6.1f} s")
        print(f"batch {batch:>3} held / default: {held / default:.2f}x")


if __name__ == "__main__":
    main()
