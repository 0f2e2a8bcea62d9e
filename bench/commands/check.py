"""`bench check --baseline B [--candidate C]`: regression verdicts per cell; exit 1 when a cell regressed.
bench/checks/sides.py finds the two sides, bench/analysis/regress.py decides, this prints."""
from __future__ import annotations

import sys

from bench.analysis import missing
from bench.cells.label import cell_label
from bench.cells.units import IMAGES, format_rate, unit_of_cell
from bench.commands import EXIT_FAILED, EXIT_OK
from bench.commands.lines import print_changes, what_changed
from bench.commands.shared import (add_baselines_dir_argument, add_ci_output_arguments, add_store_argument,
                                   check_output_path)
from bench.core.errors import BenchInputError

HELP = "regression verdicts: a candidate run against a baseline; exit 1 on regression"


def add_arguments(parser) -> None:
    parser.add_argument("--baseline", required=True,
                        help="baseline name/file, run id, run:ID, baseline:NAME or latest")
    parser.add_argument("--candidate", default="latest", help="the same forms (default: latest run in the store)")
    add_store_argument(parser)
    add_baselines_dir_argument(parser)
    parser.add_argument("--min-effect", type=float, default=0.05,
                        help="smallest |ratio - 1| called a change (0.05 = 5%%)")
    parser.add_argument("--normalize", default="none",
                        help="none, or ratio-to:SELECTION (one cell of the same run: key=value[,key=value] or a "
                             "cell id)")
    parser.add_argument("--all", action="store_true", help="list every cell, unchanged ones too")
    parser.add_argument("--json", dest="json_path", default=None, metavar="PATH",
                        help="also write the verdicts as JSON (schema: docs/ci/check-result.schema.json)")
    add_ci_output_arguments(parser)


def parse_normalize(text: str | None):
    """`none` (absolute images/sec) or `ratio-to:<selection>` (bench/cells/selection.py's syntax)."""
    from bench.cells.selection import parse_selection

    if text is None or text == "none":
        return None
    kind, sep, rest = text.partition(":")
    if kind != "ratio-to" or not sep or not rest.strip():
        raise BenchInputError(f"--normalize: expected 'none' or 'ratio-to:<key=value,...>', got '{text}'")
    return parse_selection(rest, "--normalize")


def _fmt(x: float, digits: int = 1) -> str:
    return missing.text(x, f"{{:.{digits}f}}")


_STYLE = {"regressed": "bold red", "improved": "green", "unchanged": "", "inconclusive": "yellow",
          "insufficient-data": "dim", "incomparable": "magenta"}
_MAX_ROWS = 60


def run(args) -> int:
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from bench.analysis.regress import (CheckSettings, compare, mark_cpu_differences, normalize_ratio_to, observations,
                                        summary_counts)
    from bench.checks.sides import resolve_side

    settings = CheckSettings(min_effect=args.min_effect)
    check_output_path("--json", args.json_path)
    check_output_path("--junit", args.junit_path)
    selector = parse_normalize(args.normalize)
    baselines_dir = Path(args.baselines_dir)
    base = resolve_side(args.baseline, store_path=args.store, baselines_dir=baselines_dir)
    cand = resolve_side(args.candidate, store_path=args.store, baselines_dir=baselines_dir)
    b_obs, c_obs = observations(base.windows), observations(cand.windows)
    if b_obs.empty:
        raise BenchInputError(f"the baseline ({base.label}) has no successful measurement")
    if c_obs.empty:
        raise BenchInputError(f"the candidate ({cand.label}) has no successful measurement")
    if selector is not None:
        b_obs = normalize_ratio_to(b_obs, selector, "baseline")
        c_obs = normalize_ratio_to(c_obs, selector, "candidate")
    result = mark_cpu_differences(compare(b_obs, c_obs, settings), base.windows, cand.windows)
    counts = summary_counts(result)

    # Each cell in its own unit (img/s, tokens/s), or all as ratios to the reference cell.
    unit = "× reference" if selector else "per cell's unit"
    console = Console(width=None if sys.stdout.isatty() else 160, soft_wrap=False)
    shown = result if len(result) <= _MAX_ROWS or args.all else result[result["verdict"] != "unchanged"]
    table = Table(title=f"check: {cand.label} against {base.label}", title_justify="left")
    for col, justify in (("cell", "left"), ("cell_id", "left"), ("n b/c", "right"), (f"baseline ({unit})", "right"),
                         (f"candidate ({unit})", "right"), ("ratio", "right"), ("interval", "right"),
                         ("p", "right"), ("verdict", "left"), ("note", "left")):
        table.add_column(col, justify=justify, overflow="fold")
    digits = 3 if selector else 1
    for row in shown.head(_MAX_ROWS if not args.all else len(shown)).to_dict("records"):
        interval = missing.MISSING if missing.is_missing(row["ci_low"]) or missing.is_missing(row["ci_high"]) else \
            f"{row['ci_low']:.3f}–{row['ci_high']:.3f} ({row['ci_coverage']:.0%})"
        rate_unit = None if selector else (unit_of_cell(row) or IMAGES)
        value = (lambda v: _fmt(v, digits)) if rate_unit is None else (lambda v: rate_text(v, rate_unit))
        table.add_row(cell_label(row), row["cell_id"], f"{row['n_baseline']}/{row['n_candidate']}",
                      value(row["baseline_median"]), value(row["candidate_median"]),
                      _fmt(row["ratio"], 3), interval, _fmt(row["p_value"], 3),
                      f"[{_STYLE[row['verdict']]}]{row['verdict']}[/]" if _STYLE[row["verdict"]] else row["verdict"],
                      missing.text(row["note"], missing=""))
    console.print(table)
    hidden = len(result) - min(len(shown), _MAX_ROWS if not args.all else len(shown))
    if hidden:
        console.print(f"({hidden} more cells not shown, {counts['unchanged']} of all cells unchanged; --all shows "
                      f"every cell)", highlight=False)
    for row in result[result["note"].str.contains("CPU features", regex=False, na=False)].to_dict("records"):
        # One unwrapped line per cell: a verdict across different machines must not hide in a folded table cell.
        feature_note = row["note"][row["note"].index("CPU features"):]  # always the last note
        print(f"warning: {cell_label(row)} ({row['cell_id']}) {row['verdict']}: {feature_note}")
    changes = what_changed(base.environment, cand.environment)
    exit_code = EXIT_FAILED if counts["regressed"] else EXIT_OK
    write_ci_outputs(args, result, counts, settings, base.label, cand.label, exit_code, changes)
    # The summary stays the last line (CI logs and tests read it).
    how = f"normalised by {args.normalize[len('ratio-to:'):]}" if selector else "absolute rates"
    print(f"check: {len(result)} cells: " + ", ".join(f"{n} {v}" for v, n in counts.items()) +
          f" ({how}; min effect {settings.min_effect:.0%}; one-sided rank test at {settings.alpha:g})")
    return exit_code


def rate_text(value, unit) -> str:
    return missing.MISSING if missing.is_missing(value) else format_rate(value, unit)


def write_ci_outputs(args, result, counts, settings, baseline: str, candidate: str, exit_code: int,
                     changes=()) -> None:
    """--json, --junit and --github (bench/ci_output/)."""
    if not (args.json_path or args.junit_path or args.github):
        return
    labels = {row["cell_id"]: cell_label(row) for row in result.drop_duplicates("cell_id").to_dict("records")}
    if args.json_path:
        from bench.ci_output.check_json import check_document, write_json

        write_json(args.json_path, check_document(result, baseline=baseline, candidate=candidate,
                                                  settings=settings, normalize=args.normalize, counts=counts,
                                                  exit_code=exit_code, labels=labels, changes=changes))
    if args.junit_path or args.github:
        from bench.ci_output.emit import write_junit_github
        from bench.ci_output.outcome import Heading, from_check

        write_junit_github(from_check(result, labels), Heading("bench check", f"{candidate} against {baseline}"),
                           counts, changes, junit_path=args.junit_path, github=args.github)

