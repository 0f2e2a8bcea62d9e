"""What a section is made of: charts (PNG files), tables (rows already formatted, cut at MAX_ROWS, the full table a
CSV beside the page) and the section itself. Templates render these; nothing here formats HTML or Markdown."""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pandas as pd

from bench.analysis.missing import CSV_MISSING, csv_ready

MAX_ROWS = 200  # per HTML/Markdown table; the CSV beside the page has every row
MARKED = ("transport", "transport (a)", "transport (b)", "verdict")  # the columns a "_bad" row shows in red


@dataclass(frozen=True)
class Chart:
    caption: str
    path: Path

    def base64(self) -> str:
        """The PNG for embedding in the page (the HTML is self-contained)."""
        return base64.b64encode(self.path.read_bytes()).decode()


@dataclass(frozen=True)
class Table:
    id: str
    columns: list[str]
    rows: list[dict]  # at most MAX_ROWS; "_bad" marks a row whose transport/verdict cell is shown in red
    total: int  # rows in the full table (its CSV)
    csv: str | None = None
    title: str | None = None
    open: bool = True
    collapsible: bool = False  # one <details> block (the main table, one per GPU)
    marked: tuple[str, ...] = MARKED  # the columns a "_bad" row shows in red
    wrap: bool = False  # its cells wrap (the page's first screen: no table wider than the window)


def table(tid: str, columns: list[str], rows: list[dict], *, csv: str | None = None, title: str | None = None,
          open_: bool = True, total: int | None = None, collapsible: bool = False, marked: tuple[str, ...] = MARKED,
          wrap: bool = False) -> Table:
    """A table of at most MAX_ROWS rows; `total` is how many the full table (the CSV) has."""
    return Table(tid, columns, rows[:MAX_ROWS], max(total or 0, len(rows)), csv, title, open_, collapsible, marked,
                 wrap)


@dataclass(frozen=True)
class Section:
    """A titled block of notes, charts and tables; `omitted` replaces all of it with one line saying why.
    `files` is every file the section wrote (charts and CSVs), in the order written."""

    id: str
    title: str
    note: str = ""
    charts: tuple[Chart, ...] = ()
    tables: tuple[Table, ...] = ()
    omitted: str | None = None
    files: tuple[Path, ...] = ()
    template: str = field(default="figures", kw_only=True)  # templates/<template>.html.j2 and .md.j2

    @property
    def nav(self) -> str:
        return self.title


class CustomSection:
    """Base of a section laid out by templates of its own (a dataclass subclass sets `id`, `title` and `template`,
    and `nav` where the link should read otherwise): never omitted, writes no files."""

    omitted: ClassVar[None] = None
    files: ClassVar[tuple[Path, ...]] = ()

    @property
    def nav(self) -> str:
        return self.title


def omitted(sid: str, title: str, why: str) -> Section:
    return Section(sid, title, omitted=f"{title}: omitted — {why}")


def write_csv(df: pd.DataFrame, out_dir: Path, name: str) -> Path:
    path = out_dir / name
    # A missing value is an empty field (bench/analysis/missing.py).
    csv_ready(df.drop(columns=[c for c in ("ci_values",) if c in df])).to_csv(path, index=False, na_rep=CSV_MISSING)
    return path
