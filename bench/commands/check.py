"""`bench check --baseline B [--candidate C]`: regression verdicts per cell; exit 1 when a cell regressed.
bench/checks/sides.py finds the two sides, bench/analysis/regress.py decides, bench/report/check_table.py renders the
table and the Markdown, bench/ci_output/ the JSON (--format json on stdout, --json to a file) and the CI files."""
from __future__ import annotations

import sys

from bench.cells.label import cell_label
from bench.commands import EXIT_FAILED, EXIT_OK
from bench.commands.lines import what_changed
from bench.commands.shared import (add_baselines_dir_argument, add_ci_output_arguments, add_format_argument,
                                   add_store_argument, check_output_path)
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
    add_format_argument(parser, "the verdicts, docs/ci/check-result.schema.json, as --json writes them")
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


_MAX_ROWS = 60


def run(args) -> int:
    from pathlib import Path

    from bench.analysis.regress import (CheckSettings, compare, mark_cpu_differences, normalize_ratio_to, observations,
                                        summary_counts)
    from bench.checks.sides import resolve_side

    settings = CheckSettings(min_effect=args.min_effect)
    if args.format == "json" and args.github:
        raise BenchInputError("--format json prints one JSON document on stdout, where --github's annotations go "
                              "too: write the JSON with --json PATH beside --github")
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
    labels = {row["cell_id"]: cell_label(row) for row in result.drop_duplicates("cell_id").to_dict("records")}
    exit_code = EXIT_FAILED if counts["regressed"] else EXIT_OK
    if args.format != "table":
        changes = what_changed(base.environment, cand.environment, show=False)
        if args.format == "json":
            from bench.ci_output.check_json import check_document, document_text

            print(document_text(check_document(result, baseline=base.label, candidate=cand.label, settings=settings,
                                               normalize=args.normalize, counts=counts, exit_code=exit_code,
                                               labels=labels, changes=changes)))
        else:
            from bench.report.check_table import markdown

            print(markdown(result.to_dict("records"), labels, selector is not None))
        _feature_warnings(result, sys.stderr)  # stdout holds the document alone
        write_ci_outputs(args, result, counts, settings, base.label, cand.label, exit_code, changes)
        return exit_code
    _print_table(args, result, counts, base.label, cand.label, normalized=selector is not None)
    changes = what_changed(base.environment, cand.environment)
    write_ci_outputs(args, result, counts, settings, base.label, cand.label, exit_code, changes)
    # The summary stays the last line (CI logs and tests read it).
    how = f"normalised by {args.normalize[len('ratio-to:'):]}" if selector else "absolute rates"
    print(f"check: {len(result)} cells: " + ", ".join(f"{n} {v}" for v, n in counts.items()) +
          f" ({how}; min effect {settings.min_effect:.0%}; one-sided rank test at {settings.alpha:g})")
    return exit_code


def _print_table(args, result, counts, baseline: str, candidate: str, normalized: bool) -> None:
    """The table (unchanged cells left out past _MAX_ROWS unless --all), the shown cells' notes, and a warning line
    for each cell measured on different CPU features."""
    from bench.commands.console import stdout_console
    from bench.report.check_table import notes_before_features, table, title

    console = stdout_console()
    shown = result if len(result) <= _MAX_ROWS or args.all else result[result["verdict"] != "unchanged"]
    rows = shown.head(_MAX_ROWS if not args.all else len(shown)).to_dict("records")
    heading, labels = title(candidate, baseline, [cell_label(row) for row in rows])
    console.say(heading, wrap=True)
    console.print_table(table(rows, labels, normalized))
    hidden = len(result) - len(rows)
    if hidden:
        console.say(f"({hidden} more cells not shown, {counts['unchanged']} of all cells unchanged; --all shows every "
                    "cell)", wrap=True)
    notes = [(row["cell_id"], notes_before_features(row["note"])) for row in rows]
    for cell_id, note in notes:
        if note:
            console.say(f"note: {cell_id}  {note}")
    _feature_warnings(result, sys.stdout)


def _feature_warnings(result, file) -> None:
    """One unwrapped line per cell measured on different CPU features: such a verdict must not hide in a table."""
    from bench.report.check_table import CPU_FEATURES

    for row in result[result["note"].str.contains(CPU_FEATURES, regex=False, na=False)].to_dict("records"):
        feature_note = row["note"][row["note"].index(CPU_FEATURES):]  # always the last note
        print(f"warning: {cell_label(row)} ({row['cell_id']}) {row['verdict']}: {feature_note}", file=file)


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

