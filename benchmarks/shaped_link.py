"""The same 2-node cell on an unshaped and on a shaped link between two emulated nodes: the shaped one must be
slower, and by about what the rate predicts.

Brings up a 2-node cluster (scripts/testcluster.sh, state /tmp/bench-shaped-link, prefix bsl: the paths
benchmarks/matrix-shaped-link.yaml names), runs that matrix's one cell through the hosts backend from node1 with the
links unshaped, then shaped to --rate, and tears the cluster down, failed or not. Shaping is not a cell axis (the cell
and its id are the same both times): each condition gets a store of its own, <out>/unshaped/bench.db and
<out>/<rate>/bench.db, and `bench report --store` on each shows its figure. Prints both medians and their ratio.

    .venv/bin/python benchmarks/shaped_link.py [--rate 200mbit] [--out /tmp/shaped-link]   (root)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.store import Store  # noqa: E402
from tests import cluster as emulated  # noqa: E402  (the driver the multi-node tests use)

STATE = Path("/tmp/bench-shaped-link")
MATRIX = ROOT / "benchmarks" / "matrix-shaped-link.yaml"


def measure(cluster: emulated.Cluster, store: Path, python: str = sys.executable) -> list[float]:
    """One `bench run` of the matrix on node1 into `store`; the cell's images/s, one per repeat."""
    store.parent.mkdir(parents=True, exist_ok=True)
    done = cluster.run("node1", [python, "-m", "bench", "run", str(MATRIX), "--store", str(store)],
                       env=cluster.env({"PYTHONPATH": str(ROOT)}), timeout=900, cwd=store.parent)
    rates = []
    if store.exists():  # a run refused before it began leaves no store
        with Store(store, read_only=True) as db:
            rates = db.ok_samples_per_sec()
    if done.returncode != 0 or not rates:
        raise RuntimeError(f"bench run into {store} failed:\n{done.stderr[-3000:]}")
    return rates


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", default="200mbit", help="tc rate of the shaped link (default 200mbit)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/shaped-link"), help="one store per condition under here")
    args = ap.parse_args()
    cluster = emulated.start(2, state=STATE, prefix="bsl")
    try:
        figures = {}
        for label, rate in (("unshaped", None), (args.rate, args.rate)):
            cluster.shape(rate)
            figures[label] = measure(cluster, (args.out / label / "bench.db").resolve())
    finally:
        cluster.down()
    base, shaped = (statistics.median(v) for v in figures.values())
    print(f"{time.strftime('%Y-%m-%d')}: 2-node cell of {MATRIX.name} (openmpi, 1 CPU worker per node)")
    for label, rates in figures.items():
        print(f"  {label:>10}: {statistics.median(rates):6.2f} img/s (median of {', '.join(f'{r:.2f}' for r in rates)};"
              f" bench report --store {args.out / label / 'bench.db'})")
    print(f"  shaped / unshaped = {shaped / base:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
