"""`bench status`: the runs in the store and, for the latest complete run of each training cell, a table of its rate
with its 95% interval, speedup and scaling efficiency, expected value and verdict (bench/analysis/status_rows.py,
rendered by bench/report/status_table.py), grouped by run and by workload. `-v` adds the sentences behind them: each
multi-worker cell's expected value, verdict and slow rank, the probes they rest on and where the step time went
(bench/analysis/expected.py), each GPU cell's MFU beside its power and energy (bench/analysis/mfu.py), and each
layout cell's peak memory beside the memory model's, its pipeline bubble beside (p − 1)/m and each mesh dimension's
collective time per step (bench/analysis/layout_cells.py; the JSON rows' `layout`); `--cell` shows one cell with
its sentences; `--where` selects cells (bench/cells/selection.py); `--format json|md` writes the rows
(docs/ci/status-result.schema.json)."""
from __future__ import annotations

from bench.commands import EXIT_OK
from bench.commands.lines import expected_entries, mfu_entries, probe_entries
from bench.commands.shared import add_format_argument, add_store_argument, add_where_argument
from bench.core.errors import BenchInputError

HELP = "runs in the store, the state of their cells, and whether each cell's figure is as expected"
EXPECTED_TITLE = "expected vs measured (latest complete run of each cell):"
MFU_TITLE = "MFU (model FLOPs ÷ dense peak), power and energy (latest complete run of each GPU cell):"
LAYOUT_TITLE = ("parallel layouts, measured beside the model (latest complete run of each layout cell; the model: "
                "bench/layouts/memory.py, bubble (p−1)/m):")


def add_arguments(parser) -> None:
    add_store_argument(parser)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="after the table, the sentences behind it: expected vs measured, probes, step split, MFU")
    parser.add_argument("--cell", default=None, metavar="ID",
                        help="one cell (its id or a unique prefix of it): its row and its sentences")
    add_where_argument(parser, "of those with a complete run")
    add_format_argument(parser, "a list of row objects, docs/ci/status-result.schema.json")


def _one_cell(prefix: str, known: set[str]) -> str:
    hits = sorted(c for c in known if c.startswith(prefix.strip().lower())) if prefix.strip() else []
    if not hits:
        raise BenchInputError(f"no cell '{prefix}' in the store", "--cell")
    if len(hits) > 1:
        raise BenchInputError(f"'{prefix}' is the start of {len(hits)} cells' ids ({', '.join(hits[:4])}"
                              f"{', ...' if len(hits) > 4 else ''}): give more of it", "--cell")
    return hits[0]


def _selected(judged, where: str | None) -> set[str] | None:
    """The cell ids --where selects of the judged cells (None: no --where); a selection of none is bad input."""
    import pandas as pd

    from bench.cells.selection import select

    if where is None or not where.strip():
        return None
    table = judged.table if judged is not None else pd.DataFrame()
    return set(select(table, where, f"the {len(table)} cells with a complete run")["cell_id"])


def run(args) -> int:
    from bench.analysis.judged import judge
    from bench.analysis.layout_cells import cell_layouts, with_layouts
    from bench.analysis.mfu import with_power
    from bench.analysis.scaling import split_imported
    from bench.analysis.status_rows import grouped, run_counts, status_rows, with_layout_figures
    from bench.cells.selection import parse_selection
    from bench.commands.console import stdout_console
    from bench.core.source_revision import source_text
    from bench.launch import analysis_facts
    from bench.report import status_table as out
    from bench.report.layout_records import layout_records
    from bench.report.power import power_records
    from bench.store import Store

    parse_selection(args.where, "--where")  # a malformed selection stops before the store is read
    prose = args.format == "table" and (args.verbose or args.cell is not None)
    with Store(args.store, read_only=True) as store:
        runs = store.runs()
        records = store.dataframe(record_json=False)
        judged = judge(records, store.collectives(), store.rank_windows(), probe_entries(args.store),
                       flavours=analysis_facts())
        layouts = cell_layouts(with_layouts(judged.ok, layout_records(store, judged.ok))) if judged is not None \
            else {}
        complete = len(store.completed_cells())
        gpu = mfu_entries(with_power(records, power_records(store, records))) if prose else []
    chosen = _selected(judged, args.where)
    measured = split_imported(records)[0]
    if args.cell is not None:
        cell = _one_cell(args.cell, set(measured["cell_id"]) if not measured.empty else set())
        if chosen is not None and cell not in chosen:
            raise BenchInputError(f"cell {cell} is not one of the cells --where {args.where} selects", "--cell")
        chosen = {cell}
    rows = [r for r in with_layout_figures(status_rows(judged), layouts) if chosen is None or r.cell_id in chosen]
    shown = [run_["run_id"] for run_ in runs] if chosen is None else []  # every run's header, unless cells are chosen
    groups = grouped(rows, shown)
    if args.format != "table":
        ordered = [row for _, workloads in groups for _, of_group in workloads for row in of_group]
        print(out.json_text(ordered) if args.format == "json" else out.markdown(ordered))
        return EXIT_OK
    if args.cell is not None and not rows:
        print(f"{args.cell}: cell {cell} has no complete run in {args.store}")
        return EXIT_OK
    counts, by_id = run_counts(measured), {r["run_id"]: r for r in runs}
    headers = {run_id: out.run_header(run_id, by_id.get(run_id), *counts.get(run_id, (0, 0)),
                                      source=source_text(by_id[run_id]) if args.verbose and run_id in by_id else "")
               for run_id in {*shown, *(r.run_id for r in rows)}}
    console = stdout_console()
    out.print_tables(console, groups, headers, wrap=not args.verbose)
    if args.cell is None:
        console.say(f"{complete} cell(s) complete in {args.store}" + (f" ({len(rows)} selected by --where)"
                                                                      if chosen is not None else ""), wrap=True)
    if prose:
        wanted = (lambda ids: True) if chosen is None else (lambda ids: bool(chosen & set(ids)))
        for title, entries in ((EXPECTED_TITLE, expected_entries(judged)), (MFU_TITLE, gpu),
                               (LAYOUT_TITLE, out.layout_entries(rows))):
            lines = [line for ids, line in entries if wanted(ids)]
            if lines:
                print(f"\n{title}")
                print("\n".join(lines))
    return EXIT_OK
