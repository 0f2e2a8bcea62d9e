"""Issue 34: every output with missing values in it, and none of them prints `nan`, `NaN`, `None` (or `inf`, `NaT`,
`<NA>`) as a value. A missing value reads as bench/analysis/missing.py says: "—" or a reason in text, Markdown and
HTML, an empty field in CSV, null in JSON (strict JSON: no NaN or Infinity token).

The store (real records through the real store, as a worker's would be) lacks what real stores lack: 2-worker cells
with no 1-worker twin (another GPU, real data, another batch), 2-worker cells whose twin is missing but a 1-worker
cell of another MPI flavour or engine stands in, cells with no price, a cell measured in one window, records without
per-rank rates, a slowest rank or a start time, a failed cell, an imported reference, and runs with no matrix name
or backend. Then the real commands run on it: report, status, export (records and collectives, CSV and JSON), check
(text, --json, --junit) and history.
"""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from bench.analysis.expected_cells import expected_cells
from bench.analysis.missing import MISSING, is_missing, json_value, text
from bench.analysis.stand_in import stand_in_words
from bench.launch import analysis_facts
from bench.records.schema import parse_record
from bench.store import Store
from tests.conftest import bench_cli
from tests.factories import cell, record
from tests.report_stores import write_full_store

# A value printed for a missing one: Python's and pandas' spellings of None, NaN, NA, NaT and infinity.
BAD_WORDS = re.compile(r"(?<![\w.])(nan|NaN|None|NaT|<NA>|-?inf|-?Infinity)(?![\w.])")
BAD_CELLS = {"nan", "NaN", "None", "NaT", "<NA>", "inf", "-inf", "Infinity", "-Infinity", "null"}

EXTRA = [  # (cell overrides, window rate scales): run r1, beside the full store's cells
    # No mpich 1-worker cell, but an openmpi and a gloo one: openmpi stands in (fewest differences, then preference).
    (dict(gpu="cpu", mpi="mpich", gpus=2), [1.0, 1.02, 0.99]),
    # DDP over Gloo: the Horovod/Gloo 1-worker cell stands in (it differs in the engine only).
    (dict(gpu="cpu", mpi="gloo", engine="native", gpus=2), [0.95, 0.97, 0.96]),
    # Real data over Gloo: no 1-worker cell with real data (the synthetic one does not stand in).
    (dict(gpu="cpu", mpi="gloo", data="imagenet", loader_workers=1, gpus=2), [0.5, 0.51, 0.49]),
    # Another batch: the nearest 1-worker cell differs in it.
    (dict(gpu="cpu", mpi="gloo", batch_per_gpu=32, gpus=2), [0.6, 0.61, 0.59]),
    # One window only: an interval of one value.
    (dict(gpu="cpu", mpi="gloo", image_size=32, gpus=1), [2.0]),
]


def _bare(rec: dict) -> dict:
    """A record without per-rank rates, a slowest rank or times: what older or partial records lack."""
    return {**rec, "per_rank": [{**r, "samples_per_sec": None} for r in rec["per_rank"]], "slowest_rank": None,
            "start_unix": None, "end_unix": None}


def write_missing_store(path: Path) -> None:
    write_full_store(path)
    with Store(path) as store:
        for over, scales in EXTRA:
            store.write_many(parse_record(record(run_id="r1", repeat=i, rate_scale=s, repeats=len(scales), **over))
                             for i, s in enumerate(scales))
        # 2 workers with no per-rank rates (no rank spread, no slowest rank) and no start time.
        store.write_many(parse_record(_bare(record(run_id="r1", repeat=i, rate_scale=s, repeats=3, gpu="cpu",
                                                   mpi="openmpi", image_size=32, gpus=2)))
                         for i, s in enumerate([1.5, 1.6, 1.4]))
        for run_id in ("h0", "h1", "h2", "h3", "r1"):
            store.begin_run(run_id, matrix_name="missing-values", matrix_path="m.yaml", backend="local", host="h",
                            bench_version="0", plan={})
            store.finish_run(run_id)
        store.conn.execute("UPDATE runs SET matrix_name = NULL, backend = NULL WHERE run_id = 'h3'")
        # An unfinished run that wrote nothing.
        store.begin_run("r2", matrix_name="missing-values", matrix_path="m.yaml", backend="local", host="h",
                        bench_version="0", plan={})


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Every output of the real commands on the store with missing values: {name: text}, the JSON documents apart."""
    d = tmp_path_factory.mktemp("outputs")
    write_missing_store(d / "bench.db")
    texts: dict[str, str] = {}

    def cli(name: str, *args: str, codes=(0,)) -> None:
        r = bench_cli(*args, cwd=d)
        assert r.returncode in codes, (name, r.stdout[-2000:], r.stderr[-2000:])
        texts[name] = r.stdout

    cli("report", "report", "--store", "bench.db", "--out", "out")
    cli("status", "status", "-v", "--store", "bench.db")  # the table and the sentences behind it
    cli("status.json", "status", "--store", "bench.db", "--format", "json")
    cli("status.md", "status", "--store", "bench.db", "--format", "md")
    for table in ("records", "collectives"):
        for fmt in ("csv", "json"):
            cli(f"export {table} {fmt}", "export", "--store", "bench.db", "--table", table, "--format", fmt,
                "-o", f"export/{table}.{fmt}")
    cli("check", "check", "--store", "bench.db", "--baseline", "run:h0", "--candidate", "run:r1", "--all",
        "--json", "check.json", "--junit", "check.xml", codes=(0, 1))
    cli("history", "history", "--store", "bench.db", "--runs")
    for p in sorted((d / "out").glob("*")):
        if p.suffix in (".html", ".md", ".csv"):
            texts[f"out/{p.name}"] = p.read_text(encoding="utf-8")
    for p in sorted((d / "export").glob("*")):
        texts[f"export/{p.name}"] = p.read_text(encoding="utf-8")
    for name in ("check.json", "check.xml"):
        texts[name] = (d / name).read_text(encoding="utf-8")
    return d, texts


def _no_nan_constant(token: str):
    raise AssertionError(f"a bare {token} in JSON (not JSON: a missing value is null)")


def _strict_json(text_: str):
    return json.loads(text_, parse_constant=_no_nan_constant)


def _json_docs(name: str, body: str) -> list:
    """An export's JSON lines, or one JSON document, parsed strictly."""
    if name.startswith("export/"):
        return [_strict_json(line) for line in body.splitlines() if line.strip()]
    return [_strict_json(body)]


def _page_text(html: str) -> str:
    """The page without its embedded PNGs (base64 may spell anything) and plotly.js (a library's code says NaN); its
    charts' data stay."""
    from bench.report.interactive import plotly_js

    return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html.replace(plotly_js(), ""))


def _md_cells(md: str) -> list[tuple[int, str]]:
    """(line number, cell text) of every body cell of every Markdown table."""
    cells = []
    for i, line in enumerate(md.splitlines(), 1):
        if line.startswith("|") and not re.fullmatch(r"\|(-+\|)+", line):
            cells += [(i, c.strip()) for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
    return cells


@pytest.mark.slow
def test_every_output_was_made(outputs):
    _, texts = outputs
    assert {"report", "status", "check", "history", "out/index.html", "out/summary.md", "out/cells.csv",
            "out/cost.csv", "export/records.csv", "export/records.json", "export/collectives.csv",
            "export/collectives.json", "check.json", "check.xml"} <= set(texts)


@pytest.mark.slow
def test_no_output_prints_a_missing_value_as_nan_none_or_inf(outputs):
    _, texts = outputs
    found = []
    for name, body in texts.items():
        body = _page_text(body) if name.endswith(".html") else body
        if name.endswith(".json"):  # a JSON value prints text only in its strings (and null is no word)
            body = "\n".join(json.dumps(v) for doc in _json_docs(name, body) for v in _strings(doc))
        for n, line in enumerate(body.splitlines(), 1):
            for m in BAD_WORDS.finditer(line):
                found.append(f"{name}:{n}: {m.group(0)!r} in {line[max(0, m.start() - 80):m.end() + 40]!r}")
    assert not found, "\n".join(found[:40])


def _strings(doc) -> list[str]:
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        return [s for v in doc.values() for s in _strings(v)]
    if isinstance(doc, list):
        return [s for v in doc for s in _strings(v)]
    return []


@pytest.mark.slow
def test_csv_fields_are_empty_where_a_value_is_missing(outputs):
    _, texts = outputs
    for name, body in texts.items():
        if not name.endswith(".csv"):
            continue
        rows = list(csv.reader(io.StringIO(body)))
        bad = [(i, cell_) for i, row in enumerate(rows[1:], 2) for cell_ in row if cell_.strip() in BAD_CELLS]
        assert not bad, f"{name}: {bad[:10]}"
    cells = list(csv.DictReader(io.StringIO(texts["out/cells.csv"])))
    one = [r for r in cells if r["gpus"] == "1"]
    assert one and all(r["expected_samples_per_sec"] == "" for r in one)  # missing: an empty field
    assert all(r["vs_expected"] for r in cells)  # a verdict or a reason for every cell


@pytest.mark.slow
def test_json_is_strict_and_missing_values_are_null(outputs):
    _, texts = outputs
    for name in ("export/records.json", "export/collectives.json", "check.json"):
        assert _json_docs(name, texts[name])
    records = _json_docs("export/records.json", texts["export/records.json"])
    assert any(r["rank_spread"] is None for r in records) and any(r["start_unix"] is None for r in records)
    assert any(r["error"] is None for r in records) and any(r["threads"] is None for r in records)
    check = _strict_json(texts["check.json"])
    assert check["cells"] and any(c["ratio"] is None for c in check["cells"])  # cells on one side only


@pytest.mark.slow
def test_every_markdown_and_html_table_cell_holds_a_value_or_a_reason(outputs):
    _, texts = outputs
    md = texts["out/summary.md"]
    empty = [(n, c) for n, c in _md_cells(md) if c == ""]
    assert not empty, f"empty Markdown cells at lines {[n for n, _ in empty][:20]}"
    assert "<td></td>" not in texts["out/index.html"] and '"></td>' not in texts["out/index.html"]


def _main_rows(md: str) -> dict[str, dict[str, str]]:
    """The main (scaling) tables' rows by cell_id, as {column: text}."""
    out, header = {}, None
    for line in md.splitlines():
        if line.startswith("| gpu | framework | mpi | IB |") and "| vs expected |" in line:
            header = [c.strip() for c in line.strip().strip("|").split("|")]
        elif header and line.startswith("|") and not line.startswith("|---"):
            row = dict(zip(header, (c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1])))
            out[row["cell_id"]] = row
        elif not line.startswith("|"):
            header = None
    return out


@pytest.mark.slow
def test_the_main_table_says_why_a_cell_has_no_expected_value_and_names_a_stand_in(outputs):
    d, texts = outputs
    rows = _main_rows(texts["out/summary.md"])
    with Store(d / "bench.db") as store:
        cells = {r["cell_id"]: r for r in store.records() if r["status"] == "ok" and not r["run_id"].startswith("im")}
    by = {}
    for cid, r in cells.items():
        key = (r["gpu"], r["mpi"], r["engine"], r["data"], r["batch_per_gpu"], r["image_size"], r["gpus"],
               r["precision"], r["framework"], bool(r["ib"]))
        by[key] = cid
    assert set(rows) == {c for c in cells if cells[c]["model"] == "resnet50"}
    for cid, row in rows.items():
        if cells[cid]["gpus"] == 1:
            assert row["vs expected"] == "1 worker: the baseline", row
    base = ("pytorch", False)
    assert rows[by[("cpu", "mpich", "horovod", "synthetic", 64, 224, 2, "fp32", *base)]]["vs expected"] \
        .endswith(" vs the openmpi 1-worker cell")
    assert rows[by[("cpu", "gloo", "native", "synthetic", 64, 224, 2, "fp32", *base)]]["vs expected"] \
        .endswith(" vs the Horovod 1-worker cell")
    assert rows[by[("cpu", "gloo", "horovod", "imagenet", 64, 224, 2, "fp32", *base)]]["vs expected"] \
        == "no 1-worker cell with real data"
    assert rows[by[("cpu", "gloo", "horovod", "synthetic", 32, 224, 2, "fp32", *base)]]["vs expected"] \
        == "no 1-worker cell with the same compute settings (the nearest differs in batch_per_gpu)"
    assert rows[by[("A100", "openmpi", "horovod", "synthetic", 64, 224, 2, "fp32", *base)]]["vs expected"] \
        == "no 1-worker cell on A100"
    bare = rows[by[("cpu", "openmpi", "horovod", "synthetic", 64, 32, 2, "fp32", *base)]]
    assert bare["rank spread"] == "not recorded"
    assert "as expected" in texts["status"] or "below expected" in texts["status"]
    assert "X(1) from the openmpi 1-worker cell" in texts["status"]
    assert "no expected value: no 1-worker cell with real data" in texts["status"]
    assert "time not recorded" in texts["history"]
    assert "(no matrix name)  (no backend recorded)" in texts["status"]


# --- the rule, alone ---------------------------------------------------------------------------------------------

def _row(cell_id: str, rate: float, **over) -> dict:
    return {**cell(**over), "cell_id": cell_id, "nodes": 1, "samples_per_sec": rate, "boot_low": rate * 0.98,
            "boot_high": rate * 1.02}


def test_a_twin_wins_over_a_stand_in_and_the_fewest_differences_win_next():
    import pandas as pd

    rows = [_row("ompi1", 20.0, mpi="openmpi", gpus=1), _row("gloo1", 30.0, mpi="gloo", gpus=1),
            _row("gloo2", 50.0, mpi="gloo", gpus=2), _row("ddp2", 50.0, mpi="gloo", engine="native", gpus=2),
            _row("mpich2", 30.0, mpi="mpich", gpus=2), _row("ib2", 30.0, mpi="openmpi", ib=True, gpus=2)]
    got = {e.cell_id: e for e in expected_cells(pd.DataFrame(rows), flavours=analysis_facts())}
    assert got["gloo2"].baseline_id == "gloo1" and got["gloo2"].stand_in == ""
    assert got["ddp2"].baseline_id == "gloo1" and got["ddp2"].stand_in == "the Horovod 1-worker cell"
    assert got["mpich2"].baseline_id == "ompi1" and got["mpich2"].stand_in == "the openmpi 1-worker cell"
    assert got["ib2"].baseline_id == "ompi1" and got["ib2"].stand_in == "the IB off 1-worker cell"
    assert "X(1) from the openmpi 1-worker cell ompi1" in got["mpich2"].describe()
    assert stand_in_words({"mpi": "gloo", "engine": "native"}, ("mpi", "engine")) == "the gloo · DDP 1-worker cell"


def test_settings_that_change_compute_never_stand_in():
    import pandas as pd

    for over, why in ((dict(data="imagenet", loader_workers=1), "no 1-worker cell with real data"),
                      # The decoder is part of the input pipeline too (it was once missed here).
                      (dict(data="imagenet", loader="pil"), "no 1-worker cell with real data"),
                      (dict(precision="bf16"), "no 1-worker cell with the same compute settings (the nearest "
                                               "differs in precision)"),
                      (dict(gpu="V100"), "no 1-worker cell on V100")):
        rows = [_row("one", 20.0, mpi="openmpi", gpus=1), _row("two", 30.0, mpi="mpich", gpus=2, **over)]
        (e,) = expected_cells(pd.DataFrame(rows), flavours=analysis_facts())
        assert e.expected is None and e.baseline_id is None and e.why == why, over
    (e,) = expected_cells(pd.DataFrame([_row("two", 30.0, gpus=2)]), flavours=analysis_facts())
    assert e.why == "no 1-worker cell in this store"


def test_missing_means_none_nan_na_nat_and_infinity_and_nothing_else():
    import numpy as np
    import pandas as pd

    for v in (None, float("nan"), np.nan, pd.NA, pd.NaT, float("inf"), -np.inf, np.float32("nan")):
        assert is_missing(v) and text(v) == MISSING and json_value(v) is None, repr(v)
    for v in (0, 0.0, "", "nan", "None", False, np.int64(3), (1, 2)):
        assert not is_missing(v), repr(v)
    assert json_value(np.int64(3)) == 3 and type(json_value(np.float64(1.5))) is float
    assert text(1234.5, "{:,.1f}") == "1,234.5" and text(None, missing="no price") == "no price"
