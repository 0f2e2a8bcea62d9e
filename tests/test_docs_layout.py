"""The shape of the documentation (issue 64, "the front door"):

- README.md is a front page: at most 150 lines, and no date (YYYY-MM-DD) or commit id in it — dated measurements
  belong in lab notes (docs/lab/), which the README links through docs/index.md;
- every page under docs/ is reachable from docs/index.md by following relative links (README → docs/index.md → …),
  except the data folders of docs/gpu-results/;
- every relative link in README.md, CONTRIBUTING.md and docs/ resolves to a file or folder that exists;
- the generated reference pages (docs/reference/cli/, docs/reference/records-and-store.md) are what
  scripts/gen_cli_reference.py makes of the code now.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.conftest import ROOT

README = ROOT / "README.md"
INDEX = ROOT / "docs" / "index.md"
DOCS = ROOT / "docs"
DATA_FOLDERS = DOCS / "gpu-results"  # stores, logs and CSVs of GPU loans: data, not pages
MAX_README_LINES = 150

ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
# A commit id: 7 to 40 hex digits with at least one letter and one digit (plain numbers are not ids).
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
# [text](target) and [text](target "title"), images too; not inside code spans or fenced blocks.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _pages() -> list[Path]:
    """Every Markdown page under docs/ but the data folders'."""
    return sorted(p for p in DOCS.rglob("*.md") if DATA_FOLDERS not in p.parents)


def _prose(text: str) -> str:
    """The text without fenced code blocks and code spans: a link is a link only outside code."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def _links(page: Path) -> list[tuple[str, Path]]:
    """(target as written, the file it names) for each relative link of a page; web links and mail are left out."""
    out = []
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # http:, https:, mailto:, or an anchor in the same page
        path = unquote(target.split("#")[0].split("?")[0])
        out.append((target, (page.parent / path).resolve()))
    return out


def test_the_readme_is_a_front_page():
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; at most {MAX_README_LINES}"
    dated = [f"README.md:{n}: {m.group()}" for n, line in enumerate(lines, 1) for m in ISO_DATE.finditer(line)]
    assert not dated, "dates belong in lab notes (docs/lab/), not the README:\n" + "\n".join(dated)
    # in the prose: the output samples' cell ids (12 hex digits) read as commit ids, and they are what the output shows
    ids = [f"README.md: {m.group()}" for line in _prose(text).splitlines() for m in COMMIT.finditer(line)]
    assert not ids, "commit ids belong in lab notes (docs/lab/), not the README:\n" + "\n".join(ids)
    assert "docs/index.md" in {str(p.relative_to(ROOT)) for _, p in _links(README)}, "the README links docs/index.md"


@pytest.mark.parametrize("text,dated,commit", [
    ("measured on 2026-12-05", True, False),
    ("on baccb2a, a fresh clone", False, True),
    ("commit 0d473b44cb91e6", False, True),
    ("25,557,032 parameters, 102228128 bytes", False, False),
    ("cell b5eee9f6ad87", False, True),  # a 12-hex cell id reads as a commit id: shown only in output samples
    ("`make run` then `bench status`", False, False),
])
def test_the_date_and_commit_rules(text, dated, commit):
    assert bool(ISO_DATE.search(text)) is dated
    assert bool(COMMIT.search(text)) is commit


def test_every_relative_link_resolves():
    broken = [f"{page.relative_to(ROOT)}: ({target})"
              for page in [README, ROOT / "CONTRIBUTING.md", *_pages()]
              for target, path in _links(page) if not path.exists()]
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_every_docs_page_is_reachable_from_the_index():
    seen, todo = set(), [README, INDEX]
    while todo:
        page = todo.pop()
        if page in seen or not page.exists():
            continue
        seen.add(page)
        for _, path in _links(page):
            if path.is_dir() and (path / "README.md").exists():
                path = path / "README.md"
            if path.suffix == ".md" and (path.is_relative_to(DOCS) or path == README):
                todo.append(path)
    unreachable = [str(p.relative_to(ROOT)) for p in _pages() if p not in seen]
    assert not unreachable, ("pages no link leads to from docs/index.md (link each from the index, or from a page "
                             "the index links; a lab note from docs/lab/README.md):\n" + "\n".join(unreachable))


def test_the_link_finder_reads_what_markdown_links():
    page_text = ("[a](x.md) [b](../y.md#part) ![c](img/z.png) [web](https://example.com) [here](#top)\n"
                 "`[not](code.md)`\n```\n[nor](block.md)\n```\n[d](<w.md> \"title\")\n")
    assert LINK.findall(_prose(page_text)) == ["x.md", "../y.md#part", "img/z.png", "https://example.com", "#top",
                                               "w.md"]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli_reference", ROOT / "scripts" / "gen_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_reference_pages_are_current():
    gen = _generator()
    want = gen.pages()
    stale = [str(p.relative_to(ROOT)) for p, text in want.items()
             if not p.exists() or p.read_text(encoding="utf-8") != text]
    extra = [str(p.relative_to(ROOT)) for p in sorted(gen.OUT.glob("*.md")) if p not in want]
    assert not stale and not extra, (
        "the reference pages are not what the code makes now; run .venv/bin/python scripts/gen_cli_reference.py "
        f"and commit them. Stale or missing: {', '.join(stale) or 'none'}; "
        f"no longer generated: {', '.join(extra) or 'none'}")
    from bench.cli import build_parser

    verbs = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction").choices
    assert {p.stem for p in want if p.parent == gen.OUT} == {*verbs, "README"}  # a page per verb, and the list


def test_every_verb_option_is_on_its_page():
    """The generator cannot leave an option out: every option string of every verb (sub-verbs too) is on the page."""
    from bench.cli import build_parser

    gen = _generator()
    pages = gen.pages()

    def walk(parser, verb):
        sub = next((a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"), None)
        for action in parser._actions:
            for option in action.option_strings:
                yield verb, option
        if sub is not None:
            for child in sub.choices.values():
                yield from walk(child, verb)

    top = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    missing = [f"{verb}: {option}" for verb, parser in top.choices.items() for _, option in walk(parser, verb)
               if option not in ("-h", "--help") and f"`{option}`" not in pages[gen.OUT / f"{verb}.md"]]
    assert not missing, "options the reference leaves out:\n" + "\n".join(missing)
