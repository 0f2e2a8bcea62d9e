"""Measured vs predicted scaling efficiency of 2-node ResNet-50 cells on links shaped to known rates.

For each link condition (unshaped first, then each --rates value) the script shapes every node's link with tc, runs
matrix-fabric.yaml (1-node and 2-node ResNet-50 cells and the allreduce sweep, Horovod over Gloo and over Open MPI)
through the hosts backend from node1 into a store of its own, fits α/β to the sweep and sets each 2-node cell's
measured efficiency beside the what-if model's two predictions: calibrated (the fitted α/β of the same stack at the
same rate) and data sheet (the rate tc sets). Nothing is fitted to the training cells (bench/analysis/calibration.py).

    .venv/bin/python benchmarks/prediction_shaped.py [--rates 2gbit,500mbit,200mbit] [--out /tmp/bench-prediction]

Root (network namespaces). The cluster (scripts/testcluster.sh up 2 --pin: one CPU per node) lives in
/tmp/bench-fabric, the paths matrix-fabric.yaml names, and is torn down at the end, failed or not. Writes
<out>/<condition>/bench.db (`bench report --store` on any of them shows the same comparison in its prediction
section), <out>/prediction.md and <out>/prediction.json. Exit 1 when a run failed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.analysis.calibration import compare, rated_link  # noqa: E402
from bench.analysis.collectives import fit_stacks, training_only  # noqa: E402
from bench.analysis.scaling import cell_summary, latest_complete, scaling  # noqa: E402
from bench.store import Store  # noqa: E402
from benchmarks.collectives_shaped import bits_per_s, bucket_bytes  # noqa: E402
from tests import cluster as emulated  # noqa: E402  (the driver the multi-node tests use)

STATE = Path("/tmp/bench-fabric")
MATRIX = ROOT / "matrix-fabric.yaml"


def run_condition(cluster: emulated.Cluster, rate: str | None, out: Path) -> list[dict]:
    """One `bench run` of the matrix at one link condition; its comparison rows."""
    label = rate or "unshaped"
    cluster.shape(rate)
    store = (out / label / "bench.db").resolve()
    store.parent.mkdir(parents=True, exist_ok=True)
    store.unlink(missing_ok=True)
    started = time.monotonic()
    done = cluster.run("node1", [sys.executable, "-m", "bench", "run", str(MATRIX), "--store", str(store)],
                       env=cluster.env({"PYTHONPATH": str(ROOT)}), timeout=3600, cwd=store.parent)
    (store.parent / "bench-run.log").write_text(done.stdout + done.stderr)
    print(f"{label}: bench run exit {done.returncode} in {time.monotonic() - started:.0f} s", flush=True)
    with Store(str(store), create=False) as db:
        records, sweeps = db.dataframe(record_json=False), db.collectives()
    table = scaling(cell_summary(training_only(latest_complete(records))))
    limit = bits_per_s(rate) / 8 if rate else None
    # On a shaped link the sizes tbf's bucket carries at line speed say nothing about the rate: fit over those at
    # least 8x the bucket (docs/collectives.md).
    wire = sweeps[sweeps["bytes"] >= 8 * bucket_bytes(limit)] if limit else sweeps
    fits = fit_stacks(wire.to_dict("records"))
    rows = []
    for c in compare(table, fits, rated_link(bits_per_s(rate) if rate else None)):
        rows.append({"condition": label, **asdict(c), "calibrated_error_points": c.calibrated_error_points,
                     "data_sheet_error_points": c.data_sheet_error_points})
    if done.returncode != 0 or len(rows) < 2:
        raise RuntimeError(f"{label}: bench run exit {done.returncode}, {len(rows)} 2-node cells compared "
                           f"(see {store.parent / 'bench-run.log'})")
    return rows


def pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def pts(v: float | None) -> str:
    return "—" if v is None else f"{v:+.1f}"


def markdown(rows: list[dict]) -> str:
    lines = ["| link | launcher | X(1) img/s | X(2) img/s | measured E | calibrated E | error (pts) | "
             "data-sheet E | error (pts) | compute s | allreduce s (calibrated / data sheet) | fit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        comm = (f"{r['calibrated_comm_s']:.3f}" if r["calibrated_comm_s"] is not None else "—")
        lines.append(f"| {r['condition']} | {r['mpi']} | {r['baseline_images_per_sec']:.2f} | "
                     f"{r['images_per_sec']:.2f} | {pct(r['measured_efficiency'])} | "
                     f"{pct(r['calibrated_efficiency'])} | {pts(r['calibrated_error_points'])} | "
                     f"{pct(r['data_sheet_efficiency'])} | {pts(r['data_sheet_error_points'])} | "
                     f"{r['compute_s']:.3f} | {comm} / {r['data_sheet_comm_s']:.3f} | {r['fit']} |")
    calibrated = [abs(r["calibrated_error_points"]) for r in rows if r["calibrated_error_points"] is not None]
    sheet = [abs(r["data_sheet_error_points"]) for r in rows]
    if calibrated:
        lines.append(f"\ncalibrated: largest error {max(calibrated):.1f} points, within ±5: "
                     f"{sum(e <= 5 for e in calibrated)}/{len(rows)}")
    lines.append(f"data sheet: largest error {max(sheet):.1f} points, within ±5: {sum(e <= 5 for e in sheet)}/{len(rows)}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="2gbit,500mbit,200mbit",
                    help="comma-separated tc rates, after the unshaped link (default 2gbit,500mbit,200mbit)")
    ap.add_argument("--no-unshaped", action="store_true", help="skip the unshaped link")
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench-prediction"), help="one store per condition here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("prediction_shaped: needs root (network namespaces, sshd)", file=sys.stderr)
        return 2
    rates = [r for r in args.rates.split(",") if r]
    for r in rates:
        try:
            positive = bits_per_s(r) > 0
        except ValueError:
            positive = False
        if not positive:
            print(f"prediction_shaped: --rates: {r!r} is not a positive tc rate such as 500mbit", file=sys.stderr)
            return 2
    conditions = ([] if args.no_unshaped else [None]) + rates
    args.out.mkdir(parents=True, exist_ok=True)
    cluster = emulated.start(2, pin=True, state=STATE, prefix="bfab")
    rows, failed = [], False
    try:
        for rate in conditions:
            try:
                rows += run_condition(cluster, rate, args.out)
            except RuntimeError as e:
                print(e, file=sys.stderr)
                failed = True
    finally:
        cluster.down()
    table = markdown(rows) if rows else "no cell was compared"
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = (f"{stamp}: benchmarks/prediction_shaped.py --rates {args.rates}"
            f"{' --no-unshaped' if args.no_unshaped else ''} (matrix-fabric.yaml, 2 emulated nodes, one CPU each)\n\n"
            + table)
    (args.out / "prediction.md").write_text(text + "\n")
    (args.out / "prediction.json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
