"""`bench status`'s output, rendered from its rows (bench/analysis/status_rows.py): a table per run and workload for
people (printed on the verbs' one console, bench/commands/console.py: 120 columns whatever the terminal, coloured
verdicts on a terminal only, so a pipe or a log reads the same wherever it ran), a JSON list of row objects
(docs/ci/status-result.schema.json) and a GitHub-Markdown table. Computes nothing: every figure is a row's.

The table names each cell by its label (bench.cells.label.cell_label) less the parts every cell of its table shares,
which the table's title line names once (bench/cells/label_parts.py).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench.analysis.missing import MISSING
from bench.analysis.status_rows import ABOVE, AS_EXPECTED, BELOW, NO_EXPECTED, StatusRow
from bench.cells.label_parts import relative_labels, shared_title
from bench.cells.units import format_quoted

COLOURS = {AS_EXPECTED: "green", BELOW: "bold red", ABOVE: "yellow", NO_EXPECTED: "dim"}


def run_header(run_id: str, run: Mapping[str, Any] | None, cells: int, failed: int, source: str = "") -> str:
    """A run's line: id, matrix, backend, cells run, failed, finished (and the source revision where given: -v)."""
    from bench.analysis.missing import text

    if run is None:
        return f"{run_id}  (not in the store's runs table)  cells run: {cells}  failed: {failed}"
    return (f"{run_id}  {text(run['matrix_name'], missing='(no matrix name)')}  "
            f"{text(run['backend'], missing='(no backend recorded)')}  cells run: {cells}  failed: {failed}  "
            f"{'finished' if run['finished_unix'] else 'unfinished'}" + (f"  source {source}" if source else ""))


def value_text(row: StatusRow, v: float | None) -> str:
    """A figure of the row in its rate unit's digits ('1,234.5' img/s, '14,820' tokens/s); a dash when missing."""
    return MISSING if v is None else format_quoted(v, row.units_per_sample)


def range_text(row: StatusRow, low: float | None, high: float | None) -> str:
    """An interval's two ends, 'low–high'; a dash when either is missing."""
    return MISSING if low is None or high is None else f"{value_text(row, low)}–{value_text(row, high)}"


def interval_text(row: StatusRow, v: float | None, low: float | None, high: float | None) -> str:
    if v is None:
        return MISSING
    if low is None or high is None:
        return value_text(row, v)
    return f"{value_text(row, v)} ({range_text(row, low, high)})"


def speedup_text(row: StatusRow) -> str:
    return MISSING if row.speedup is None else f"{row.speedup:.2f}×"


def efficiency_text(row: StatusRow) -> str:
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
                 interval_text(row, row.rate, row.rate_low, row.rate_high)]
        cells += [speedup_text(row), efficiency_text(row)] if scaled else []
        cells += [interval_text(row, row.expected, row.expected_low, row.expected_high)] if expected else []
        t.add_row(*cells, Text(row.verdict_text, style=COLOURS.get(row.verdict, "")))
    return t


def print_tables(out, groups: Iterable[tuple[str, list[tuple[str, list[StatusRow]]]]],
                 headers: Mapping[str, str], wrap: bool = True) -> None:
    """Each run's header line (wrapped at the console's width unless `wrap` is False), then a table per workload of
    its rows (bench.analysis.status_rows.grouped), its title naming what every cell of it shares."""
    from rich.text import Text

    for run_id, workloads in groups:
        out.say(headers[run_id], wrap=wrap)
        for workload, rows in workloads:
            labels, shared = relative_labels([r.label for r in rows])
            title = shared_title(shared, len(rows))
            out.print(Text(f"  {workload}" + (f" · {title}" if title else ""), style="bold"))
            out.print_table(table(rows, labels))


def json_text(rows: Iterable[StatusRow]) -> str:
    """The rows as a JSON list (docs/ci/status-result.schema.json): missing values are null."""
    return json.dumps([r.to_json() for r in rows], indent=1, allow_nan=False)


def layout_entries(rows: Iterable[StatusRow]) -> list[tuple[list[str], str]]:
    """(cell ids, line) of each layout cell's sentence for `bench status -v` (bench/report/layout_text.py)."""
    from bench.report.layout_text import status_line

    return [([r.cell_id], status_line(r.cell_id, r.label, r.layout)) for r in rows if r.layout is not None]


def markdown(rows: Iterable[StatusRow]) -> str:
    """One GitHub-Markdown table of every row, whole labels, each rate with its unit."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    head = ("run", "cell_id", "cell", "rate", "95% interval", "speedup", "efficiency", "expected", "95% interval",
            "verdict")
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        rate = f"{value_text(r, r.rate)} {r.rate_unit}"
        interval = range_text(r, r.rate_low, r.rate_high)
        expected = MISSING if r.expected is None else f"{value_text(r, r.expected)} {r.rate_unit}"
        e_interval = range_text(r, r.expected_low, r.expected_high)
        figures = (r.run_id, r.cell_id, r.label, rate, interval, speedup_text(r), efficiency_text(r), expected,
                   e_interval, r.verdict_text)
        lines.append("| " + " | ".join(cell(x) for x in figures) + " |")
    return "\n".join(lines)
