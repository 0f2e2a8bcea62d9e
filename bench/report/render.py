"""Writes the report from the store's records only: reports/index.html (self-contained: charts embedded, plotly.js
inline for the hover charts), summary.md, PNG charts and CSV tables.

Every number is computed by the pure functions of bench.analysis; the sections (bench.report.sections, in their
SECTIONS order) pick, format and draw, and the templates lay the same section objects out as HTML and as Markdown.
A section with nothing to show is left out, or replaced by a one-line note saying why.
"""
from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
from jinja2 import Environment, PackageLoader, Undefined

from bench.analysis.cost import Price
from bench.analysis.missing import text
from bench.core.errors import BenchInputError
from bench.report.environments import ENV_SAMPLE
from bench.report.format import LEFT
from bench.report.interactive import plotly_js
from bench.report.sections import build_sections
from bench.report.sections.blocks import MAX_ROWS
from bench.report.sections.context import build_context


def read_store(store) -> tuple[pd.DataFrame, list[str]]:
    """Every record without its JSON (the columns hold what the report needs) with the power and energy GPU workers
    sampled (read from the JSON of GPU records only: bench/report/power.py), plus a sample of record JSON for the
    environments table: parsing 100,000 JSON documents would be most of the report's time. Layout records also
    carry their layout's figures (bench/report/layout_records.py: the JSON of those records only)."""
    from bench.analysis.layout_cells import with_layouts
    from bench.analysis.mfu import with_power
    from bench.report.layout_records import layout_records
    from bench.report.power import power_records

    records = store.dataframe(record_json=False)
    records = with_layouts(with_power(records, power_records(store, records)), layout_records(store, records))
    return records, store.environment_sample(ENV_SAMPLE)


def report_from_store(store_path: str, out_dir: Path, *, where: str | None = None,
                      prices_file: str | None = None) -> list[Path]:
    """`bench report`: all input checked (filters, prices, a store with records) before anything is written."""
    from bench.cells.selection import matches, parse_selection
    from bench.core.source_revision import source_text
    from bench.report.prices import load_prices
    from bench.store import Store

    terms = parse_selection(where, "--where")
    override = load_prices(prices_file) if prices_file else None
    _check_out_dir(Path(out_dir))
    with Store(store_path, read_only=True) as store:
        records, env_json = read_store(store)
        collectives = store.collectives()
        run_env_json = store.run_environments()
        run_sources = {r["run_id"]: source_text(r) for r in store.runs()}
        ranks = store.rank_windows()
    if records.empty:
        raise BenchInputError("the store has no records yet (run `bench run MATRIX` first)", store_path)
    selected = records[matches(records, terms)] if terms and not records.empty else records
    if selected.empty:
        raise BenchInputError(f"no records match '{where}' ({len(records)} records in the store)", "--where")
    if terms:  # the sample must describe what the report shows
        env_json = None if len(selected) < len(records) else env_json
    collectives = collectives[collectives["cell_id"].isin(selected["cell_id"])]
    return write_report(selected, out_dir, store_path=store_path, prices=override, env_json=env_json,
                        where=where if terms else None, collectives=collectives, run_env_json=run_env_json,
                        ranks=ranks, run_sources=run_sources)


def _environment(markdown: bool) -> Environment:
    # Markdown is line-oriented: block tags take their own line and leave no trace in the output. The page escapes
    # every value: a failed cell's error is a worker's stderr, a --where filter is what the user typed, a host name
    # or an image tag comes from the matrix; any of them may hold <, > or &, and unescaped they broke the page (a
    # "<" opened a tag that swallowed the rest of the table). No section passes markup in a value.
    # Every value the templates print goes through missing.text (`finalize`): a missing one (None, NaN, NA) reads as
    # a dash, never as "None" or "nan"; sections that know why a value is missing put the reason in the cell.
    env = Environment(loader=PackageLoader("bench.report", "templates"), autoescape=not markdown,
                      trim_blocks=markdown, lstrip_blocks=markdown, keep_trailing_newline=markdown,
                      finalize=_shown)
    env.filters["cell"] = _shown
    return env


def _shown(value):
    """A template value as printed: missing → MISSING (bench/analysis/missing.py); Jinja's Undefined and markup
    pass through as they are."""
    if isinstance(value, (Undefined, str)):
        return value
    return text(value)


def _check_out_dir(out_dir: Path) -> None:
    """--out must be a folder bench can write in (made if missing), checked before anything is read or written."""
    import os

    existing = next((p for p in (out_dir, *out_dir.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise BenchInputError(f"{existing} is not a folder", "--out")
    if not os.access(existing, os.W_OK):
        raise BenchInputError(f"{existing} is not writable", "--out")


def write_report(records: pd.DataFrame, out_dir: Path, store_path: str, *,
                 prices: dict[str, Price] | None = None, env_json: list[str] | None = None,
                 where: str | None = None, collectives: pd.DataFrame | None = None,
                 run_env_json: dict[str, str] | None = None, ranks: list[dict] | None = None,
                 run_sources: dict[str, str] | None = None) -> list[Path]:
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BenchInputError(f"cannot make {out_dir}: {e.strerror or e}", "--out") from None
    ctx = build_context(records, out_dir, prices=prices, env_json=env_json, collectives=collectives,
                        run_env_json=run_env_json, ranks=ranks, run_sources=run_sources)
    sections = build_sections(ctx)
    # plotly.js once, inline, for every hover chart of the page (bench/report/interactive.py): it works offline.
    plotly = plotly_js() if any(getattr(s, "interactive", False) for s in sections) else None
    page = dict(store=store_path, where=where, sections=sections, left=LEFT, max_rows=MAX_ROWS, plotly_js=plotly,
                n_records=len(records), n_cells=len(ctx.table) + len(ctx.other_table), n_failed=len(ctx.failures),
                n_imported=len(ctx.imported), generated=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    index = out_dir / "index.html"
    index.write_text(_environment(markdown=False).get_template("index.html.j2").render(**page), encoding="utf-8")
    summary = out_dir / "summary.md"
    summary.write_text(_environment(markdown=True).get_template("summary.md.j2").render(**page), encoding="utf-8")
    return [index, summary, *(path for s in sections for path in s.files)]
