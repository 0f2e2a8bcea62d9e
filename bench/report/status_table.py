"""`bench status`'s output, rendered from its rows (bench/analysis/status_rows.py): a table per run and workload for
people (rich, WIDTH columns wide whatever the terminal: coloured verdicts on a terminal, plain text anywhere else, so
a pipe or a log reads the same wherever it ran), a JSON list of row objects (docs/ci/status-result.schema.json) and a
GitHub-Markdown table. Computes nothing: every figure is a row's.

The table names each cell by its label (bench.cells.label.cell_label) less the parts every cell of its table shares,
which the table's title line names once: within one run and workload the cells mostly differ in one or two settings,
and the whole label of every cell would not leave a 120-column line room for the figures.
"""
from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench.analysis.missing import MISSING
from bench.analysis.status_rows import ABOVE, AS_EXPECTED, BELOW, NO_EXPECTED, StatusRow
from bench.cells.units import format_quoted

_WORKERS = re.compile(r"\d+w")  # a label's worker count, e.g. "2w"
WIDTH = 120  # the most columns a line of the table output takes, on a terminal or not
COLOURS = {AS_EXPECTED: "green", BELOW: "bold red", ABOVE: "yellow", NO_EXPECTED: "dim"}


def console(file=None):
    """A rich Console for the table: WIDTH columns whatever the terminal (a narrower one wraps the lines rather than
    rich cutting figures short), colours on a terminal only, no escape codes anywhere else (whatever FORCE_COLOR
    says)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich exits 1 when the reader goes away (`bench status | head`), which reads as "a cell failed";
            # bench.cli answers a closed pipe as every verb does (128 + SIGPIPE)
            self.quiet = True
            raise BrokenPipeError

    file = file or sys.stdout
    tty = file.isatty()
    return _Console(file=file, width=WIDTH, color_system="auto" if tty else None, force_terminal=tty,
                    highlight=False, emoji=False)


def run_header(run_id: str, run: Mapping[str, Any] | None, cells: int, failed: int, source: str = "") -> str:
    """A run's line: id, matrix, backend, cells run, failed, finished (and the source revision where given: -v)."""
    from bench.analysis.missing import text

    if run is None:
        return f"{run_id}  (not in the store's runs table)  cells run: {cells}  failed: {failed}"
    return (f"{run_id}  {text(run['matrix_name'], missing='(no matrix name)')}  "
            f"{text(run['backend'], missing='(no backend recorded)')}  cells run: {cells}  failed: {failed}  "
            f"{'finished' if run['finished_unix'] else 'unfinished'}" + (f"  source {source}" if source else ""))


def _parts(label: str) -> tuple[list[str], list[str]]:
    path, *tokens = label.split(" ")
    return path.split("/"), tokens


def relative_labels(labels: Sequence[str]) -> tuple[list[str], str]:
    """Each label less the path parts and tokens every label shares but the worker count ("2w", kept in every row),
    and those shared parts as one label-like text ("cpu/ib=off fp32 b16"). Labels of distinct cells stay distinct
    (each differs from the others in a part that is then not shared)."""
    split = [_parts(label) for label in labels]
    if not split:
        return [], ""
    paths = {p for p in set.intersection(*(set(p) for p, _ in split)) if not _WORKERS.fullmatch(p)}
    tokens = set.intersection(*(set(t) for _, t in split))
    out = []
    for path, toks in split:
        rest = "/".join(p for p in path if p not in paths)
        out.append(" ".join(x for x in [rest, *(t for t in toks if t not in tokens)] if x))
    first_path, first_tokens = split[0]
    shared = " ".join(x for x in ["/".join(p for p in first_path if p in paths),
                                  *(t for t in first_tokens if t in tokens)] if x)
    return out, shared


def _value(row: StatusRow, v: float | None) -> str:
    return MISSING if v is None else format_quoted(v, row.units_per_sample)


def _interval(row: StatusRow, v: float | None, low: float | None, high: float | None) -> str:
    if v is None:
        return MISSING
    if low is None or high is None:
        return _value(row, v)
    return f"{_value(row, v)} ({_value(row, low)}–{_value(row, high)})"


def _speedup(row: StatusRow) -> str:
    return MISSING if row.speedup is None else f"{row.speedup:.2f}×"


def _efficiency(row: StatusRow) -> str:
    return MISSING if row.efficiency is None else f"{100 * row.efficiency:.0f}%"


def table(rows: Sequence[StatusRow], labels: Sequence[str]):
    """One rich Table of one workload's rows (labels: what to call each cell in it). The speedup and efficiency
    columns are left out where no row has them (no series of more than one cell), and the expected value's where no
    row has one (1-worker cells only): the room goes to the labels. The verdict column is always there."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    scaled = any(r.speedup is not None for r in rows)
    expected = any(r.expected is not None for r in rows)
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=0, header_style="bold")
    t.add_column("cell id", no_wrap=True)
    t.add_column("cell")  # the only column that gives way: cut with an ellipsis, never wrapped
    t.add_column(f"{rows[0].rate_unit} (95% CI)", justify="right", no_wrap=True)
    if scaled:
        t.add_column("S(N)", justify="right", no_wrap=True)  # speedup and efficiency, as bench/analysis/scaling.py
        t.add_column("E(N)", justify="right", no_wrap=True)
    if expected:
        t.add_column("expected (95% CI)", justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    for row, label in zip(rows, labels):
        cells = [row.cell_id, Text(label, no_wrap=True, overflow="ellipsis"),
                 _interval(row, row.rate, row.rate_low, row.rate_high)]
        cells += [_speedup(row), _efficiency(row)] if scaled else []
        cells += [_interval(row, row.expected, row.expected_low, row.expected_high)] if expected else []
        t.add_row(*cells, Text(row.verdict_text, style=COLOURS.get(row.verdict, "")))
    return t


def print_tables(out, groups: Iterable[tuple[str, list[tuple[str, list[StatusRow]]]]],
                 headers: Mapping[str, str], wrap: bool = True) -> None:
    """Each run's header line (wrapped at the console's width unless `wrap` is False), then a table per workload of
    its rows (bench.analysis.status_rows.grouped), its title naming what every cell of it shares."""
    from rich.text import Text

    for run_id, workloads in groups:
        out.print(Text(headers[run_id]), soft_wrap=not wrap)
        for workload, rows in workloads:
            labels, shared = relative_labels([r.label for r in rows])
            every = " · every cell: " if len(rows) > 1 else " · "
            out.print(Text(f"  {workload}" + (every + shared if shared else ""), style="bold"))
            with out.capture() as captured:
                out.print(table(rows, labels))
            # rich pads every line to the table's width: no trailing blanks in a pipe or a log
            out.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
            out.file.flush()


def json_text(rows: Iterable[StatusRow]) -> str:
    """The rows as a JSON list (docs/ci/status-result.schema.json): missing values are null."""
    return json.dumps([r.to_json() for r in rows], indent=1, allow_nan=False)


def markdown(rows: Iterable[StatusRow]) -> str:
    """One GitHub-Markdown table of every row, whole labels, each rate with its unit."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    head = ("run", "cell_id", "cell", "rate", "95% interval", "speedup", "efficiency", "expected", "95% interval",
            "verdict")
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        rate = f"{_value(r, r.rate)} {r.rate_unit}"
        interval = MISSING if r.rate_low is None else f"{_value(r, r.rate_low)}–{_value(r, r.rate_high)}"
        expected = MISSING if r.expected is None else f"{_value(r, r.expected)} {r.rate_unit}"
        e_interval = (MISSING if r.expected_low is None
                      else f"{_value(r, r.expected_low)}–{_value(r, r.expected_high)}")
        lines.append("| " + " | ".join(cell(x) for x in (r.run_id, r.cell_id, r.label, rate, interval, _speedup(r),
                                                           _efficiency(r), expected, e_interval, r.verdict_text))
                     + " |")
    return "\n".join(lines)
