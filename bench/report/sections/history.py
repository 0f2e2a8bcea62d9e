"""Throughput over runs: one small chart per cell that ran in enough runs to have a history, its change points
marked (bench/analysis/history.py), and a table of the change points with the runs around each and what changed in
the recorded environment there (bench/analysis/envdiff.py, from one record per run)."""
from __future__ import annotations

import json

import pandas as pd

from bench.analysis.collectives import training_only
from bench.analysis.envdiff import diff_environments, environment_of
from bench.analysis.history import MIN_RUNS, cell_histories, run_series
from bench.analysis.scaling import split_imported
from bench.cells.label import cell_label
from bench.report.charts import history_chart
from bench.report.format import num
from bench.report.sections.blocks import Chart, Section, table
from bench.report.sections.context import Context

TITLE = "Throughput over runs (history and change points)"
PANELS_PER_CHART = 12
MAX_CHARTS = 4


def _what_changed(ctx: Context, before: str, after: str) -> str:
    docs = {r: ctx.run_env_json.get(r) for r in (before, after)}
    if not all(docs.values()):
        return "not recorded"
    envs = [environment_of([json.loads(docs[r])], sources=[ctx.run_sources.get(r, "")]) for r in (before, after)]
    diffs = diff_environments(*envs)
    if not diffs:
        return "nothing recorded differs"
    return "; ".join(d.line() for d in diffs[:3]) + \
        (f"; {len(diffs) - 3} more" if len(diffs) > 3 else "")


def build(ctx: Context) -> Section | None:
    measured = training_only(split_imported(ctx.records)[0]) if not ctx.records.empty else ctx.records
    if measured.empty or "start_unix" not in measured:
        return None
    series = run_series(measured)
    runs_per_cell = series.groupby("cell_id")["run_id"].size()
    cells = runs_per_cell[runs_per_cell >= MIN_RUNS].index
    if len(cells) == 0:
        return None
    series = series[series["cell_id"].isin(cells)]
    changes = cell_histories(series)
    first = measured.drop_duplicates("cell_id").set_index("cell_id")
    panels, rows = [], []
    for cell_id, points in series.groupby("cell_id", sort=False):
        r = first.loc[cell_id]
        label = cell_label(r)
        values = points["samples_per_sec"].tolist()
        cps = changes[cell_id]
        edges = [0, *(c.index for c in cps), len(values)]
        levels = [(a, b, float(pd.Series(values[a:b]).median())) for a, b in zip(edges, edges[1:])]
        panels.append((label, values, [c.index for c in cps], levels))
        for c in cps:
            rows.append({"cell": label, "cell_id": cell_id, "at run": f"{c.index + 1} of {len(values)}",
                         "last run before": c.run_before, "first run after": c.run_after,
                         "img/s before → after": f"{num(c.before)} → {num(c.after)}", "ratio": f"{c.ratio:.2f}×",
                         "what changed": _what_changed(ctx, c.run_before, c.run_after),
                         "_bad": c.ratio < 1})
    charts, files = [], []
    for i in range(0, min(len(panels), PANELS_PER_CHART * MAX_CHARTS), PANELS_PER_CHART):
        path = history_chart(panels[i:i + PANELS_PER_CHART], ctx.out_dir / f"history-{i // PANELS_PER_CHART}.png")
        charts.append(Chart(f"Throughput per run, cells {i + 1}–{min(i + PANELS_PER_CHART, len(panels))} of "
                            f"{len(panels)} (dashed: change point; grey: the level between change points)", path))
        files.append(path)
    note = (f"{len(panels)} cells with at least {MIN_RUNS} runs; each point is a run's median throughput of the cell. "
            "Change points: PELT on log throughput (the `ruptures` library), penalty 5·log(n)·σ² with σ the noise "
            "from the series' own run-to-run differences, kept when the levels differ by 5% or more "
            "(docs/regression-checks.md). `bench history` shows the same in the terminal.")
    tables = (table("history-changes", ["cell", "cell_id", "at run", "last run before", "first run after",
                                        "img/s before → after", "ratio", "what changed"], rows,
                    title="Change points"),) if rows else ()
    if not rows:
        note += " No change point found."
    return Section("history", TITLE, note, charts=tuple(charts), tables=tables, files=tuple(files))
