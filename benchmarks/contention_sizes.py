"""Compute and allreduce on shared cores, per message size: what models/workloads/collectives/contention.py measures at
the sweep's largest size only, here at several, for Horovod over Gloo and over Open MPI on the emulated 2-node cluster
(one CPU per node).

Per size, with the sweep worker's own code (models/workloads/collectives/sweep_worker.py's time_size,
models/workloads/collectives/contention.py): the allreduce's median time alone and beside the probe kernel (started
async, the probe runs until it completes), the probe's rate meanwhile and beside the idling engine, as fractions of its
rate alone (taken before Horovod starts). The slowest rank's figures.

    .venv/bin/python benchmarks/contention_sizes.py [--rates none,500mbit] [--sizes 1048576,16777216,102228128]

Root (network namespaces); the cluster lives in /tmp/bench-contention and is torn down at the end, failed or not.
With --worker it is the per-rank program (run under horovodrun by the driver).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STATE = Path("/tmp/bench-contention")
ITERATIONS = 5  # timed allreduces per size, alone and under load (the sweep bounds the latter to 3-5)


def worker(sizes: list[int]) -> None:
    """One rank: the sweep worker's own pieces (models/workloads/collectives/sweep_worker.py,
    models/workloads/collectives/contention.py), its contention measurement at every size."""
    import torch

    from models.workloads.collectives.contention import Probe, contention
    from models.workloads.collectives.sweep_worker import Engine, parse_args, time_size

    args = parse_args(["--steps", str(ITERATIONS), "--warmup-steps", "1", "--threads", "1"])
    torch.set_num_threads(args.threads)
    probe = Probe(torch)
    alone = probe.rate()  # before the engine starts, as the sweep takes it
    engine = Engine(args, torch)
    rows = []
    for size in sizes:
        quiet, _ = time_size(engine, torch, "allreduce", size, args)
        rows.append({"bytes": size, "alone_s": statistics.median(quiet),
                     **contention(engine, torch, probe, alone, size, args)})
    everyone = engine.comm.allgather_object(rows)
    if engine.comm.rank == 0:  # the slowest rank's figures, as the sweep's rows hold them
        worst = [{"bytes": size, "alone_s": max(r[i]["alone_s"] for r in everyone),
                  "loaded_s": max(r[i]["time"] for r in everyone), "during": min(r[i]["during"] for r in everyone),
                  "idle": min(r[i]["idle"] for r in everyone)} for i, size in enumerate(sizes)]
        print("RESULT " + json.dumps(worst), flush=True)
    engine.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="none,500mbit", help="tc rates, `none` for the unshaped link")
    ap.add_argument("--sizes", default="1048576,16777216,102228128", help="allreduce sizes in bytes")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(s < 4 or s % 4 for s in sizes):
        print(f"contention_sizes: --sizes: {args.sizes!r} is not a list of positive multiples of 4", file=sys.stderr)
        return 2
    from benchmarks.collectives_shaped import positive_rate

    bad = next((r for r in args.rates.split(",") if r != "none" and not positive_rate(r)), None)
    if bad is not None:
        print(f"contention_sizes: --rates: {bad!r} is neither `none` nor a positive tc rate such as 500mbit",
              file=sys.stderr)
        return 2
    if args.worker:
        worker(sizes)
        return 0
    import os

    from tests import cluster as emulated

    if os.geteuid() != 0:
        print("contention_sizes: needs root (network namespaces, sshd)", file=sys.stderr)
        return 2
    python = sys.executable
    horovodrun = str(Path(python).parent / "horovodrun")
    cluster = emulated.start(2, pin=True, state=STATE, prefix="bcon")
    lines = ["| link | launcher | size B | alone ms | beside the probe ms | × | probe during "
             "| probe beside idle engine |",
             "|---|---|---|---|---|---|---|---|"]
    failed = False
    try:
        for rate in args.rates.split(","):
            cluster.shape(None if rate == "none" else rate)
            for flag, launcher in (("--gloo", "gloo"), ("--mpi", "openmpi")):
                argv = [horovodrun, flag, "-np", "2", "-H", "node1:1,node2:1", "-p", "22", "--network-interface",
                        "eth1", python, str(Path(__file__).resolve()), "--worker", "--sizes", args.sizes]
                done = cluster.run("node1", argv, env=cluster.env({"OMP_NUM_THREADS": "1"}), timeout=900)
                found = [ln.split("RESULT ", 1)[1] for ln in done.stdout.splitlines() if "RESULT " in ln]
                if done.returncode != 0 or not found:
                    print(f"{rate} {launcher}: exit {done.returncode}\n{done.stderr[-2000:]}", file=sys.stderr)
                    failed = True
                    continue
                for r in json.loads(found[0]):
                    lines.append(f"| {rate} | {launcher} | {r['bytes']:,} | {1e3 * r['alone_s']:.1f} | "
                                 f"{1e3 * r['loaded_s']:.1f} | {r['loaded_s'] / r['alone_s']:.2f} | "
                                 f"{r['during']:.2f} | {r['idle']:.2f} |")
    finally:
        cluster.down()
    print(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()) + f": benchmarks/contention_sizes.py --rates "
          f"{args.rates} --sizes {args.sizes}\n\n" + "\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
