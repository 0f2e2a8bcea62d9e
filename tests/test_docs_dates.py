"""The guides say what is true now (issue 64): a dated measurement lives in a lab note (docs/lab/YYYY-MM-DD-topic.md,
with its command, commit and machine) and the guide links to it. So no top-level page of docs/ carries an ISO date
outside a link target, and no SQLite store sits under docs/ (the measured stores are in benchmarks/results/)."""
from __future__ import annotations

import re

from tests.conftest import ROOT

DOCS = ROOT / "docs"
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# A Markdown link's target, `](…)`, or a reference definition, `[x]: …`: a lab note's name holds its date.
LINK_TARGET = re.compile(r"\]\([^)\s]*\)|^\s*\[[^\]]+\]:\s*\S+", re.MULTILINE)


def dated_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) for every line that has an ISO date once its link targets are removed."""
    return [(number, line) for number, line in enumerate(text.splitlines(), start=1)
            if ISO_DATE.search(LINK_TARGET.sub("", line))]


def test_guides_carry_no_dates() -> None:
    pages = sorted(DOCS.glob("*.md"))
    assert pages, "no guide pages under docs/"
    found = [f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
             for page in pages for number, line in dated_lines(page.read_text(encoding="utf-8"))]
    assert not found, ("a dated measurement belongs in a lab note under docs/lab/ (linked from the guide):\n"
                       + "\n".join(found))


def test_only_link_targets_are_exempt() -> None:
    text = ("ccache takes a quarter off ([lab note](lab/2026-12-04-ccache.md)).\n"
            "[note]: lab/2026-12-05-x.md\n"
            "Measured on 2026-12-04 ([lab note](lab/2026-12-04-ccache.md)).\n"
            "[a note of 2026-12-04](lab/2026-12-04-ccache.md)\n")
    assert [number for number, _ in dated_lines(text)] == [3, 4]


def test_no_store_under_docs() -> None:
    stores = sorted(str(p.relative_to(ROOT)) for p in DOCS.rglob("*.db"))
    assert not stores, "SQLite stores belong in benchmarks/results/, not docs/: " + ", ".join(stores)
