"""Side by side on this machine: the PyTorch workload vs Horovod's own examples/pytorch/pytorch_synthetic_benchmark.py.

Same settings for both (ResNet-50, 224x224, batch 8 per worker, 2 threads, fp32, NCHW, one worker under mpirun),
then the workload with its channels-last default and with bf16 autocast. One more variant turns off the workload's
allocator setting (models/measure/allocator.py), to show how much of the difference it makes. Variants are interleaved
round by round so machine drift hits all of them alike; medians and ratios to the peer are printed (and written
with --json).

    .venv/bin/python benchmarks/compare_peer_pytorch.py \\
        --peer /path/to/horovod/examples/pytorch/pytorch_synthetic_benchmark.py

The peer needs torchvision (`pip install --no-deps torchvision==0.28.0`; `make bench` does it); it is not part of
this repository.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "models" / "workloads" / "resnet50" / "pytorch_worker.py"
SHIM = Path(__file__).resolve().parent / "torchvision_shim.py"


def mpirun(threads: int) -> list[str]:
    argv = ["mpirun", "-np", "1", "--bind-to", "none", "-x", f"OMP_NUM_THREADS={threads}"]
    return argv + (["--allow-run-as-root"] if os.geteuid() == 0 else [])


def run_peer(peer: str, a) -> float:
    cmd = [*mpirun(a.threads), sys.executable, str(SHIM), peer, "--no-cuda", "--batch-size", str(a.batch),
           "--num-warmup-batches", str(a.warmup), "--num-batches-per-iter", str(a.steps),
           "--num-iters", str(a.windows)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    m = re.search(r"Img/sec per CPU: ([\d.]+)", out.stdout)
    if not m:
        raise SystemExit(f"peer failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return float(m.group(1))


def run_workload(a, *flags: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / "r.jsonl"
        cmd = [*mpirun(a.threads), sys.executable, str(WORKLOAD), "--batch-size", str(a.batch), "--image-size", "224",
               "--threads", str(a.threads), "--warmup-steps", str(a.warmup), "--steps", str(a.steps),
               "--repeats", str(a.windows), "--out", str(rec), *flags]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if out.returncode or not rec.exists():
            raise SystemExit(f"workload failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
        return statistics.median(json.loads(line)["samples_per_sec"] for line in rec.read_text().splitlines())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer", required=True, help="path to Horovod's pytorch_synthetic_benchmark.py")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=5, help="steps per window (the peer's batches per iteration)")
    p.add_argument("--windows", type=int, default=3, help="windows per run (the peer's iterations)")
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args()
    variants = {
        "peer: horovod pytorch_synthetic_benchmark (NCHW, fp32)": lambda: run_peer(a.peer, a),
        "bench workload, same settings (NCHW, fp32)": lambda: run_workload(a, "--no-channels-last"),
        "  the same, glibc's default malloc (no held memory)": lambda: run_workload(a, "--no-channels-last",
                                                                                  "--no-hold-freed-memory"),
        "bench workload, fp32 default (channels-last)": lambda: run_workload(a, "--channels-last"),
        "bench workload, bf16 autocast, channels-last": lambda: run_workload(a, "--channels-last",
                                                                             "--precision", "bf16"),
    }
    results: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(a.rounds):
        for name, run in variants.items():
            results[name].append(run())
            print(f"round {r + 1}: {name}: {results[name][-1]:.2f} img/s", flush=True)
    peer = statistics.median(next(iter(results.values())))
    print(f"\nResNet-50 224x224, batch {a.batch}, {a.threads} threads, 1 worker; medians of {a.rounds} rounds")
    summary = {}
    for name, values in results.items():
        med = statistics.median(values)
        summary[name] = {"median_samples_per_sec": med, "runs": values, "ratio_to_peer": med / peer}
        print(f"{name:<52} {med:8.2f} img/s   {med / peer:5.2f}x peer   (runs: "
              f"{', '.join(f'{v:.2f}' for v in values)})")
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
