"""Measured vs predicted scaling efficiency of 2-node ResNet-50 cells on links shaped to known rates.

For each link condition (unshaped first, then each --rates value) the script shapes every node's link with tc, runs
matrix-fabric.yaml (1-node and 2-node ResNet-50 cells and the allreduce sweep, Horovod over Gloo and over Open MPI)
through the hosts backend from node1 into a store of its own, fits α/β to the sweep and sets each 2-node cell's
measured efficiency beside the what-if model's two predictions: calibrated (the fitted α/β of the same stack at the
same rate, and the sweep's contention measurement) and data sheet (the rate tc sets). Nothing is fitted to the
training cells (bench/analysis/calibration.py).

The cells are measured in --rounds rounds (`bench run --rerun` of the whole matrix after the first): each round
measures X(1) minutes before X(2), so a drift of this shared VM between rounds moves both. The measured E is the
pooled medians' (every round's windows), and the table shows the range of the rounds' own E: a spread wider than the
error it is compared with says the comparison cannot decide. The sweep runs in every round, so its contention
figures come from the same minutes as the training windows they predict (a machine state lasting minutes otherwise
sits in one and not the other: docs/scaling-model.md, "Is the calibrated prediction steady?"); the calibrated E is
fitted from every round's sweeps, and each round is also predicted from its own ("rounds' error"). --sweep-once
measures the sweep in the first round only and the training cells alone after it (~13 min a condition at
700 Mbit/s instead of ~25).

    .venv/bin/python benchmarks/prediction_shaped.py [--rates 2gbit,500mbit,200mbit] [--rounds 3]
        [--sweep-once] [--out /tmp/bench-prediction]
    .venv/bin/python benchmarks/prediction_shaped.py --from DIR   # the tables again from DIR's stores, no run

Root (network namespaces). The cluster (scripts/testcluster.sh up 2 --pin: one CPU per node) lives in
/tmp/bench-fabric, the paths matrix-fabric.yaml names, and is torn down at the end, failed or not. Writes
<out>/<condition>/bench.db (`bench report --store` on any of them shows the same comparison in its prediction
section), <out>/prediction.md and <out>/prediction.json. Exit 1 when a run failed.

Beside the comparison, where each 2-node step went: each window's slower and faster rank by compute (a step ends
when the slower one's does; the model prices one rank), their waits and the update, the model's step, and on a
shaped link the model's step with every fused operation charged tbf's bucket refill (docs/scaling-model.md, "Where
Gloo's step goes instead").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.analysis.calibration import compare, rated_link  # noqa: E402
from bench.analysis.collectives import fit_stacks, training_only, with_contention_of  # noqa: E402
from bench.analysis.scaling import cell_summary, scaling  # noqa: E402
from bench.store import Store  # noqa: E402
from benchmarks.collectives_shaped import bits_per_s, bucket_bytes, positive_rate  # noqa: E402
from models.registry.collectives import COLLECTIVES  # noqa: E402
from tests import cluster as emulated  # noqa: E402  (the driver the multi-node tests use)

STATE = Path("/tmp/bench-fabric")
MATRIX = ROOT / "matrix-fabric.yaml"


def training_matrix(out: Path, matrix: Path | None = None) -> Path:
    """`matrix`'s training cells alone (same cells, same ids; default matrix-fabric.yaml): what the later rounds
    measure again."""
    spec = yaml.safe_load((matrix or MATRIX).read_text())
    spec["axes"]["model"] = [m for m in spec["axes"]["model"] if m not in COLLECTIVES]
    for key in ("include", "exclude"):
        kept = [c for c in spec.get(key, []) if c.get("model") not in COLLECTIVES]
        spec.pop(key, None)
        if kept:
            spec[key] = kept
    path = out / "matrix-training.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run_condition(cluster: emulated.Cluster, rate: str | None, out: Path, rounds: int,
                  sweep_once: bool = False) -> None:
    """The matrix at one link condition rounds times (with sweep_once, the matrix then its training cells alone
    rounds - 1 times), into one store."""
    label = rate or "unshaped"
    cluster.shape(rate)
    store = (out / label / "bench.db").resolve()
    store.parent.mkdir(parents=True, exist_ok=True)
    store.unlink(missing_ok=True)
    run_rounds(cluster, store, MATRIX, training_matrix(out) if sweep_once else MATRIX, rounds, label)


def run_rounds(cluster: emulated.Cluster, store: Path, first: Path, later: Path, rounds: int, label: str) -> None:
    """`bench run first` from node1 into `store`, then `bench run later --rerun` rounds - 1 times (the log of every
    round in bench-run.log beside the store). RuntimeError at the first round that fails."""
    log = []
    for n, extra in enumerate([[str(first)]] + [[str(later), "--rerun"]] * (rounds - 1)):
        started = time.monotonic()
        done = cluster.run("node1", [sys.executable, "-m", "bench", "run", *extra, "--store", str(store)],
                           env=cluster.env({"PYTHONPATH": str(ROOT)}), timeout=3600, cwd=store.parent)
        log.append(done.stdout + done.stderr)
        (store.parent / "bench-run.log").write_text("\n".join(log))
        print(f"{label}: round {n + 1}: bench run exit {done.returncode} in {time.monotonic() - started:.0f} s",
              flush=True)
        if done.returncode != 0:
            raise RuntimeError(f"{label}: round {n + 1}: bench run exit {done.returncode} "
                               f"(see {store.parent / 'bench-run.log'})")


def step_parts(windows: list[list[dict]]) -> dict | None:
    """Where a multi-node cell's step went, window by window (one per_rank list each): the slower rank's compute
    (forward and backward) and wait for the collective after it, the faster rank's, and the update, per step; medians
    over the windows, and the gap between the two ranks' compute. The slower rank changes from window to window, so
    rank by rank medians would hide the gap. The model prices one rank: the step waits for the slower one. None: no
    window has two ranks that timed their phases."""
    parts: dict[str, list[float]] = {}
    for window in windows:
        ranks = [{k: v / r["steps"] for k, v in r["phases_s"].items()} for r in window
                 if r.get("phases_s") and r.get("steps")]
        if len(ranks) < 2 or any("compute" not in r for r in ranks):
            continue
        ranks.sort(key=lambda r: r["compute"])
        faster, slower = ranks[0], ranks[-1]
        for key, value in (("slower_compute_s", slower["compute"]), ("slower_wait_s", slower.get("comm_wait", 0.0)),
                           ("faster_compute_s", faster["compute"]), ("faster_wait_s", faster.get("comm_wait", 0.0)),
                           ("gap_s", slower["compute"] - faster["compute"]),
                           ("update_s", max(r.get("update", 0.0) for r in ranks))):
            parts.setdefault(key, []).append(value)
    if not parts:
        return None
    return {"windows": len(parts["gap_s"]), **{k: statistics.median(v) for k, v in parts.items()}}


def compare_condition(store: Path, label: str) -> list[dict]:
    """Comparison rows of one condition's store: each 2-node cell against the pooled rounds, with each round's E
    (and each round's calibrated error, where the round measured its own sweep)."""
    rate = None if label == "unshaped" else label
    with Store(str(store), read_only=True) as db:
        records, sweeps, ranks = db.dataframe(record_json=False), db.collectives(), db.rank_windows()
    ok = training_only(records[records.status == "ok"])
    windows: dict[str, list[list[dict]]] = {}
    for r in ranks:
        windows.setdefault(r["cell_id"], []).append(r["per_rank"])
    limit = bits_per_s(rate) / 8 if rate else None
    # On a shaped link the sizes tbf's bucket carries at line speed say nothing about the rate: fit over those at
    # least 8x the bucket (docs/collectives.md).
    wire = sweeps[sweeps["bytes"] >= 8 * bucket_bytes(limit)] if limit else sweeps
    rated = rated_link(bits_per_s(rate) if rate else None)
    per_round: dict[str, list[float]] = {}
    # One entry per round, None where the round measured no sweep of the cell's stack or its own fit is unusable (one
    # round's 5 sweeps can give a non-monotone bandwidth curve that 15 pooled ones do not).
    round_errors: dict[str, list[float | None]] = {}
    for run_id, group in ok.groupby("run_id"):
        scaled = scaling(cell_summary(group))
        for _, r in scaled.iterrows():
            if r["nodes"] > 1 and r.get("baseline_gpus") == 1:
                per_round.setdefault(r["cell_id"], []).append(float(r["efficiency"]))
        own = with_contention_of(fit_stacks(wire[wire["run_id"] == run_id].to_dict("records")),
                                 sweeps[sweeps["run_id"] == run_id].to_dict("records"))
        for c in compare(scaled, own, rated):
            round_errors.setdefault(c.cell_id, []).append(c.calibrated_error_points)
    table = scaling(cell_summary(ok))
    # α and β from the sizes the link decides; each size's contention from every size (a stretch is a ratio of two
    # times seconds apart at one size, which the token bucket moves alike).
    fits = with_contention_of(fit_stacks(wire.to_dict("records")), sweeps.to_dict("records"))
    # Side by side, from the same fits: the rule used before contention was measured (the engine's CPU share only),
    # and the one before it was measured per operation (one allreduce of all the gradients, the largest size's
    # stretch, a fixed overlap).
    share_only = {k: replace(f, idle_compute_ratio=None, contended_compute_ratio=None, contended_stretch=None,
                             contended_by_size=()) for k, f in fits.items()}
    share_rule = {c.cell_id: c for c in compare(table, share_only, rated)}
    one_allreduce = {c.cell_id: c for c in compare(table, {k: replace(f, contended_by_size=(),
                                                                      replay_compute_ratio=None)
                                                           for k, f in fits.items()}, rated)}
    # And the rule before the replay: the backward pass paced by each size's figures, one tensor at a time.
    per_operation = {c.cell_id: c for c in compare(table, {k: replace(f, replay_compute_ratio=None)
                                                           for k, f in fits.items()}, rated)}
    paces = {}
    for c in per_operation.values():  # the stack's fit: (gpu, mpi, ib, engine, nodes), ib whichever the sweep had
        fit = next((f for (gpu, mpi, _, engine, nodes), f in fits.items()
                    if (gpu, mpi, engine, nodes) == (c.gpu, c.mpi, c.engine, c.nodes)), None)
        paces[c.cell_id] = (fit.idle_compute_ratio, fit.replay_compute_ratio) if fit else (None, None)
    # On a shaped link, the sweep times each operation after a barrier, which lets tbf's bucket refill; in training
    # the operations can follow each other with the bucket empty. Charging every fused operation the bucket's refill
    # (bucket / rate, a 2-rank ring sending each operation's bytes once) bounds what that difference can move.
    charged = ({c.cell_id: c for c in compare(table, {k: replace(f, alone_by_size=tuple(
        (b, t + min(bucket_bytes(limit), b) / limit) for b, t in f.alone_by_size)) for k, f in fits.items()}, rated)}
        if limit else {})
    rows = []
    for c in compare(table, fits, rated):
        rows.append({"condition": label, **asdict(c), "calibrated_error_points": c.calibrated_error_points,
                     "data_sheet_error_points": c.data_sheet_error_points,
                     "share_rule_efficiency": share_rule[c.cell_id].calibrated_efficiency,
                     "share_rule_error_points": share_rule[c.cell_id].calibrated_error_points,
                     "one_allreduce_efficiency": one_allreduce[c.cell_id].calibrated_efficiency,
                     "one_allreduce_error_points": one_allreduce[c.cell_id].calibrated_error_points,
                     "per_operation_efficiency": per_operation[c.cell_id].calibrated_efficiency,
                     "per_operation_error_points": per_operation[c.cell_id].calibrated_error_points,
                     "idle_compute_ratio": paces[c.cell_id][0], "replay_compute_ratio": paces[c.cell_id][1],
                     "round_efficiencies": per_round.get(c.cell_id, []),
                     "round_calibrated_errors": round_errors.get(c.cell_id, []),
                     "step_s": c.compute_s / c.measured_efficiency,
                     "calibrated_step_s": (c.compute_s / c.calibrated_efficiency
                                           if c.calibrated_efficiency else None),
                     "bucket_charged_step_s": (c.compute_s / charged[c.cell_id].calibrated_efficiency
                                               if c.cell_id in charged and charged[c.cell_id].calibrated_efficiency
                                               else None),
                     "parts": step_parts(windows.get(c.cell_id, []))})
    if len(rows) < 2:
        raise RuntimeError(f"{label}: {len(rows)} 2-node cells compared (see {store.parent / 'bench-run.log'})")
    return rows


def pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def pts(v: float | None) -> str:
    return "—" if v is None else f"{v:+.1f}"


def ratio(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def markdown(rows: list[dict]) -> str:
    lines = ["| link | launcher/engine | X(1) samples/s | X(2) samples/s | measured E | rounds' E | calibrated E | "
             "error (pts) | rounds' error (own sweeps) | ρ_idle / ρ_replay | per-operation rule E | error (pts) | "
             "one-allreduce rule E | error (pts) | CPU-share rule E | error (pts) | "
             "data-sheet E | error (pts) | compute s | allreduce s (calibrated / data sheet) | fit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        comm = (f"{r['calibrated_comm_s']:.3f}" if r["calibrated_comm_s"] is not None else "—")
        spread = r.get("round_efficiencies") or []
        rounds = (f"{100 * min(spread):.1f}–{100 * max(spread):.1f}% ({len(spread)})" if spread else "—")
        errors = r.get("round_calibrated_errors") or []
        own = ", ".join(pts(e) for e in errors) if any(e is not None for e in errors) else "—"
        lines.append(f"| {r['condition']} | {r['mpi']}/{r.get('engine') or 'horovod'} | "
                     f"{r['baseline_samples_per_sec']:.2f} | "
                     f"{r['samples_per_sec']:.2f} | {pct(r['measured_efficiency'])} | {rounds} | "
                     f"{pct(r['calibrated_efficiency'])} | {pts(r['calibrated_error_points'])} | {own} | "
                     f"{ratio(r.get('idle_compute_ratio'))} / {ratio(r.get('replay_compute_ratio'))} | "
                     f"{pct(r.get('per_operation_efficiency'))} | {pts(r.get('per_operation_error_points'))} | "
                     f"{pct(r.get('one_allreduce_efficiency'))} | {pts(r.get('one_allreduce_error_points'))} | "
                     f"{pct(r.get('share_rule_efficiency'))} | {pts(r.get('share_rule_error_points'))} | "
                     f"{pct(r['data_sheet_efficiency'])} | {pts(r['data_sheet_error_points'])} | "
                     f"{r['compute_s']:.3f} | {comm} / {r['data_sheet_comm_s']:.3f} | {r['fit']} |")
    calibrated = [abs(r["calibrated_error_points"]) for r in rows if r["calibrated_error_points"] is not None]
    sheet = [abs(r["data_sheet_error_points"]) for r in rows]
    if calibrated:
        lines.append(f"\ncalibrated: largest error {max(calibrated):.1f} points, within ±5: "
                     f"{sum(e <= 5 for e in calibrated)}/{len(rows)}")
    per_op = [abs(r["per_operation_error_points"]) for r in rows if r.get("per_operation_error_points") is not None]
    if per_op:
        lines.append(f"per-operation rule (no replay): largest error {max(per_op):.1f} points, within ±5: "
                     f"{sum(e <= 5 for e in per_op)}/{len(rows)}")
    single = [abs(r["one_allreduce_error_points"]) for r in rows if r.get("one_allreduce_error_points") is not None]
    if single:
        lines.append(f"one-allreduce rule: largest error {max(single):.1f} points, within ±5: "
                     f"{sum(e <= 5 for e in single)}/{len(rows)}")
    share = [abs(r["share_rule_error_points"]) for r in rows if r.get("share_rule_error_points") is not None]
    if share:
        lines.append(f"CPU-share rule: largest error {max(share):.1f} points, within ±5: "
                     f"{sum(e <= 5 for e in share)}/{len(rows)}")
    lines.append(f"data sheet: largest error {max(sheet):.1f} points, within ±5: "
                 f"{sum(e <= 5 for e in sheet)}/{len(rows)}")
    parted = [r for r in rows if r.get("parts")]
    if parted:
        lines += ["", "Where the 2-node step went (seconds per step; each window's slower and faster rank by compute, "
                  "medians over windows; the step from the measured E, the model's from the calibrated E; bucket "
                  "charged: every fused operation also pays tbf's bucket refill, the most the sweep's barriers can "
                  "hide):", "",
                  "| link | launcher/engine | windows | step | model's step | model's step, bucket charged | "
                  "slower rank: compute / wait | faster rank: compute / wait | gap | update |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in parted:
            p = r["parts"]
            model, charged = (f"{r[k]:.3f}" if r.get(k) else "—"
                              for k in ("calibrated_step_s", "bucket_charged_step_s"))
            lines.append(f"| {r['condition']} | {r['mpi']}/{r.get('engine') or 'horovod'} | {p['windows']} | "
                         f"{r['step_s']:.3f} | {model} | "
                         f"{charged} | {p['slower_compute_s']:.3f} / {p['slower_wait_s']:.3f} | "
                         f"{p['faster_compute_s']:.3f} / {p['faster_wait_s']:.3f} | {p['gap_s']:.3f} | "
                         f"{p['update_s']:.3f} |")
    return "\n".join(lines)


def main() -> int:
    global MATRIX
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="2gbit,500mbit,200mbit",
                    help="comma-separated tc rates, after the unshaped link (default 2gbit,500mbit,200mbit)")
    ap.add_argument("--no-unshaped", action="store_true", help="skip the unshaped link")
    ap.add_argument("--rounds", type=int, default=3,
                    help="measurements of the matrix per condition, the sweep in each (3)")
    ap.add_argument("--sweep-once", action="store_true",
                    help="measure the allreduce sweep in the first round only (about half the time; the contention "
                         "figures then come from minutes the later rounds' training windows are not in)")
    ap.add_argument("--matrix", type=Path, default=MATRIX,
                    help="the cells and sweeps (default matrix-fabric.yaml; matrix-fabric-transformer.yaml: the "
                         "transformer under DDP and FSDP2)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench-prediction"), help="one store per condition here")
    ap.add_argument("--from", dest="stores", type=Path, help="compare the stores already in this directory; no run")
    args = ap.parse_args()
    MATRIX = args.matrix.resolve()  # the module's: run_condition and training_matrix read it
    rates = [r for r in args.rates.split(",") if r]
    bad = next((r for r in rates if not positive_rate(r)), None)
    if bad is not None:
        print(f"prediction_shaped: --rates: {bad!r} is not a positive tc rate such as 500mbit", file=sys.stderr)
        return 2
    if args.rounds < 1:
        print(f"prediction_shaped: --rounds must be at least 1, got {args.rounds}", file=sys.stderr)
        return 2
    labels = ([] if args.no_unshaped else ["unshaped"]) + rates
    failed = False
    if args.stores is not None:
        missing = [label for label in labels if not (args.stores / label / "bench.db").is_file()]
        if missing:
            print(f"prediction_shaped: --from {args.stores}: no {missing[0]}/bench.db there", file=sys.stderr)
            return 2
        out = args.stores
    else:
        if os.geteuid() != 0:
            print("prediction_shaped: needs root (network namespaces, sshd)", file=sys.stderr)
            return 2
        out = args.out
        out.mkdir(parents=True, exist_ok=True)
        cluster = emulated.start(2, pin=True, state=STATE, prefix="bfab")
        try:
            for label in labels:
                try:
                    run_condition(cluster, None if label == "unshaped" else label, out, args.rounds,
                                  args.sweep_once)
                except RuntimeError as e:
                    print(e, file=sys.stderr)
                    failed = True
        finally:
            cluster.down()
    rows = []
    for label in labels:
        if (out / label / "bench.db").is_file():
            try:
                rows += compare_condition(out / label / "bench.db", label)
            except RuntimeError as e:
                print(e, file=sys.stderr)
                failed = True
    table = markdown(rows) if rows else "no cell was compared"
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    how = (f"--from {args.stores}" if args.stores is not None
           else f"--rounds {args.rounds}{' --sweep-once' if args.sweep_once else ''}")
    text = (f"{stamp}: benchmarks/prediction_shaped.py --rates {args.rates}"
            f"{' --no-unshaped' if args.no_unshaped else ''} {how} ({MATRIX.name}, 2 emulated nodes, one CPU "
            f"each)\n\n" + table)
    (out / "prediction.md").write_text(text + "\n")
    (out / "prediction.json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
