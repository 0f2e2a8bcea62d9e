"""`bench history`: each cell's throughput over the runs in the store, with its change points (bench/analysis/
history.py) and what changed in the recorded environment there (bench/analysis/envdiff.py): a table, a line per cell
(bench/report/history_table.py), then each change point's sentence; `--format json` the rows
(docs/ci/history-result.schema.json), `--format md` a Markdown table."""
from __future__ import annotations

import json

from bench.commands import EXIT_OK
from bench.commands.shared import add_format_argument, add_store_argument
from bench.core.errors import BenchInputError

HELP = "each cell's throughput over runs, with change points and what changed there"


def add_arguments(parser) -> None:
    add_store_argument(parser)
    parser.add_argument("--cell", default=None, metavar="SELECTOR",
                        help="only cells matching key=value[|value][,key=value] (or a cell id)")
    parser.add_argument("--min-shift", type=float, default=0.05,
                        help="smallest step between levels reported as a change point (default 0.05 = 5%%)")
    parser.add_argument("--runs", action="store_true", help="list every run's value, not only the sparkline")
    add_format_argument(parser, "a list of cell objects, docs/ci/history-result.schema.json")


def environment_change(store, cell_id: str, run_before: str, run_after: str, versions: dict[str, str],
                       sources: dict[str, str]):
    """What differs between the cell's records in the two runs (and their runs' bench versions and sources)."""
    from bench.analysis.envdiff import diff_environments, environment_of

    def env(run_id):
        recs = [json.loads(r["record_json"]) for r in store.records(run_id) if r["cell_id"] == cell_id]
        return environment_of(recs, [versions.get(run_id, "")], [sources.get(run_id, "")])

    return diff_environments(env(run_before), env(run_after))


def _unix(v) -> float | None:
    from bench.analysis.missing import is_missing

    return None if is_missing(v) else float(v)


def history_rows(store, df, series, changes) -> list[dict]:
    """One dict per cell (docs/ci/history-result.schema.json): its runs in time order with their rates in the
    cell's own unit (img/s, tokens/s), and its change points with what changed in the recorded environment there."""
    from bench.cells.label import cell_label
    from bench.cells.units import IMAGES, quoted, unit_of_cell
    from bench.core.source_revision import source_text

    runs = store.runs()
    versions = {r["run_id"]: r["bench_version"] for r in runs}
    sources = {r["run_id"]: source_text(r) for r in runs}
    firsts = {r["cell_id"]: r for r in df.drop_duplicates("cell_id").to_dict("records")}
    rows = []
    for cell_id, points in series.groupby("cell_id", sort=False):
        unit = unit_of_cell(firsts[cell_id]) or IMAGES
        rates = [quoted(float(v), unit) for v in points["samples_per_sec"]]
        starts = [_unix(v) for v in points["start_unix"]]
        cps = [{"at_run": cp.index + 1, "run_before": cp.run_before, "run_after": cp.run_after,
                "start_unix": starts[cp.index], "before": quoted(cp.before, unit), "after": quoted(cp.after, unit),
                "ratio": cp.ratio,
                "what_changed": [d.line() for d in environment_change(store, cell_id, cp.run_before, cp.run_after,
                                                                      versions, sources)[:12]]}
               for cp in changes[cell_id]]
        rows.append({"cell_id": cell_id, "label": cell_label(firsts[cell_id]), "rate_unit": unit.rate,
                     "units_per_sample": unit.per_sample,
                     "runs": [{"run_id": str(r), "start_unix": s, "rate": v}
                              for r, s, v in zip(points["run_id"], starts, rates)],
                     "latest": rates[-1], "low": min(rates), "high": max(rates), "change_points": cps})
    return rows


def run(args) -> int:
    from bench.analysis.collectives import training_only
    from bench.analysis.history import cell_histories, run_series
    from bench.cells.selection import matches, parse_selection
    from bench.checks.sides import open_store_with_runs

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
        rows = history_rows(store, df, series, changes)
    finally:
        store.close()
    if args.format == "json":
        print(json.dumps(rows, indent=1, allow_nan=False))
        return EXIT_OK
    from bench.report import history_table as out

    if args.format == "md":
        print(out.markdown(rows))
        return EXIT_OK
    from bench.commands.console import stdout_console

    console = stdout_console()
    heading, labels = out.title(rows, args.store)
    console.say(heading, wrap=True)
    console.print_table(out.table(rows, labels))
    for line in out.details(rows, args.runs):
        console.say(line)
    n_changes = sum(len(r["change_points"]) for r in rows)
    console.say(f"history: {len(rows)} cells over {series['run_id'].nunique()} runs; {n_changes} change points "
                f"(PELT on log throughput, min shift {args.min_shift:.0%})")
    return EXIT_OK
