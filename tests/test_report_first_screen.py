"""The report's first screen answers the question: per workload, summary.md's first table that shows its cells has at
most 8 columns; in headless Chromium at 1280 px the page's first screen has no horizontal scroll (neither the page
nor a box in it), and a chart shows a point's value on hover. The report is rendered from the full test store
(tests/report_stores.py: ResNet-50 on three GPUs and transformer cells), its numbers from bench's own analysis."""
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from bench.analysis.status_rows import workload_title
from bench.store import Store
from tests.report_stores import write_full_store

WIDTH, HEIGHT = 1280, 800  # the first screen
MAX_COLUMNS = 8


@pytest.fixture(scope="module")
def first_screen_report():
    from bench.report.render import report_from_store

    d = Path(tempfile.mkdtemp(prefix="bench-report-first-"))
    write_full_store(d / "bench.db")
    report_from_store(str(d / "bench.db"), d / "out")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Every GitHub-Markdown table of `text`, in order: its rows (the header first) as lists of cells."""
    tables, current = [], []
    for line in [*text.splitlines(), ""]:
        if not line.startswith("|"):
            if current:
                tables.append(current)
            current = []
        elif not re.fullmatch(r"\|(-+\|)+", line):  # the line under the header
            current.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return tables


def cells_by_workload(db: Path) -> dict[str, set[str]]:
    """workload title → the ids of its measured training cells, read from the store."""
    with Store(db) as store:
        records = store.dataframe(record_json=False)
    ok = records[(records["status"] == "ok") & ~records["run_id"].str.startswith("import:")
                 & records["samples_per_sec"].notna()]
    out: dict[str, set[str]] = {}
    for r in ok.to_dict("records"):
        out.setdefault(workload_title(r), set()).add(r["cell_id"])
    return out


@pytest.mark.slow
def test_summary_md_first_table_per_workload_has_at_most_8_columns(first_screen_report):
    d = first_screen_report
    tables = markdown_tables((d / "out" / "summary.md").read_text())
    workloads = cells_by_workload(d / "bench.db")
    assert {"ResNet-50 (img/s)", "Transformer language models (tokens/s)"} <= set(workloads), workloads
    for title, cells in workloads.items():
        first = next((t for t in tables if any(c in row for row in t[1:] for c in cells)), None)
        assert first is not None, f"no table of summary.md shows a cell of {title}"
        assert len(first[0]) <= MAX_COLUMNS, f"{title}: the first table has {len(first[0])} columns: {first[0]}"
        shown = {c for row in first[1:] for c in cells if c in row}
        assert shown == cells, f"{title}: its first table leaves out {sorted(cells - shown)}"


# Appended to a copy of the page: the page's width against the window's, every box on the first screen that scrolls
# sideways, and what a chart's hover label says after a mouse move onto its first point (as a reader's mouse would).
PROBE = """<script>
window.addEventListener("load", () => {
  const out = {window: innerWidth, page: document.documentElement.scrollWidth, scrolling: [], hover: null};
  for (const el of document.body.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.top >= innerHeight || r.width === 0) continue;  // below the first screen, or not shown
    if (["auto", "scroll"].includes(getComputedStyle(el).overflowX) && el.scrollWidth > el.clientWidth) {
      out.scrolling.push({tag: el.tagName, id: el.id, cls: String(el.className), width: el.scrollWidth,
                          box: el.clientWidth, top: r.top});
    }
  }
  const gd = document.querySelector(".js-plotly-plot");
  if (gd) {
    const point = gd.querySelector(".scatterlayer .trace .points path");
    const at = point.getBoundingClientRect();
    const x = at.left + at.width / 2, y = at.top + at.height / 2;
    gd.querySelector(".nsewdrag").dispatchEvent(new MouseEvent("mousemove", {clientX: x, clientY: y, bubbles: true}));
    out.hover = Array.from(gd.querySelectorAll(".hoverlayer .hovertext")).map(e => e.textContent);
    out.chart = gd.id;
  }
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def probe(page: Path) -> dict:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("chromium is not installed (make test installs it)")
    probed = page.with_name("first-screen-probe.html")
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--hide-scrollbars",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tempfile.mkdtemp()}", f"--window-size={WIDTH},{HEIGHT}"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", probed.as_uri()], capture_output=True, text=True,
                         timeout=180).stdout
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, "the probe did not run"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))


@pytest.mark.browser
def test_first_screen_has_no_horizontal_scroll_and_a_chart_shows_a_value_on_hover(first_screen_report):
    d = first_screen_report
    html = (d / "out" / "index.html").read_text(encoding="utf-8")
    assert html.count("<script type=\"text/javascript\">/**") == 1, "plotly.js is not inline once"
    assert not re.search(r'<script[^>]+src=', html), "the page loads a script from elsewhere: not one offline file"
    seen = probe(d / "out" / "index.html")
    assert seen["window"] == WIDTH, seen
    assert seen["page"] <= seen["window"], f"the page is {seen['page']} px wide in a {seen['window']} px window"
    assert seen["scrolling"] == [], f"boxes on the first screen scroll sideways: {seen['scrolling']}"
    # The hover label names the point's cell and says its rate as the headline table of summary.md does.
    assert seen["hover"], f"no hover label after a mouse move onto a point of {seen.get('chart')}"
    label = " ".join(seen["hover"])
    cell = re.search(r"\(([0-9a-f]{12})\)", label)
    assert cell, label
    rows = [row for t in markdown_tables((d / "out" / "summary.md").read_text()) if t[0][:2] == ["cell", "img/s"]
            for row in t[1:] if cell.group(1) in row]
    assert rows, f"{cell.group(1)} is not in summary.md's ResNet-50 headline table"
    rate = rows[0][1]
    assert f"{rate} img/s" in label, f"the hover label {label!r} does not say the cell's rate {rate} img/s"


@pytest.mark.slow
def test_without_plotly_the_page_keeps_its_headline_tables_and_says_why(first_screen_report, tmp_path, monkeypatch):
    """A Python without plotly (a GPU machine's own, offline) still writes the report: no hover chart, no plotly.js,
    the same headline tables, and a line saying why."""
    from bench.report import interactive
    from bench.report.render import report_from_store

    monkeypatch.setattr(interactive, "available", lambda: False)
    report_from_store(str(first_screen_report / "bench.db"), tmp_path / "out")
    html = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert "Plotly.newPlot" not in html and "<script" not in html
    assert html.count("No hover chart: plotly does not import") == 2  # ResNet-50's and the transformer's
    assert 'id="headline-resnet-50-img-s-table"' in html
    assert (tmp_path / "out" / "summary.md").read_text() == (first_screen_report / "out" / "summary.md").read_text()
