"""`bench plan MATRIX`: every cell of a matrix, planned or skipped with the reason; optionally how each would run."""
from __future__ import annotations

import json
import shlex
import sys

from bench.backends import BACKENDS
from bench.commands import EXIT_OK

HELP = "expand a matrix and show every cell, planned or skipped with the reason"


def add_arguments(parser) -> None:
    parser.add_argument("matrix")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--show-commands", action="store_true",
                        help="add the exact argv and env of each runnable cell")
    parser.add_argument("--backend", choices=tuple(BACKENDS), default=None)


def make_backend(name: str | None, matrix, results_dir, timeout: float | None = None):
    """The backend `--backend` names, else the matrix's, with the matrix's settings for it."""
    from pathlib import Path

    from bench.backends import make_backend as make

    return make(name or matrix.spec.backend.name, matrix.spec.backend, Path(results_dir), timeout)


def run(args) -> int:
    from pathlib import Path

    from bench.matrix import load_matrix
    from bench.plan import plan_cells
    from bench.runner import new_run_id

    matrix = load_matrix(args.matrix)
    backend = make_backend(args.backend, matrix, Path("results"))
    planned = plan_cells(matrix.cells(), backend)
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
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{matrix.name}: {len(planned)} cells, {sum(p.runnable for p in planned)} planned")
    for col in ("cell_id", "gpu", "framework", "mpi", "ib", "gpus", "nodes", "status", "reason"):
        table.add_column(col, overflow="fold")
    for p in planned:
        c = p.cell
        table.add_row(p.cell_id, c["gpu"], c["framework"], c["mpi"], "on" if c["ib"] else "off", str(c["gpus"]),
                      str(p.nodes), p.status, p.reason or "")
    console.print(table)
    if args.show_commands:
        for p in planned:
            if p.runnable:
                console.print(f"\n[bold]{p.cell_id}[/] {p.label()}", highlight=False)
                for key, value in backend.describe(p, run_id).items():
                    console.print(_show(key, value), highlight=False, soft_wrap=True, markup=False)
    return EXIT_OK


def _show(key: str, value) -> str:
    """One part of a cell's launch for `plan --show-commands`: argv and env as shell-quoted text, documents
    (an sbatch script, an Azure ML job YAML) as they are, indented."""
    if key == "argv":
        return "  argv: " + shlex.join(value)
    if key == "env":
        return "  env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(value.items()))
    return f"  {key}:\n" + "\n".join("    " + line for line in str(value).splitlines())
