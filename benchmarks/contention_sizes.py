"""Compute and allreduce on shared cores, per message size: what models/allreduce.py's contention measurement takes
at the largest size only, here at several, for Horovod over Gloo and over Open MPI on the emulated 2-node cluster
(one CPU per node).

Per size: the allreduce's median time alone and beside the probe kernel (models/allreduce.Probe, started async, the
probe runs until it completes), and the probe's rate meanwhile as a fraction of its rate alone (taken before Horovod
starts); and the probe's rate beside the idling engine. The slowest rank's figures.

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
ITERATIONS = 5


def worker(sizes: list[int]) -> None:
    import torch

    from models.allreduce import Probe

    torch.set_num_threads(1)
    probe = Probe(torch)
    alone = probe.rate()
    import horovod.torch as hvd

    hvd.init()
    token = torch.zeros(1)
    hvd.allreduce(token, name="warm")
    idle = probe.rate() / alone
    rows = []
    for size in sizes:
        buf = torch.ones(size // 4)
        hvd.allreduce_(buf, name=f"w{size}")
        quiet, loaded, rates = [], [], []
        for i in range(ITERATIONS):
            hvd.allreduce(token, name=f"q{size}.{i}")
            t0 = time.perf_counter()
            hvd.allreduce_(buf, name=f"a{size}")
            quiet.append(time.perf_counter() - t0)
        for i in range(ITERATIONS):
            hvd.allreduce(token, name=f"l{size}.{i}")
            handle = hvd.allreduce_async_(buf, name=f"c{size}")

            def done() -> bool:
                if not hvd.poll(handle):
                    return False
                hvd.synchronize(handle)
                return True
            elapsed, rate = probe.during(done)
            loaded.append(elapsed)
            rates.append(rate / alone)
        rows.append({"bytes": size, "alone_s": statistics.median(quiet), "loaded_s": statistics.median(loaded),
                     "during": statistics.median(rates)})
    mine = {"idle": idle, "rows": rows}
    everyone = hvd.allgather_object(mine)
    if hvd.rank() == 0:
        worst = [{"bytes": r["bytes"], "alone_s": max(e["rows"][i]["alone_s"] for e in everyone),
                  "loaded_s": max(e["rows"][i]["loaded_s"] for e in everyone),
                  "during": min(e["rows"][i]["during"] for e in everyone)} for i, r in enumerate(rows)]
        print("RESULT " + json.dumps({"idle": min(e["idle"] for e in everyone), "rows": worst}), flush=True)
    hvd.shutdown()


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
    lines = ["| link | launcher | size B | alone ms | beside the probe ms | × | probe during | probe beside idle engine |",
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
                result = json.loads(found[0])
                for r in result["rows"]:
                    lines.append(f"| {rate} | {launcher} | {r['bytes']:,} | {1e3 * r['alone_s']:.1f} | "
                                 f"{1e3 * r['loaded_s']:.1f} | {r['loaded_s'] / r['alone_s']:.2f} | "
                                 f"{r['during']:.2f} | {result['idle']:.2f} |")
    finally:
        cluster.down()
    print(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()) + f": benchmarks/contention_sizes.py --rates "
          f"{args.rates} --sizes {args.sizes}\n\n" + "\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
