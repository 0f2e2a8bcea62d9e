"""`bench ab`'s verdicts for people and as Markdown, rendered from its per-cell results (bench/commands/ab.py's
judge(): a dict per cell with its label, pairs, both sides' values and bench/analysis/paired.py's verdict); computes
nothing but each side's median. The table is one line per cell within the console's 120 columns, each cell named by
what sets it apart from the others (bench/cells/label_parts.py, the shared part in the title). The JSON is
bench/ci_output/ab_json.py's (docs/ci/ab-result.schema.json)."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from bench.cells.label_parts import relative_labels, shared_title
from bench.cells.units import IMAGES, format_rate, unit_of_cell

STYLES = {"regressed": "bold red", "improved": "green", "undecided": "yellow", "insufficient-data": "dim"}
MISSING = "-"

Result = Mapping[str, Any]


def number(x: float | None, digits: int = 1) -> str:
    return MISSING if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def interval_text(r: Result) -> str:
    """The ratio's anytime-valid interval, 'unbounded' while it has no upper end yet (2 pairs or more)."""
    if not math.isfinite(r["ci_low"]) or not math.isfinite(r["ci_high"]) or r["ci_low"] <= 0:
        return "unbounded" if r["pairs"] >= 2 else MISSING
    return f"{r['ci_low']:.3f}–{r['ci_high']:.3f}"


def side_rate(r: Result, values: Sequence[float]) -> str:
    """A side's median over the complete pairs, in the cell's own unit (img/s, tokens/s)."""
    if not values:
        return MISSING
    return format_rate(sorted(values)[len(values) // 2], unit_of_cell(r) or IMAGES)


def title(session_id: str, results: Sequence[Result]) -> tuple[str, list[str]]:
    """The table's title line and each row's label, less what every cell shares (named in the title)."""
    short, shared = relative_labels([r["cell"] for r in results])
    every = shared_title(shared, len(results))
    return (f"ab {session_id}: B against A (paired, interleaved, decided sequentially)"
            + (f" · {every}" if every else "")), short


def table(results: Sequence[Result], labels: Sequence[str], level: str):
    """One rich Table, a line per cell (`level`: the interval's confidence, '95%')."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=0, header_style="bold")
    t.add_column("cell")  # the only column that gives way: cut with an ellipsis
    for name in ("pairs", "A", "B", "ratio B/A", f"{level} interval", "p change", "sd log"):
        t.add_column(name, justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    for r, label in zip(results, labels):
        t.add_row(Text(label, no_wrap=True, overflow="ellipsis"), f"{r['pairs']}/{r['pairs_run']}",
                  side_rate(r, r["a_values"]), side_rate(r, r["b_values"]), number(r["ratio"], 3), interval_text(r),
                  number(r["p_change"], 3), number(r["sd_log"], 3),
                  Text(r["verdict"], style=STYLES.get(r["verdict"], "")))
    return t


def markdown(results: Sequence[Result], level: str) -> str:
    """One GitHub-Markdown table of every cell, whole labels, each side's median with its unit, and why."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    head = ("cell", "pairs", "A", "B", "ratio B/A", f"{level} interval", "p (any change)", "noise (sd log)", "verdict",
            "why")
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in results:
        figures = (r["cell"], f"{r['pairs']}/{r['pairs_run']}", side_rate(r, r["a_values"]),
                   side_rate(r, r["b_values"]), number(r["ratio"], 3), interval_text(r), number(r["p_change"], 3),
                   number(r["sd_log"], 3), r["verdict"], r["why"] or "")
        lines.append("| " + " | ".join(cell(x) for x in figures) + " |")
    return "\n".join(lines)
