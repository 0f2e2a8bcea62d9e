"""`bench ab MATRIX --a SPEC --b SPEC`: the same cells under two environments, interleaved on this machine (A B, B A,
...), judged from the paired ratios B/A (bench/analysis/paired.py); exit 1 when B is slower in some cell.
The sides: bench/ab/spec.py. docs/regression-checks.md says when to use this rather than a baseline file."""
from __future__ import annotations

import math
import sys

from bench.commands import EXIT_FAILED, EXIT_OK
from bench.commands.shared import add_ci_output_arguments, add_store_argument, check_output_path
from bench.core.errors import BenchInputError

HELP = "paired A/B: the matrix under two environments, interleaved; exit 1 if B is slower"


def add_arguments(parser) -> None:
    parser.add_argument("matrix")
    parser.add_argument("--a", default="current", metavar="SPEC",
                        help="side A (default: current): python=PATH, git=REF, image=NAME, cpus=N, env.NAME=VALUE, "
                             "comma-separated")
    parser.add_argument("--b", required=True, metavar="SPEC", help="side B, the same forms")
    parser.add_argument("--pairs", type=int, default=5, help="A/B pairs to run (at least 3; default 5)")
    add_store_argument(parser)
    parser.add_argument("--min-effect", type=float, default=0.05,
                        help="smallest |ratio - 1| called a change (default 0.05 = 5%%)")
    parser.add_argument("--cpu-weight", type=float, default=None, metavar="W",
                        help="run both sides in cgroups with W times the default CPU weight (shields the "
                             "measurement from other tenants' load; needs root or a delegated cgroup)")
    parser.add_argument("--statistic", choices=("median", "peak"), default="median",
                        help="each side run's throughput: the median of its windows (default) or its fastest one")
    parser.add_argument("--timeout", type=float, default=None, help="per-cell timeout in seconds (both sides)")
    parser.add_argument("--workdir", default=None, help="where side runs' logs and scratch stores go "
                                                        "(default: a temporary directory, removed at the end)")
    parser.add_argument("--json", dest="json_path", default=None, metavar="PATH",
                        help="write the verdicts as JSON (docs/ci/ab-result.schema.json)")
    add_ci_output_arguments(parser)


def run(args) -> int:
    from pathlib import Path

    from bench.ab.cpuquota import cpu_controller_root
    from bench.ab.session import Session, check_sides, remove_workdir
    from bench.ab.spec import parse_side
    from bench.analysis.paired import MIN_PAIRS, PairedSettings
    from bench.planning.matrix import load_matrix
    from bench.store import Store, check_writable

    specs = [parse_side("A", args.a), parse_side("B", args.b)]
    settings = PairedSettings(min_effect=args.min_effect)
    if args.pairs < MIN_PAIRS or args.pairs > 1000:
        raise BenchInputError(f"--pairs must be between {MIN_PAIRS} and 1000, got {args.pairs}")
    if args.timeout is not None and args.timeout <= 0:
        raise BenchInputError(f"--timeout must be positive, got {args.timeout:g}")
    for option, path in (("--json", args.json_path), ("--junit", args.junit_path)):
        check_output_path(option, path)
    load_matrix(args.matrix)  # the sides load it again; a bad matrix stops here, before anything runs
    if args.cpu_weight is not None and not 0.01 <= args.cpu_weight <= 100:
        raise BenchInputError(f"--cpu-weight must be between 0.01 and 100, got {args.cpu_weight:g}")
    if (any(s.cpus for s in specs) or args.cpu_weight is not None) and cpu_controller_root() is None:
        raise BenchInputError("cpus= / --cpu-weight: no cgroup cpu controller is available here (root or a "
                              "delegated cgroup is needed)")
    check_sides(specs, args.cpu_weight)  # last: an image side asks the container engine
    store_path = Path(args.store)
    check_writable(store_path)
    limit_s = max(600.0, 4 * (args.timeout or 300))  # a side run that hangs past this is stopped
    console_say = _say()
    with Store(store_path) as store:
        session = Session(specs, Path(args.workdir) if args.workdir else None, args.cpu_weight)
        with session:
            console_say(f"ab session {session.id}: A = {specs[0].describe()}; B = {specs[1].describe()}; "
                        f"{args.pairs} pairs, interleaved A B / B A")
            side_runs = session.run(Path(args.matrix), store, args.pairs, timeout=args.timeout, limit_s=limit_s,
                                    say=console_say)
        if not args.workdir and all(r.exit_code == 0 for r in side_runs):
            remove_workdir(session.workdir)
        results, diffs = judge(store, side_runs, settings, args.statistic, specs)
    print_results(results, diffs, settings, session.id)
    write_ci_outputs(args, results, diffs, settings, session.id, specs)
    if not results:
        raise BenchInputError("no cell was measured on both sides (see the side runs' logs above)")
    return EXIT_FAILED if any(r["verdict"] == "regressed" for r in results) else EXIT_OK


def write_ci_outputs(args, results, diffs, settings, session_id: str, specs) -> None:
    """--json, --junit and --github (bench/ci_output/), the same files and annotations `check` writes."""
    from bench.ci_output.emit import write_junit_github
    from bench.ci_output.outcome import Heading, from_ab

    if args.json_path:
        from bench.ci_output.ab_json import write_ab_json

        write_ab_json(args.json_path, results, diffs, settings, session_id, specs, args.statistic)
    heading = Heading("bench ab", f"ab {session_id}: B ({specs[1].describe()}) against A ({specs[0].describe()})")
    write_junit_github(from_ab(results), heading, verdict_counts(results), diffs, junit_path=args.junit_path,
                       github=args.github)


def verdict_counts(results) -> dict[str, int]:
    return {v: sum(r["verdict"] == v for r in results) for v in dict.fromkeys(r["verdict"] for r in results)}


def _say():
    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)
    return say


def judge(store, side_runs, settings, statistic: str = "median", specs=()):
    """Per cell: the complete pairs and their verdict; and what differs between the sides' environments (`specs`:
    the sides' SideSpecs, for what their records cannot show)."""
    from bench.analysis.collectives import training_only
    from bench.analysis.paired import pair_values, paired_verdict
    from bench.cells.keys import CELL_KEYS
    from bench.cells.label import cell_label

    run_side = {r.run_id: (r.pair, r.side) for r in side_runs if r.run_id}
    df = training_only(store.dataframe())
    df = df[df["run_id"].isin(list(run_side))]
    pairs = pair_values(df, run_side, CELL_KEYS, statistic)
    results = []
    for cell, rows in pairs.groupby("cell", sort=False):
        complete = rows.dropna(subset=["A", "B"])
        res = paired_verdict(complete["A"].tolist(), complete["B"].tolist(), settings)
        first = rows.iloc[0]
        results.append({"cell": cell_label(first), **{k: _plain(first[k]) for k in CELL_KEYS},
                        "pairs": res.n_pairs, "pairs_planned": len(rows),
                        "a_values": complete["A"].tolist(), "b_values": complete["B"].tolist(),
                        "ratio": res.ratio, "ci_low": res.ci_low, "ci_high": res.ci_high, "level": res.level,
                        "p_slower": res.p_slower, "sd_log": res.sd_log,
                        "detectable": max(res.detectable, settings.min_effect) if math.isfinite(res.detectable)
                        else math.nan, "verdict": res.verdict})
    diffs = side_differences(df, run_side, store.runs(), specs)
    return results, diffs


def side_differences(df, run_side, run_rows, specs=()):
    """What differs between side A's and side B's recorded environments (bench/analysis/envdiff.py), the source
    first: each side's revision (runs.source_json) and, where each side ran one revision, the files under bench/ and
    models/ that differ between them (bench/core/source_revision.py)."""
    from bench.analysis.envdiff import diff_environments, environment_of
    from bench.core.source_revision import SourceRevision, differing_files, source_text

    by_id = {r["run_id"]: r for r in run_rows}
    runs = {side: [by_id.get(r, {"run_id": r}) for r, (_, s) in run_side.items() if s == side] for side in ("A", "B")}
    envs = {side: environment_of(df[df["run_id"].isin([r["run_id"] for r in runs[side]])],
                                 [r.get("bench_version") or "" for r in runs[side]],
                                 [source_text(r) for r in runs[side]])
            for side in ("A", "B")}
    revisions = {side: {r.get("source_json") for r in runs[side]} for side in ("A", "B")}
    one = {side: SourceRevision.from_json(next(iter(texts))) if len(texts) == 1 else None
           for side, texts in revisions.items()}
    for spec in specs:
        # In a container the worker's probe sees only the container's own cgroup, not the side's quota above it
        # (bench/ab/image_side.py): the side's spec says what it was.
        if spec.image and spec.cpus and spec.name in envs:
            envs[spec.name]["CPU quota"] = f"{spec.cpus:g} CPUs"
    return diff_environments(envs["A"], envs["B"], differing_files(one["A"], one["B"]))


def _plain(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def print_results(results, diffs, settings, session_id) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160, soft_wrap=False)
    table = Table(title=f"ab {session_id}: B against A (paired, interleaved)", title_justify="left")
    for col in ("cell", "pairs", "A img/s", "B img/s", "ratio B/A", "interval", "p (B slower)", "noise (sd log)",
                "detects ≥", "verdict"):
        table.add_column(col, justify="left" if col in ("cell", "verdict") else "right")
    for r in results:
        med = (lambda xs: sorted(xs)[len(xs) // 2] if xs else math.nan)
        interval = "-" if not math.isfinite(r["ci_low"]) else \
            f"{r['ci_low']:.3f}–{r['ci_high']:.3f} ({r['level']:.0%})"
        table.add_row(r["cell"], f"{r['pairs']}/{r['pairs_planned']}", _fmt(med(r["a_values"])),
                      _fmt(med(r["b_values"])), _fmt(r["ratio"], 3), interval, _fmt(r["p_slower"], 3),
                      _fmt(r["sd_log"], 3), "-" if not math.isfinite(r["detectable"]) else f"{r['detectable']:.1%}",
                      r["verdict"])
    console.print(table)
    print_differences(diffs)
    counts = verdict_counts(results)
    print(f"ab: {len(results)} cells: " + ", ".join(f"{n} {v}" for v, n in counts.items()) +
          f" (paired t on log ratios, one-sided alpha {settings.alpha:g}; min effect {settings.min_effect:.0%}; "
          f"'detects ≥': the smallest slowdown caught with {settings.power:.0%} power at the observed noise)")


def print_differences(diffs) -> None:
    from bench.commands.lines import print_changes

    print_changes(diffs, "side A", "side B")


def _fmt(x, digits: int = 1) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"
