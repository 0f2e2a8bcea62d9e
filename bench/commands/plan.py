"""`bench plan MATRIX`: a summary of a matrix's cells (counts by status and by skip reason, and the planned cells);
every cell with `--all` or `--format json`; optionally how each planned cell would run."""
from __future__ import annotations

import json
import shlex
import sys
from collections import Counter

from bench.backend_settings.registry import BACKENDS
from bench.commands import EXIT_OK
from bench.commands.shared import add_where_argument, backend_for

HELP = "expand a matrix: counts by status and skip reason, and the planned cells (every cell with --all)"


def add_arguments(parser) -> None:
    parser.add_argument("matrix")
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="json lists every cell (with its status and reason) whatever --all says")
    parser.add_argument("--all", action="store_true", help="list every cell, skipped ones too, as a table")
    parser.add_argument("--show-commands", action="store_true",
                        help="add the exact argv and env of each runnable cell")
    parser.add_argument("--backend", choices=tuple(BACKENDS), default=None)
    add_where_argument(parser, "what `bench run --where` runs")


def run(args) -> int:
    from pathlib import Path

    from bench.execution.runner import new_run_id
    from bench.planning.matrix import load_matrix
    from bench.planning.plan import plan_cells, select_cells

    matrix = load_matrix(args.matrix)
    backend = backend_for(args.backend, matrix, Path("results"))
    planned = select_cells(plan_cells(matrix.cells(), backend), args.where)
    run_id = "RUN_ID" if args.show_commands else new_run_id()
    if args.format == "json":
        rows = []
        for p in planned:
            row = {"cell_id": p.cell_id, **p.cell, "nodes": p.nodes, "status": p.status, "reason": p.reason}
            if args.show_commands and p.runnable:
                row["command"] = backend.describe(p, run_id)
            rows.append(row)
        json.dump(rows, sys.stdout, indent=1)
        print()
        return EXIT_OK
    from rich.text import Text

    from bench.commands.console import stdout_console

    console = stdout_console()
    if args.all:
        _print_every_cell(console, matrix.name, planned)
    else:
        # Plain lines, not a rich table: printing thousands of rows through rich took seconds. A reader that goes
        # away (`bench plan m.yaml | head`) ends it as every verb (bench.cli: exit 141).
        name = matrix.name + (f" (--where {args.where})" if args.where else "")
        print("\n".join(summary_lines(name, planned)), flush=True)
    if args.show_commands:
        for p in planned:
            if p.runnable:
                console.print(Text.assemble("\n", (p.cell_id, "bold"), f" {p.label()}"))
                for key, value in backend.describe(p, run_id).items():
                    console.say(_show(key, value))
    return EXIT_OK


def summary_lines(name: str, planned) -> list[str]:
    """Counts by status, counts by skip reason (most common first), then one line per planned cell."""
    runnable = [p for p in planned if p.runnable]
    lines = [f"{name}: {len(planned)} cells, {len(runnable)} planned, {len(planned) - len(runnable)} skipped"]
    reasons = Counter(p.reason for p in planned if not p.runnable)
    if reasons:
        lines.append("")
        lines.append("skipped, by reason:")
        width = len(str(max(reasons.values())))
        lines += [f"  {count:>{width}}  {reason}" for reason, count in
                  sorted(reasons.items(), key=lambda item: (-item[1], item[0]))]
    lines.append("")
    if runnable:
        lines.append("planned cells:")
        lines += [f"  {p.cell_id}  {p.label()}" for p in runnable]
    else:
        lines.append("planned cells: none")
    lines.append("")
    lines.append("(every cell: --all, or --format json)")
    return lines


def _print_every_cell(console, name: str, planned) -> None:
    from rich.table import Table

    table = Table(title=f"{name}: {len(planned)} cells, {sum(p.runnable for p in planned)} planned",
                  title_justify="left")
    # The cell by its one label (bench/cells/label.py): what it is and every setting that differs from the defaults.
    for col in ("cell_id", "cell", "status", "reason"):
        table.add_column(col, overflow="fold", no_wrap=col in ("cell_id", "status"))
    for p in planned:
        table.add_row(p.cell_id, p.label(), p.status, p.reason or "")
    console.print_table(table)


def _show(key: str, value) -> str:
    """One part of a cell's launch for `plan --show-commands`: argv and env as shell-quoted text, documents
    (an sbatch script, an Azure ML job YAML) as they are, indented."""
    if key == "argv":
        return "  argv: " + shlex.join(value)
    if key == "env":
        return "  env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(value.items()))
    return f"  {key}:\n" + "\n".join("    " + line for line in str(value).splitlines())
