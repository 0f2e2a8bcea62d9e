"""`bench report`: the HTML/Markdown/PNG report from the store."""
from __future__ import annotations

from bench.commands import EXIT_OK
from bench.commands.shared import add_store_argument, add_where_argument

HELP = "write the HTML/Markdown/PNG report from the store"


def add_arguments(parser) -> None:
    add_store_argument(parser)
    parser.add_argument("--out", default="reports")
    add_where_argument(parser, "of the store's cells, failed ones too")
    parser.add_argument("--prices", default=None,
                        help="YAML: gpu → {price_per_hour_usd, price_read}; overrides catalogue")


def run(args) -> int:
    from pathlib import Path

    from bench.commands.lines import probe_entries
    from bench.report.render import report_from_store
    from bench.report.sections.context import PROBES

    _check_selection(args.store, args.where)
    token = PROBES.set(probe_entries(args.store))  # co-located cells' expected values (bench/analysis/probe.py)
    try:
        paths = report_from_store(args.store, Path(args.out), where=args.where, prices_file=args.prices)
    finally:
        PROBES.reset(token)
    for path in paths:
        print(path)
    return EXIT_OK


def _check_selection(store_path: str, where: str | None) -> None:
    """A --where that is malformed or picks none of the store's cells stops here, in every verb's words
    (bench/cells/selection.py's select), before anything is written."""
    from bench.cells.selection import parse_selection, select
    from bench.store import Store

    if not parse_selection(where, "--where"):
        return
    with Store(store_path, read_only=True) as store:
        records = store.dataframe(record_json=False)
    if not records.empty:  # an empty store is the report's own refusal, naming what to run first
        select(records, where, f"the {records['cell_id'].nunique()} cells in the store")
