"""Collective sweeps (allreduce by default) on the emulated 2-node cluster (tests/cluster.py), unshaped and with each
node's link shaped by tc to a rate: busbw per size and the fitted α/β (allreduce), and whether busbw stays under the
rate (it must).

    sudo PYTHONPATH=$PWD .venv/bin/python benchmarks/collectives_shaped.py [--rates 1gbit,200mbit] [--max-bytes N]
        [--op allreduce|allgather|reduce_scatter|broadcast|sendrecv] [--mpi gloo,openmpi]

sendrecv runs through torch.distributed only (engine native); the other ops through Horovod.

Needs root (network namespaces). Each rate runs in a directory of its own (the cells' ids are the same at every rate:
the rate is the fabric, not a cell setting), under /tmp/bench-collectives-shaped/<rate>.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.analysis.collectives import fit_stacks  # noqa: E402
from bench.commands.shared import DEFAULT_STORE  # noqa: E402
from bench.store import Store  # noqa: E402
from models.registry.collectives import COLLECTIVES  # noqa: E402
from tests import cluster as emulated  # noqa: E402

MATRIX = """name: collectives-shaped
workload:
  model: {op}
  engine: {engine}
  max_message_bytes: {max_bytes}
  warmup_steps: 1
  steps: {steps}
  repeats: 1
  threads: 1
  workers_per_node: 1
axes:
  gpu: [cpu]
  mpi: [{mpis}]
  gpus: [2]
backend:
  name: hosts
  timeout_s: 900
  hosts:
    hosts: [node1, node2]
    ssh: {{config: {ssh_config}}}
    iface: {iface}
    workdir: {workdir}
"""


def bucket_bytes(rate_bytes_per_s: float) -> float:
    """scripts/testcluster.sh's tbf bucket: 4 ms of the rate, at least 64 KiB. It refills while the ranks wait at
    the barrier, so each iteration may send that much at line speed."""
    return max(65536.0, rate_bytes_per_s / 250)


def rate_bound(nbytes: int, world: int, rate_bytes_per_s: float, op: str = "allreduce") -> float | None:
    """The most busbw a tbf link allows the op (a ring allreduce by default) on nbytes: rate x sent / (sent -
    bucket), sent = what each rank puts on its link (the op's bus factor of the message); None when the bucket alone
    carries the message (no bound from the rate)."""
    sent = COLLECTIVES[op]["bus_factor"](world) * nbytes
    burst = bucket_bytes(rate_bytes_per_s)
    return rate_bytes_per_s * sent / (sent - burst) if sent > burst else None


def bits_per_s(rate: str) -> float:
    units = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
    number = rate.removesuffix("bit")
    scale = units.get(number[-1], 1)
    return float(number.rstrip("kmgt")) * scale


def positive_rate(text: str) -> bool:
    """Whether `text` is a tc rate above zero, such as 500mbit."""
    try:
        return bits_per_s(text) > 0
    except (ValueError, IndexError):
        return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", default="1gbit,200mbit", help="comma-separated tc rates; the unshaped run comes first")
    p.add_argument("--max-bytes", type=int, default=102_228_128,
                   help="largest message (default: ResNet-50's gradients)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mpi", default="gloo,openmpi")
    p.add_argument("--op", default="allreduce", choices=tuple(COLLECTIVES), help="the collective swept")
    args = p.parse_args()
    engine = COLLECTIVES[args.op].get("engines", ("horovod",))[0]
    bad = next((r for r in filter(None, args.rates.split(",")) if not positive_rate(r)), None)
    if bad is not None:
        print(f"collectives_shaped: --rates: {bad!r} is not a positive tc rate such as 500mbit", file=sys.stderr)
        return 2
    reason = emulated.unavailable()
    if reason:
        print(f"no emulated cluster here: {reason}", file=sys.stderr)
        return 2
    cluster = emulated.start(2)
    base = Path("/tmp/bench-collectives-shaped")
    failed = False
    try:
        for rate in [None, *filter(None, args.rates.split(","))]:
            cluster.shape(rate) if rate else cluster.shape()
            tmp = base / (rate or "unshaped")
            tmp.mkdir(parents=True, exist_ok=True)
            (tmp / DEFAULT_STORE).unlink(missing_ok=True)  # where `bench run` in tmp writes
            (tmp / "m.yaml").write_text(MATRIX.format(op=args.op, engine=engine, max_bytes=args.max_bytes,
                                                      steps=args.steps, mpis=args.mpi,
                                                      ssh_config=cluster.ssh_config, iface=cluster.iface,
                                                      workdir=tmp / "work"))
            env = cluster.env({"PYTHONPATH": str(ROOT)})
            done = cluster.run("node1", [sys.executable, "-m", "bench", "run", "m.yaml"], env=env, timeout=1800,
                               cwd=tmp)
            if done.returncode != 0:
                print(f"{rate or 'unshaped'}: bench run failed:\n{done.stderr[-2000:]}")
                failed = True
                continue
            with Store(tmp / DEFAULT_STORE, read_only=True) as store:
                rows = store.collective_rows()
            limit = bits_per_s(rate) / 8 if rate else None
            print(f"\n## {rate or 'unshaped'}" + (f" (tc rate {limit / 1e6:.1f} MB/s)" if limit else ""))
            print("| mpi | bytes | time median (ms) | busbw (MB/s) | busbw / rate | bound (tbf bucket) |")
            print("|---|---|---|---|---|---|")
            for r in rows:
                bound = rate_bound(r["bytes"], r["world_size"], limit, args.op) if limit else None
                share = f"{r['busbw_bytes_per_s'] / limit:.2f}" if limit else "—"
                print(f"| {r['mpi']} | {r['bytes']:,} | {r['time_median_s'] * 1e3:.2f} | "
                      f"{r['busbw_bytes_per_s'] / 1e6:.1f} | {share} | "
                      f"{f'{bound / limit:.2f}x rate' if bound else ('bucket-sized' if limit else '—')} |")
                if bound is not None and r["busbw_bytes_per_s"] > bound:
                    print(f"BUSBW ABOVE WHAT THE LINK ALLOWS: {r['mpi']} {r['bytes']} bytes")
                    failed = True
            # Fitted over the sizes the bucket is small beside (8x): below them the curve shows the bucket.
            wire = [r for r in rows if not limit or r["bytes"] >= 8 * bucket_bytes(limit)]
            for stack, fit in fit_stacks(wire).items():
                print(f"fit {stack} over {fit.sizes} sizes: {fit.describe()}")
    finally:
        cluster.shape()
        cluster.down()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
