"""The report's first screen: per workload, a headline table of seven columns (the cell, its rate and 95% interval,
speedup, efficiency, the verdict against its expected value, its id) and a chart of rate and efficiency against
workers that shows each value on hover. The rows are `bench status`'s (bench/analysis/status_rows.py), each in its
workload's unit (img/s, tokens/s); every other figure of a cell is in the folded tables below and in the CSVs."""
from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

from bench.analysis.judged import run_of
from bench.analysis.scaling import SERIES_KEYS
from bench.analysis.status_rows import BELOW, StatusRow, rows_of
from bench.report import interactive
from bench.report.charts import MAX_SERIES_PER_CHART
from bench.report.sections.blocks import CustomSection, Table, table
from bench.report.sections.context import Context
from bench.report.sections.scaling import CSV
from bench.report.sections.workloads import section_id
from bench.report.status_table import efficiency_text, range_text, relative_labels, speedup_text, value_text
from models.registry.workloads import workload_spec

TITLE = "Results per workload"
NOTE = ("Each cell's rate is the median over its measured windows with a 95% bootstrap interval; speedup and "
        "efficiency divide by the smallest worker count of the same series; vs expected: the verdict against the "
        "rate its 1-worker cell and the allreduce predict (the section below says how). These are `bench status`'s "
        "rows. Every other figure of a cell is in the folded tables further down and in the CSV files beside this "
        "page.")


@dataclass(frozen=True)
class Workload:
    id: str
    title: str  # the workload and its unit: "ResNet-50 (img/s)"
    shared: str  # what every cell of the table shares, which its `cell` column leaves out ("" for one cell)
    table: Table
    figure: Markup | None  # the hover chart (a <div> and its script; plotly.js is in the page's head); None: no plotly


@dataclass(frozen=True)
class Headline(CustomSection):
    workloads: tuple[Workload, ...]
    id: str = "headline"
    title: str = TITLE
    note: str = NOTE
    template: str = "headline"

    @property
    def interactive(self) -> bool:
        """Whether the page must load plotly.js for it."""
        return any(w.figure is not None for w in self.workloads)


def build(ctx: Context) -> Headline | None:
    rows = rows_of(ctx.table, ctx.expected, run_of(ctx.ok)) if not ctx.table.empty else []
    others = rows_of(ctx.other_table, ctx.other_expected, run_of(ctx.other_ok)) if not ctx.other_table.empty else []
    if not rows and not others:
        return None
    cells = {r["cell_id"]: r for t in (ctx.table, ctx.other_table) if not t.empty for r in t.to_dict("records")}
    groups: dict[str, list[StatusRow]] = {}
    for row in [*rows, *others]:
        groups.setdefault(row.workload, []).append(row)
    images = set(ctx.table["cell_id"]) if not ctx.table.empty else set()
    return Headline(tuple(workload(title, group, cells, CSV if group[0].cell_id in images else
                                   csv_of(cells[group[0].cell_id]))
                          for title, group in groups.items()))


def csv_of(cell: dict) -> str:
    """The CSV of every row of a workload that is not counted in images (its section's: workloads.py)."""
    return section_id(workload_spec(str(cell["model"]), str(cell["framework"])) or {}) + ".csv"


def workload(title: str, rows: list[StatusRow], cells: dict[str, dict], csv: str) -> Workload:
    """One workload's headline table and chart; `cells`: cell_id → its scaling table row (for its series)."""
    wid = "headline-" + re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    unit = rows[0].rate_unit
    labels, shared = relative_labels([r.label for r in rows])
    if len(rows) == 1:  # one cell: its whole label in the table, nothing shared to name
        labels, shared = [rows[0].label], ""
    columns = ["cell", unit, "95% CI", "speedup", "efficiency", "vs expected", "cell_id"]
    shown = [{"cell": label, unit: value_text(r, r.rate), "95% CI": range_text(r, r.rate_low, r.rate_high),
              "speedup": speedup_text(r), "efficiency": efficiency_text(r), "vs expected": r.verdict_text,
              "cell_id": r.cell_id, "_bad": r.verdict == BELOW} for r, label in zip(rows, labels)]
    return Workload(wid, title, shared, table(f"{wid}-table", columns, shown, csv=csv, marked=("vs expected",),
                                              wrap=True),
                    figure(f"{wid}-chart", rows, cells) if interactive.available() else None)


def figure(div_id: str, rows: list[StatusRow], cells: dict[str, dict]) -> Markup:
    """Rate and efficiency against workers, a line per series (the cells that differ only in their worker count),
    the longest and fastest series first, at most MAX_SERIES_PER_CHART of them (the rest are in the table)."""
    by_series: dict[tuple, list[StatusRow]] = {}
    for r in rows:
        by_series.setdefault(tuple(str(cells[r.cell_id].get(k)) for k in SERIES_KEYS), []).append(r)
    groups = sorted(by_series.values(), key=lambda g: (-len(g), -max(r.rate or 0 for r in g)))
    shown = groups[:MAX_SERIES_PER_CHART]
    names, _ = relative_labels([series_label(g[0]) for g in shown])
    series = [interactive.Series(name or series_label(g[0]), tuple(point(r) for r in sorted(g, key=lambda r: r.gpus)))
              for name, g in zip(names, shown)]
    left = len(groups) - len(shown)
    return interactive.scaling_figure(div_id, series, rows[0].rate_unit,
                                      f"{left} more series in the table" if left else "")


def series_label(r: StatusRow) -> str:
    """A cell's label less its worker count: what names its series."""
    path, *tokens = r.label.split(" ")
    return " ".join(["/".join(p for p in path.split("/") if p != f"{r.gpus}w"), *tokens])


def point(r: StatusRow) -> interactive.Point:
    hover = (f"<b>{escape(r.label)}</b> ({r.cell_id})<br>{value_text(r, r.rate)} {escape(r.rate_unit)} "
             f"(95% CI {range_text(r, r.rate_low, r.rate_high)})<br>speedup {speedup_text(r)}, "
             f"efficiency {efficiency_text(r)}<br>{escape(r.verdict_text)}")
    return interactive.Point(r.gpus, r.rate, r.rate_low, r.rate_high, r.efficiency, hover)
