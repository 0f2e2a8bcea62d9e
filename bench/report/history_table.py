"""`bench history`'s output, rendered from its rows (bench/commands/history.py: a dict per cell, its runs' rates in the
cell's own unit and its change points with what changed there; docs/ci/history-result.schema.json is their JSON):
a table for people, one line per cell within the console's 120 columns (the trend a sparkline of the latest runs),
each change point's sentence after it; and a GitHub-Markdown table. Computes nothing but the sparkline."""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from bench.analysis.missing import MISSING, is_missing
from bench.cells.label_parts import relative_labels, shared_title
from bench.cells.units import format_quoted

BARS = "▁▂▃▄▅▆▇█"
TREND_RUNS = 16  # the table's sparkline shows this many latest runs (the JSON has every run)

Row = Mapping[str, Any]


def sparkline(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    if hi <= lo:
        return BARS[3] * len(values)
    return "".join(BARS[min(len(BARS) - 1, int((v - lo) / (hi - lo) * len(BARS)))] for v in values)


def when(unix: Any, fmt: str = "%Y-%m-%d %H:%M") -> str:
    return "time not recorded" if is_missing(unix) else time.strftime(fmt, time.gmtime(unix))


def value(row: Row, v: float) -> str:
    return format_quoted(v, row["units_per_sample"])


def rate(row: Row, v: float) -> str:
    return f"{value(row, v)} {row['rate_unit']}"


def change_text(cp: Row) -> str:
    """A change point, short: '0.80× at run 7'."""
    return f"{cp['ratio']:.2f}× at run {cp['at_run']}"


def change_sentence(row: Row, cp: Row) -> str:
    runs = len(row["runs"])
    return (f"change point at run {cp['at_run']} of {runs} ({cp['run_after']}, {when(cp['start_unix'])}): "
            f"{value(row, cp['before'])} → {rate(row, cp['after'])} ({cp['ratio']:.2f}×), "
            f"after run {cp['run_before']}")


def title(rows: Sequence[Row], store: str) -> tuple[str, list[str]]:
    """The table's title line and each row's label, less what every cell shares (named in the title)."""
    short, shared = relative_labels([r["label"] for r in rows])
    every = shared_title(shared, len(rows))
    return f"history of {store}" + (f" · {every}" if every else ""), short


def table(rows: Sequence[Row], labels: Sequence[str]):
    """One rich Table, a line per cell."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=0, header_style="bold")
    t.add_column("cell id", no_wrap=True)
    t.add_column("cell")  # gives way first: cut with an ellipsis
    for name, justify in (("runs", "right"), ("first", "left"), ("last", "left"), ("latest", "right"),
                          ("range", "right"), (f"last {TREND_RUNS} runs", "left")):
        t.add_column(name, justify=justify, no_wrap=True)
    t.add_column("change points")
    for row, label in zip(rows, labels):
        rates = [r["rate"] for r in row["runs"]]
        changes = "; ".join(change_text(cp) for cp in row["change_points"]) or "none"
        t.add_row(row["cell_id"], Text(label, no_wrap=True, overflow="ellipsis"), str(len(rates)),
                  when(row["runs"][0]["start_unix"], "%Y-%m-%d"), when(row["runs"][-1]["start_unix"], "%Y-%m-%d"),
                  rate(row, row["latest"]), f"{value(row, row['low'])}–{value(row, row['high'])}",
                  sparkline(rates[-TREND_RUNS:]), Text(changes, no_wrap=True, overflow="ellipsis"))
    return t


def details(rows: Sequence[Row], every_run: bool) -> list[str]:
    """After the table: each change point's sentence with what changed there, and (`every_run`) each run's rate."""
    lines = []
    for row in rows:
        if not row["change_points"] and not every_run:
            continue
        lines.append(f"{row['label']} ({row['cell_id']}):")
        if every_run:
            lines += [f"    {r['run_id']}  {when(r['start_unix'])}  {rate(row, r['rate']):>16}" for r in row["runs"]]
        for cp in row["change_points"]:
            lines.append(f"  {change_sentence(row, cp)}")
            lines += [f"    what changed: {line}" for line in cp["what_changed"]] or \
                ["    what changed: nothing recorded differs between these two runs"]
    return lines


def markdown(rows: Sequence[Row]) -> str:
    """One GitHub-Markdown table of every cell, whole labels, each change point in full."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    head = ("cell_id", "cell", "runs", "first", "last", "latest", "range", "change points")
    lines = ["| " + " | ".join(head) + " |", "|---|---|---:|---|---|---:|---:|---|"]
    for row in rows:
        changes = "; ".join(change_sentence(row, cp) for cp in row["change_points"]) or MISSING
        figures = (row["cell_id"], row["label"], str(len(row["runs"])), when(row["runs"][0]["start_unix"]),
                   when(row["runs"][-1]["start_unix"]), rate(row, row["latest"]),
                   f"{value(row, row['low'])}–{rate(row, row['high'])}", changes)
        lines.append("| " + " | ".join(cell(x) for x in figures) + " |")
    return "\n".join(lines)
