"""`bench check`'s verdicts for people and as Markdown, rendered from bench/analysis/regress.py's result (one row per
cell) and each cell's label; computes nothing. The table is one line per cell within the console's 120 columns:
each cell named by what sets it apart from the others (bench/cells/label_parts.py, the shared part in the title),
its notes in lines after the table. The JSON is bench/ci_output/check_json.py's (docs/ci/check-result.schema.json).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench.analysis import missing
from bench.cells.label_parts import relative_labels, shared_title
from bench.cells.units import IMAGES, format_rate, format_value, unit_of_cell

STYLES = {"regressed": "bold red", "improved": "green", "unchanged": "", "inconclusive": "yellow",
          "insufficient-data": "dim", "incomparable": "magenta"}
CPU_FEATURES = "CPU features"  # regress.mark_cpu_differences' note, always the last of a cell's notes

Row = Mapping[str, Any]


def figures(rows: Sequence[Row], normalized: bool, units_in_header: bool = True) -> tuple[str, Callable]:
    """(what the baseline and candidate columns' headers add, a function (row, value) -> text): ratios to the
    reference cell to 3 decimals when normalised; else rates in each cell's own unit, named once in the header where
    every row shares it (img/s, tokens/s) and `units_in_header`, beside each figure otherwise."""
    if normalized:
        return " (× reference)", lambda row, v: missing.text(v, "{:.3f}")
    units = {unit_of_cell(r) or IMAGES for r in rows}
    if units_in_header and len(units) == 1:
        (unit,) = units
        return f" ({unit.rate})", lambda row, v: missing.MISSING if missing.is_missing(v) else format_value(v, unit)
    return "", lambda row, v: missing.MISSING if missing.is_missing(v) else format_rate(v, unit_of_cell(row) or IMAGES)


def interval_text(row: Row) -> str:
    """The ratio's interval with the coverage it reaches ('0.950–1.050 (95%)'), a dash where there is none."""
    if missing.is_missing(row["ci_low"]) or missing.is_missing(row["ci_high"]):
        return missing.MISSING
    return f"{row['ci_low']:.3f}–{row['ci_high']:.3f} ({row['ci_coverage']:.0%})"


def notes_before_features(note: Any) -> str:
    """A cell's notes less the CPU-features one, which its own warning line carries."""
    text = missing.text(note, missing="")
    return text[:text.index(CPU_FEATURES)].rstrip("; ") if CPU_FEATURES in text else text


def title(candidate: str, baseline: str, labels: Sequence[str]) -> tuple[str, list[str]]:
    """The table's title line (what is checked against what, and what every cell shares) and each row's label."""
    short, shared = relative_labels(labels)
    every = shared_title(shared, len(labels))
    return f"check: {candidate} against {baseline}" + (f" · {every}" if every else ""), short


def table(rows: Sequence[Row], labels: Sequence[str], normalized: bool):
    """One rich Table, a line per row: labels as title() shortens them (the only column that gives way, cut with
    an ellipsis)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    unit, value = figures(rows, normalized)
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=0, header_style="bold")
    t.add_column("cell id", no_wrap=True)
    t.add_column("cell")
    for name in ("n b/c", f"baseline{unit}", f"candidate{unit}", "ratio", "interval", "p"):
        t.add_column(name, justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    for row, label in zip(rows, labels):
        t.add_row(row["cell_id"], Text(label, no_wrap=True, overflow="ellipsis"),
                  f"{row['n_baseline']}/{row['n_candidate']}", value(row, row["baseline_median"]),
                  value(row, row["candidate_median"]), missing.text(row["ratio"], "{:.3f}"), interval_text(row),
                  missing.text(row["p_value"], "{:.3f}"), Text(row["verdict"], style=STYLES.get(row["verdict"], "")))
    return t


def markdown(rows: Sequence[Row], labels: Mapping[str, str], normalized: bool) -> str:
    """One GitHub-Markdown table of the rows, whole labels, each figure with its unit, notes in full."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    unit, value = figures(rows, normalized, units_in_header=False)
    head = ("cell_id", "cell", "n b/c", f"baseline{unit}", f"candidate{unit}", "ratio", "interval", "p",
            "verdict", "note")
    lines = ["| " + " | ".join(head) + " |", "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for row in rows:
        figures_ = (row["cell_id"], labels[row["cell_id"]], f"{row['n_baseline']}/{row['n_candidate']}",
                    value(row, row["baseline_median"]), value(row, row["candidate_median"]),
                    missing.text(row["ratio"], "{:.3f}"), interval_text(row), missing.text(row["p_value"], "{:.3f}"),
                    row["verdict"], missing.text(row["note"], missing=""))
        lines.append("| " + " | ".join(cell(x) for x in figures_) + " |")
    return "\n".join(lines)
