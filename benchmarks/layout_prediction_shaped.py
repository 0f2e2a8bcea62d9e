"""Measured vs predicted scaling efficiency of parallel layouts on two emulated nodes joined by a shaped link.

Brings up the emulated cluster (scripts/testcluster.sh up 2 --slots 2, not pinned: every rank shares the machine's
cores), shapes each node's link to --rate with tc, runs matrix-fabric-layouts.yaml through the hosts backend from
node1 into <out>/<rate>/bench.db — the tiny decoder on one rank; tp=2 inside a node and across the link; a 2-stage
1F1B pipeline across the link; HSDP (shards inside a node, replicas across) and flat FSDP over 2 nodes x 2 ranks;
and the 2-rank sweeps of the ops they send (allgather, reduce_scatter, allreduce, sendrecv, pipeline_p2p) inside
a node and across — and sets each layout cell's measured scaling efficiency beside bench/layouts/steptime.py's
prediction.

E = tokens/s per rank / the 1-rank cell's tokens/s. The prediction is bench/analysis/layout_prediction.py's, the one
the report sets beside each layout cell, nothing fitted to the layout cells: compute at the efficiency at which the
model gives the layout's 1-node twin its measured step (the same layout on one node, or FSDP2 on one node for HSDP and
flat FSDP, whose 4 ranks do not fit one node here), each rank at its share of the machine's cores and nothing
overlapped where ranks outnumber them; the traffic priced on the sweeps inside a node and across the link. Beside it,
from FLOPs alone: the 1-rank cell's FLOP/s as the rate (the planner's path).

The training cells are measured in --rounds rounds (the whole matrix, then `bench run --rerun` of its training cells):
the measured and predicted E are over every round's windows, and each round's own E and error beside them show how
far this shared VM's drift moves one round's comparison.

    .venv/bin/python benchmarks/layout_prediction_shaped.py [--rate 500mbit] [--rounds 3] [--out DIR]
    .venv/bin/python benchmarks/layout_prediction_shaped.py --from STORE  # the comparison again from a store

Root (network namespaces). The cluster lives in /tmp/bench-fabric, the paths the matrix names, and is torn down at
the end, failed or not. Writes <out>/<rate>/bench.db, <out>/prediction.md and <out>/prediction.json (with --from:
prints only); exit 1 when the run failed or a cell is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.analysis.layout_prediction import TWIN, predict  # noqa: E402
from bench.analysis.missing import is_missing  # noqa: E402
from bench.layouts.shapes import shape_named  # noqa: E402
from bench.layouts.steptime import DIMENSIONS  # noqa: E402
from bench.store import Store  # noqa: E402
from benchmarks.collectives_shaped import positive_rate  # noqa: E402
from benchmarks.prediction_shaped import pct, pts, run_rounds, training_matrix  # noqa: E402
from tests import cluster as emulated  # noqa: E402  (the driver the multi-node tests use)

STATE = Path("/tmp/bench-fabric")
MATRIX = ROOT / "matrix-fabric-layouts.yaml"
# The comparisons the issue names: each pair's order (which layout scales better) is checked.
PAIRS = (("tp=2", "pp=2,schedule=1f1b,m=4"), ("dp_replicate=2,dp_shard=2", "dp_shard=4"))


def run(rate: str, out: Path, rounds: int = 1) -> Path:
    """The matrix on the shaped cluster, into <out>/<rate>/bench.db: the whole matrix once, then its training cells
    again (`bench run --rerun`) in each later round, so each round measures the 1-rank cell, each twin and each
    2-node layout minutes apart and a drift of this shared VM between rounds moves them alike."""
    store = (out / rate / "bench.db").resolve()
    store.parent.mkdir(parents=True, exist_ok=True)
    store.unlink(missing_ok=True)
    later = training_matrix(store.parent, MATRIX)
    cluster = emulated.start(2, pin=False, state=STATE, prefix="bfab", slots=2)
    try:
        cluster.shape(rate)
        run_rounds(cluster, store, MATRIX, later, rounds, rate)
    finally:
        cluster.down()
    return store


def where(cell: dict) -> str:
    nodes, per_node = int(cell["nodes"]), int(cell["workers_per_node"] or cell["gpus"])
    if nodes == 1:
        return "inside a node"
    return "across the link" if per_node == 1 else f"{nodes} nodes"


def cells_of(store: Path, run_id: str | None = None) -> tuple[list[dict], list[dict]]:
    """Each training cell's figures (medians over its ok records: every round's, or run `run_id`'s) and the sweep
    rows (every round's)."""
    with Store(str(store), read_only=True) as db:
        records = db.dataframe(record_json=True)
        sweeps = db.collectives().to_dict("records")
    ok = records[(records.status == "ok") & (records.model == "tiny")]
    if run_id is not None:
        ok = ok[ok.run_id == run_id]
    cells = []
    for cell_id, group in ok.groupby("cell_id"):
        first = group.iloc[0]
        collectives: dict[str, list[float]] = {}
        for text in group["record_json"]:
            for dim, s in (json.loads(text).get("layout") or {}).get("collective_s_per_step", {}).items():
                collectives.setdefault(dim, []).append(float(s))
        seq = None if is_missing(first["seq_len"]) else int(first["seq_len"])
        cells.append({"cell_id": cell_id, "layout": first["layout"] if isinstance(first["layout"], str) else None,
                      "model": first["model"], "gpu": first["gpu"], "precision": first["precision"],
                      "engine": first["engine"], "ib": bool(first["ib"]),
                      "gpus": int(first["gpus"]), "nodes": int(first["nodes"]),
                      "workers_per_node": None if is_missing(first["workers_per_node"])
                      else int(first["workers_per_node"]),
                      "seq_len": seq, "seq": seq or shape_named("tiny").seq,
                      "batch_per_gpu": int(first["batch_per_gpu"]), "windows": len(group),
                      "samples_per_sec": statistics.median(group["samples_per_sec"]),
                      "step_s": statistics.median(group["step_time_median_s"]),
                      "collective_s": {d: statistics.median(v) for d, v in collectives.items()}})
    return cells, sweeps


def compare(cells: list[dict], sweeps: list[dict], cores: int) -> list[dict]:
    """One row per layout cell on two nodes: measured E, E predicted from its 1-node twin, and E predicted from
    FLOPs alone (the planner's path), with the step and each dimension's collectives
    (bench/analysis/layout_prediction.py, as the report predicts them). Every rank shares this machine's `cores`."""
    base = next((c for c in cells if c["gpus"] == 1 and c["layout"] is None), None)
    if base is None:
        raise RuntimeError("no 1-rank cell measured: nothing to scale from")
    cells = [{**c, "core_share": min(1.0, cores / c["gpus"])} for c in cells]
    twins = {c["cell_id"]: c for c in cells}
    rows = []
    for c in cells:
        if c["layout"] is None or c["nodes"] == 1:
            continue
        p = predict(c, cells, sweeps)
        if p.flops_only is None:
            raise RuntimeError(f"{c['cell_id']} ({c['layout']}): not predicted: {p.why}")
        tokens_1 = p.base_tokens_per_s
        twin = twins.get(p.twin_cell_id)
        step = p.step if p.anchor == TWIN else None
        measured = c["samples_per_sec"] * c["seq"] / c["gpus"] / tokens_1
        predicted = step.tokens_per_s_per_gpu / tokens_1 if step else None
        flops_only = p.flops_only.tokens_per_s_per_gpu / tokens_1
        rows.append({"layout": c["layout"], "where": where(c), "cell_id": c["cell_id"], "gpus": c["gpus"],
                     "windows": c["windows"], "core_share": p.core_share,
                     "tokens_per_s": c["samples_per_sec"] * c["seq"],
                     "baseline_tokens_per_s": tokens_1,
                     "twin_cell_id": twin and twin["cell_id"], "twin_layout": twin and twin["layout"],
                     "twin_tokens_per_s": twin and twin["samples_per_sec"] * c["seq"],
                     "twin_efficiency": twin and twin["samples_per_sec"] * c["seq"] / twin["gpus"] / tokens_1,
                     "twin_compute_efficiency": p.twin_compute_efficiency,
                     "measured_efficiency": measured, "predicted_efficiency": predicted,
                     "error_points": None if predicted is None else 100 * (predicted - measured),
                     "flops_only_efficiency": flops_only, "flops_only_error_points": 100 * (flops_only - measured),
                     "step_s": c["step_s"], "predicted_step_s": step and step.step_s,
                     "twin_collective_s": twin and twin["collective_s"], "collective_s": c["collective_s"],
                     "predicted_traffic_s": {d: v for d, v in (step or p.flops_only).traffic_s.items() if v},
                     "predicted_exposed_s": {d: v for d, v in (step or p.flops_only).exposed_s.items() if v},
                     "tiers": {d: t for d, t in p.flops_only.tiers.items() if t != "none"}})
    return rows


def run_ids(store: Path) -> list[str]:
    """The store's runs that measured a training cell, in the order they started (the rounds)."""
    with Store(str(store), read_only=True) as db:
        records = db.dataframe(record_json=False)
        runs = [r["run_id"] for r in db.runs()]
    measured = set(records[(records.status == "ok") & (records.model == "tiny")].run_id)
    return [r for r in runs if r in measured]


def with_rounds(rows: list[dict], store: Path, sweeps: list[dict], cores: int) -> list[dict]:
    """rows (each layout over every round's windows) with each round's own measured E and error, in round order:
    a round compares its cells with its own 1-rank cell and twins, priced on every round's sweeps. A spread of the
    rounds wider than the pooled error says this VM's drift, not the model, decides the comparison."""
    per_round: dict[str, list[tuple[float, float | None]]] = {}
    rounds = run_ids(store)
    if len(rounds) > 1:
        for run_id in rounds:
            round_cells, _ = cells_of(store, run_id)
            try:
                found = compare(round_cells, sweeps, cores)
            except RuntimeError:  # a round without its 1-rank cell: nothing to scale from
                continue
            for r in found:
                per_round.setdefault(r["layout"], []).append((r["measured_efficiency"], r["error_points"]))
    return [{**r, "round_efficiencies": [e for e, _ in per_round.get(r["layout"], [])],
             "round_errors": [err for _, err in per_round.get(r["layout"], [])]} for r in rows]


def orders(rows: list[dict]) -> list[str]:
    """Whether the prediction orders the layouts as measured: each pair the issue names (across the link), and
    every layout on two nodes."""
    out = []
    by = {r["layout"]: r for r in rows if r["predicted_efficiency"] is not None}
    for a, b in PAIRS:
        if a not in by or b not in by:
            out.append(f"{a} vs {b}: not both measured and predicted")
            continue
        measured = by[a]["measured_efficiency"] > by[b]["measured_efficiency"]
        predicted = by[a]["predicted_efficiency"] > by[b]["predicted_efficiency"]
        out.append(f"`{a}` vs `{b}` on two nodes: measured better `{a if measured else b}`; predicted order "
                   f"{'right' if measured == predicted else 'WRONG'}")
    ranked = [r["layout"] for r in sorted(by.values(), key=lambda r: -r["measured_efficiency"])]
    predicted = [r["layout"] for r in sorted(by.values(), key=lambda r: -r["predicted_efficiency"])]
    out.append(f"every layout on two nodes, measured: {' > '.join(ranked)}; predicted: "
               f"{'the same order' if ranked == predicted else ' > '.join(predicted)}")
    for r in rows:
        if r["twin_efficiency"] is not None:
            moved = r["measured_efficiency"] < r["twin_efficiency"]
            said = r["predicted_efficiency"] < r["twin_efficiency"]
            out.append(f"`{r['layout']}`: one node {100 * r['twin_efficiency']:.1f}%"
                       f"{'' if r['twin_layout'] == r['layout'] else ' (as `' + r['twin_layout'] + '`)'} → two nodes "
                       f"{100 * r['measured_efficiency']:.1f}% measured, {100 * r['predicted_efficiency']:.1f}% "
                       f"predicted (direction {'right' if moved == said else 'WRONG'})")
    return out


def ms(d: dict[str, float]) -> str:
    return ", ".join(f"{k} {1000 * d[k]:.1f}" for k in DIMENSIONS if k in d) or "—"


def markdown(rows: list[dict]) -> str:
    lines = ["| layout on two nodes | ranks | core share | one node: E (tokens/s) | two nodes: tokens/s | measured E | "
             "predicted E (from the twin) | error (pts) | rounds: measured E (error) | from FLOPs alone | "
             "error (pts) | step ms (measured / predicted) | collectives ms/step measured, one node → two | "
             "traffic ms/step predicted (exposed) |",
             "|---|---|---:|---|---:|---:|---:|---:|---|---:|---:|---|---|---|"]
    for r in rows:
        twin = (f"{pct(r['twin_efficiency'])} ({r['twin_tokens_per_s']:,.0f})" if r["twin_tokens_per_s"] else "—")
        if r["twin_layout"] and r["twin_layout"] != r["layout"]:
            twin += f", as `{r['twin_layout']}`"
        predicted_step = f"{1000 * r['predicted_step_s']:.0f}" if r["predicted_step_s"] else "—"
        rounds = "; ".join(f"{pct(e)} ({pts(err)})" for e, err in zip(r.get("round_efficiencies") or [],
                                                                       r.get("round_errors") or [])) or "one round"
        lines.append(f"| `{r['layout']}` {r['where']} | {r['gpus']} | {r['core_share']:.2f} | {twin} | "
                     f"{r['tokens_per_s']:,.0f} | {pct(r['measured_efficiency'])} | "
                     f"{pct(r['predicted_efficiency'])} | {pts(r['error_points'])} | {rounds} | "
                     f"{pct(r['flops_only_efficiency'])} | {pts(r['flops_only_error_points'])} | "
                     f"{1000 * r['step_s']:.0f} / {predicted_step} | "
                     f"{ms(r['twin_collective_s'] or {})} → {ms(r['collective_s'])} | "
                     f"{ms(r['predicted_traffic_s'])} ({ms(r['predicted_exposed_s'])}) |")
    errors = [abs(r["error_points"]) for r in rows if r["error_points"] is not None]
    base = rows[0]["baseline_tokens_per_s"] if rows else 0
    lines += ["", f"1-rank cell: {base:,.0f} tokens/s. From the twin: largest error "
                  f"{max(errors, default=float('nan')):.1f} points; within ±5: {sum(e <= 5 for e in errors)}/"
                  f"{len(rows)}.", ""]
    lines += [f"- {line}" for line in orders(rows)]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", default="500mbit", help="the tc rate of each node's link (default 500mbit)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench-layout-prediction"), help="the store goes here")
    ap.add_argument("--rounds", type=int, default=3,
                    help="measure the training cells this many times, the sweeps in the first (default 3)")
    ap.add_argument("--from", dest="store", type=Path, help="compare this store (a bench.db) instead of running")
    args = ap.parse_args()
    if not positive_rate(args.rate):
        print(f"layout_prediction_shaped: --rate: {args.rate!r} is not a positive tc rate such as 500mbit",
              file=sys.stderr)
        return 2
    if args.rounds < 1:
        print(f"layout_prediction_shaped: --rounds must be at least 1, got {args.rounds}", file=sys.stderr)
        return 2
    failed = False
    if args.store is not None:
        store = args.store
        if not store.is_file():
            print(f"layout_prediction_shaped: --from {store}: no such store", file=sys.stderr)
            return 2
    else:
        if os.geteuid() != 0:
            print("layout_prediction_shaped: needs root (network namespaces, sshd)", file=sys.stderr)
            return 2
        args.out.mkdir(parents=True, exist_ok=True)
        try:
            store = run(args.rate, args.out, args.rounds)
        except RuntimeError as e:
            print(e, file=sys.stderr)
            failed = True
            store = (args.out / args.rate / "bench.db").resolve()
    cores = os.cpu_count() or 1
    cells, sweeps = cells_of(store)
    rows = with_rounds(compare(cells, sweeps, cores), store, sweeps, cores)
    if len(rows) < 4 or any(r["predicted_efficiency"] is None for r in rows):
        print(f"layout_prediction_shaped: {len(rows)} of 4 two-node layout cells measured, or one without its "
              f"one-node twin (see {store})", file=sys.stderr)
        failed = True
    how = f"--from {args.store}" if args.store else f"--rate {args.rate} --rounds {args.rounds}"
    text = (f"benchmarks/layout_prediction_shaped.py {how} (2 emulated nodes, {cores} cores shared; the link's "
            f"rate is the one the run shaped)\n\n" + markdown(rows))
    if args.store is None:
        (args.out / "prediction.md").write_text(time.strftime("%Y-%m-%d %H:%M UTC: ", time.gmtime()) + text + "\n")
        (args.out / "prediction.json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # its reader (e.g. `| head`) stopped reading: no traceback, the shell's SIGPIPE status
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
