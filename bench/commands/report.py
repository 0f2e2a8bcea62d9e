"""`bench report`: the HTML/Markdown/PNG report from the store."""
from __future__ import annotations

from bench.commands import EXIT_OK
from bench.commands.shared import add_store_argument

HELP = "write the HTML/Markdown/PNG report from the store"


def add_arguments(parser) -> None:
    add_store_argument(parser)
    parser.add_argument("--out", default="reports")
    parser.add_argument("--where", default=None,
                        help="cells to report: key=value[,key=v1|v2...], e.g. gpu=V100,mpi=gloo")
    parser.add_argument("--prices", default=None,
                        help="YAML: gpu → {price_per_hour_usd, price_read}; overrides catalogue")


def run(args) -> int:
    from pathlib import Path

    from bench.commands.lines import probe_entries
    from bench.report.render import report_from_store
    from bench.report.sections.context import PROBES

    token = PROBES.set(probe_entries(args.store))  # co-located cells' expected values (bench/analysis/probe.py)
    try:
        paths = report_from_store(args.store, Path(args.out), where=args.where, prices_file=args.prices)
    finally:
        PROBES.reset(token)
    for path in paths:
        print(path)
    return EXIT_OK
