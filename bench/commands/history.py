"""`bench history`: each cell's throughput over the runs in the store, with its change points (bench/analysis/
history.py) and what changed in the recorded environment there (bench/analysis/envdiff.py)."""
from __future__ import annotations

import time

from bench.commands import EXIT_OK
from bench.commands.shared import add_store_argument
from bench.core.errors import BenchInputError

HELP = "each cell's throughput over runs, with change points and what changed there"
_BARS = "▁▂▃▄▅▆▇█"


def add_arguments(parser) -> None:
    add_store_argument(parser)
    parser.add_argument("--cell", default=None, metavar="SELECTOR",
                        help="only cells matching key=value[|value][,key=value] (or a cell id)")
    parser.add_argument("--min-shift", type=float, default=0.05,
                        help="smallest step between levels reported as a change point (default 0.05 = 5%%)")
    parser.add_argument("--runs", action="store_true", help="list every run's value, not only the sparkline")


def sparkline(values) -> str:
    lo, hi = min(values), max(values)
    if hi <= lo:
        return _BARS[3] * len(values)
    return "".join(_BARS[min(len(_BARS) - 1, int((v - lo) / (hi - lo) * len(_BARS)))] for v in values)


def _when(unix) -> str:
    from bench.analysis.missing import is_missing

    return "time not recorded" if is_missing(unix) else time.strftime("%Y-%m-%d %H:%M", time.gmtime(unix))


def environment_change(store, cell_id: str, run_before: str, run_after: str, versions: dict[str, str],
                       sources: dict[str, str]):
    """What differs between the cell's records in the two runs (and their runs' bench versions and sources)."""
    import json

    from bench.analysis.envdiff import diff_environments, environment_of

    def env(run_id):
        recs = [json.loads(r["record_json"]) for r in store.records(run_id) if r["cell_id"] == cell_id]
        return environment_of(recs, [versions.get(run_id, "")], [sources.get(run_id, "")])

    return diff_environments(env(run_before), env(run_after))


def run(args) -> int:
    from bench.analysis.collectives import training_only
    from bench.cells.units import IMAGES, format_rate, format_value, unit_of_cell
    from bench.analysis.history import cell_histories, run_series
    from bench.cells.label import cell_label
    from bench.cells.selection import matches, parse_selection
    from bench.checks.sides import open_store_with_runs
    from bench.core.source_revision import source_text

    if not 0 < args.min_shift < 1:
        raise BenchInputError(f"--min-shift must be between 0 and 1, got {args.min_shift:g}")
    selector = parse_selection(args.cell, "--cell")
    store = open_store_with_runs(args.store)
    try:
        df = training_only(store.dataframe(record_json=False))
        if selector:
            df = df[matches(df, selector)]
        if df.empty:
            raise BenchInputError("no training records" + (f" match '{args.cell}'" if selector else ""), args.store)
        series = run_series(df)
        changes = cell_histories(series, min_shift=args.min_shift)
        runs = store.runs()
        versions = {r["run_id"]: r["bench_version"] for r in runs}
        sources = {r["run_id"]: source_text(r) for r in runs}
        firsts = df.drop_duplicates("cell_id").to_dict("records")
        labels = {r["cell_id"]: cell_label(r) for r in firsts}
        units = {r["cell_id"]: unit_of_cell(r) or IMAGES for r in firsts}  # the cell's own: img/s, tokens/s
        for cell_id, points in series.groupby("cell_id", sort=False):
            unit = units[cell_id]
            values = points["samples_per_sec"].tolist()
            print(f"{labels[cell_id]} ({cell_id}): {len(values)} runs, {_when(points['start_unix'].iloc[0])} → "
                  f"{_when(points['start_unix'].iloc[-1])}; latest {format_rate(values[-1], unit)}, range "
                  f"{format_value(min(values), unit)}–{format_rate(max(values), unit)}")
            print(f"  {sparkline(values)}")
            if args.runs:
                for p in points.to_dict("records"):
                    print(f"    {p['run_id']}  {_when(p['start_unix'])}  {format_rate(p['samples_per_sec'], unit, 8)}")
            for cp in changes[cell_id]:
                print(f"  change point at run {cp.index + 1} of {len(values)} ({cp.run_after}, "
                      f"{_when(points['start_unix'].iloc[cp.index])}): "
                      f"{format_value(cp.before, unit)} → {format_rate(cp.after, unit)} "
                      f"({cp.ratio:.2f}×), after run {cp.run_before}")
                diffs = environment_change(store, cell_id, cp.run_before, cp.run_after, versions, sources)
                if not diffs:
                    print("    what changed: nothing recorded differs between these two runs")
                for d in diffs[:12]:
                    print(f"    what changed: {d.line()}")
        n_changes = sum(len(v) for v in changes.values())
        print(f"history: {series['cell_id'].nunique()} cells over {series['run_id'].nunique()} runs; "
              f"{n_changes} change points (PELT on log throughput, min shift {args.min_shift:.0%})")
    finally:
        store.close()
    return EXIT_OK
