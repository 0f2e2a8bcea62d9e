"""The GPU results (docs/gpu-results.md and its lab notes, one H200: ResNet-50 2026-11-26, the transformer
2026-12-04) stay readable and stay what the pages say: every stored record parses with today's record schema, the
notes' medians are the store's, and the report tells apart two cells that differ only by memory layout."""
import json
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys

import pytest

from bench.records.schema import parse_record
from tests.conftest import ROOT

STORE = ROOT / "benchmarks" / "results" / "h200-resnet50.db"
PAGE = ROOT / "docs" / "gpu-results.md"
NOTES = {"ResNet-50 on one NVIDIA H200, 2026-11-26": ROOT / "docs" / "lab" / "2026-11-26-h200-resnet50.md",
         "The transformer on one NVIDIA H200, 2026-12-04": ROOT / "docs" / "lab" / "2026-12-04-h200-transformer.md"}
TRANSFORMER_STORE = ROOT / "benchmarks" / "results" / "h200-transformer.db"
ROW = re.compile(r"^\| ([0-9a-f]{12}) \|(?:[^|]*\|){4} \**([\d,]+)\** \|", re.M)


def section(title: str) -> str:
    """The loan's lab note, titled `title` (docs/gpu-results.md keeps the headline rows and links it)."""
    text = NOTES[title].read_text()
    assert text.startswith(f"# {title}\n") and f"]({NOTES[title].relative_to(ROOT / 'docs')})" in PAGE.read_text()
    return text


def ok_records():
    with sqlite3.connect(f"file:{STORE}?mode=ro&immutable=1", uri=True) as db:
        return [json.loads(js) for (js,) in db.execute("select record_json from records where status = 'ok'")]


def test_every_record_parses_and_says_what_ran():
    records = ok_records()
    assert len(records) == 12  # 4 cells x 3 windows
    for data in records:
        r = parse_record(data)
        assert r.gpu.sku == "H200" and r.gpu.clocks_sm_mhz == 1980.0
        assert r.power.source == "nvml" and r.power.joules_per_image > 0
        assert r.cuda_events.verdict == ("host_bound" if r.data == "imagenet" else "agree")


def test_the_pages_medians_are_the_stores():
    by_cell: dict[str, list[float]] = {}
    for r in ok_records():
        by_cell.setdefault(r["cell_id"], []).append(r["images_per_sec"])  # the JSON as the 2026-11-26 run stored it
    rows = ROW.findall(section("ResNet-50 on one NVIDIA H200, 2026-11-26"))
    assert {cell for cell, _ in rows} == set(by_cell)
    for cell, shown in rows:
        assert abs(int(shown.replace(",", "")) - statistics.median(by_cell[cell])) <= 0.51, cell  # rounded to 1 img/s


def test_the_transformer_pages_medians_are_the_stores_latest_runs():
    # The table shows each cell's latest run (the two cells measured twice: the later), as `bench status` does.
    with sqlite3.connect(f"file:{TRANSFORMER_STORE}?mode=ro&immutable=1", uri=True) as db:
        rows = db.execute("select run_id, cell_id, record_json from records where status = 'ok' order by run_id")
        latest: dict[str, tuple[str, list[float]]] = {}
        for run_id, cell, js in rows:
            record = parse_record(json.loads(js))
            assert record.tokens_per_sec and record.gpu is None  # this loan's worker wrote no gpu field yet
            if latest.get(cell, ("",))[0] != run_id:
                latest[cell] = (run_id, [])
            latest[cell][1].append(record.tokens_per_sec)
    shown = ROW.findall(section("The transformer on one NVIDIA H200, 2026-12-04"))
    assert {cell for cell, _ in shown} == set(latest) and len(shown) == 8
    for cell, figure in shown:
        assert abs(int(figure.replace(",", "")) - statistics.median(latest[cell][1])) <= 0.51, cell


@pytest.mark.slow
def test_the_report_tells_channels_last_from_nchw(tmp_path):
    store = tmp_path / "bench.db"  # a copy: opening a store may add its WAL files beside it
    shutil.copyfile(STORE, store)
    done = subprocess.run([sys.executable, "-m", "bench", "report", "--store", str(store), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = (tmp_path / "summary.md").read_text()
    assert re.search(r"\| fp16, NCHW \| synthetic \| 3,003\.0 \|", summary)
    assert re.search(r"\| fp16, channels-last \| synthetic \| 5,940\.1 \|", summary)
