"""The options several verbs share, in one place, so that no verb imports another: the --store option, --where,
--format, the baselines folder, the CI output options and their paths, and the backend a matrix and --backend name.
The lines several verbs print are in bench/commands/lines.py, the console that prints their tables in
bench/commands/console.py. Light at the top, like the verbs (the parser is built from every verb module on every
call)."""
from __future__ import annotations

from bench.core.errors import BenchInputError

# Where the results store is unless --store says otherwise (relative to where bench runs). Written here once: every
# verb that reads or writes the store takes its --store from add_store_argument.
DEFAULT_STORE = "results/bench.db"
# Where baseline files are named and saved unless --baselines-dir says otherwise (`check`, `baseline save|list`).
DEFAULT_BASELINES_DIR = "baselines"


def add_store_argument(parser) -> None:
    """The --store option, the same for every verb that uses the results store."""
    parser.add_argument("--store", default=DEFAULT_STORE, help=f"the results store (default: {DEFAULT_STORE})")


def add_where_argument(parser, what: str) -> None:
    """--where, the same for `plan`, `run`, `report` and `status`: bench/cells/selection.py's syntax
    (`key=value[,key=v1|v2...]` or a cell id), parsed and applied by its `select`; `what`: what the selection
    chooses, for the help."""
    parser.add_argument("--where", default=None, metavar="SELECTION",
                        help=f"only these cells: key=value[,key=v1|v2...] or a cell id, e.g. mpi=gloo,gpus=2 ({what})")


# What a verb that reads results prints: a table for people, JSON for scripts (a schema under docs/ci/ each), or a
# GitHub-Markdown table.
FORMATS = ("table", "json", "md")


def add_format_argument(parser, json_is: str) -> None:
    """--format, the same for every verb that prints results; `json_is`: what its JSON is, for the help."""
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help=f"table (default: for people, 120 columns), json ({json_is}) or md (a GitHub-Markdown "
                             "table)")


def add_baselines_dir_argument(parser) -> None:
    """The --baselines-dir option, the same for every verb that names baseline files."""
    parser.add_argument("--baselines-dir", default=DEFAULT_BASELINES_DIR,
                        help=f"where baseline files are (default: {DEFAULT_BASELINES_DIR})")


def add_ci_output_arguments(parser) -> None:
    """--junit and --github, the same for `check` and `ab`."""
    parser.add_argument("--junit", dest="junit_path", default=None, metavar="PATH",
                        help="also write JUnit XML: one test case per cell, a regression is a failure")
    parser.add_argument("--github", action="store_true",
                        help="GitHub Actions: Markdown summary to $GITHUB_STEP_SUMMARY, ::error/::warning annotations")


def check_output_path(option: str, path: str | None) -> None:
    """An output file's folder must exist and be writable before anything is computed (bad input: exit 2)."""
    import os
    from pathlib import Path

    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise BenchInputError(f"{option} {path}: is a directory, expected a file path")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise BenchInputError(f"{option} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise BenchInputError(f"{option} {path}: not writable")


def backend_for(name: str | None, matrix, results_dir, timeout: float | None = None):
    """The backend `--backend` names, else the matrix's, with the matrix's settings for it."""
    from pathlib import Path

    from bench.backends import make_backend as make

    return make(name or matrix.spec.backend.name, matrix.spec.backend, Path(results_dir), timeout)
