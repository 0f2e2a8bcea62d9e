"""The layout cells in the report and in `bench status` (issue 66, item 7: tokens/s, memory, bubble and each mesh
dimension's communication, predicted beside measured), on a real store: tests/data/layouts-run.db holds the two
2-worker layout cells of matrix.yaml's CPU fallback (`tp=2`, `pp=2,schedule=1f1b,m=4`, the tiny decoder, three
windows each) as `bench run` wrote them. A copy gains a transformer cell without a layout (the full store's tiny
decoder under DDP), which neither the section nor the JSON's `layout` may count.

Every figure the tests expect is read from the records' JSON with sqlite3 and json here (not with bench's analysis)
and reduced as the section says it is: the median over windows of the bubble and each dimension's collective time,
the largest rank's peak over every window; the bubble predicted is (p − 1)/m of the layout's own text; the memory
predicted is bench/layouts/memory.py's rank_memory for the cell's settings as the record names them."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import shutil
import sqlite3
import statistics

import pytest

from bench.cli import main
from tests.conftest import ROOT

FIXTURE = ROOT / "tests" / "data" / "layouts-run.db"
SCHEMA = json.loads((ROOT / "docs" / "ci" / "status-result.schema.json").read_text(encoding="utf-8"))
SECTION_TITLE = "## Parallel layouts: measured beside the model"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A copy of the fixture with a transformer cell that has no layout, in a run of its own."""
    from bench.records.schema import parse_record
    from bench.store import Store
    from tests.factories import record

    path = tmp_path_factory.mktemp("layouts") / "bench.db"
    shutil.copy(FIXTURE, path)
    with Store(path) as s:
        s.begin_run("plain", matrix_name="t", matrix_path="m.yaml", backend="local", host="h", bench_version="0",
                    plan={})
        for i, scale in enumerate((1.6, 1.7, 1.65)):
            data = record(run_id="plain", repeat=i, rate_scale=scale, repeats=3, gpu="cpu", mpi="gloo", gpus=2,
                          model="tiny", engine="native", seq_len=128)
            s.write(parse_record({**data, "sample_unit": "sequence", "tokens_per_sample": 128,
                                  "tokens_per_sec": data["samples_per_sec"] * 128,
                                  "peak_memory": {"kind": "rss", "bytes_per_rank": [400 << 20] * 2}}))
        s.finish_run("plain")
    return path


def run_bench(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue()


def expected(path) -> dict[str, dict]:
    """cell_id → what the section must show, from the ok records of each layout cell (one run each here)."""
    with sqlite3.connect(path) as conn:
        docs = [json.loads(j) for (j,) in conn.execute("SELECT record_json FROM records WHERE status = 'ok'")]
    by_cell: dict[str, list[dict]] = {}
    for d in docs:
        if d.get("layout") is not None:
            by_cell.setdefault(d["cell_id"], []).append(d)
    out = {}
    for cell_id, recs in by_cell.items():
        from bench.layouts.layout import parse_layout
        from bench.layouts.memory import rank_memory
        from bench.layouts.shapes import shape_named

        cell = recs[0]["cell"]
        text = cell["layout"]
        words = dict(p.split("=") for p in text.split(","))
        pp, m = int(words.get("pp", 1)), int(words.get("m", 1))
        layout, _ = parse_layout(text, world=cell["gpus"])
        micro = cell["batch_per_gpu"] // m if pp > 1 else cell["batch_per_gpu"]
        predicted = rank_memory(shape_named(cell["model"]), layout, seq=cell["seq_len"], microbatch_seqs=micro,
                                checkpointing="full" if cell["activation_checkpointing"] else "none").total
        dims = sorted({d for r in recs for d in r["layout"]["collective_s_per_step"]})
        out[cell_id] = {
            "layout": text, "gpus": cell["gpus"], "windows": len(recs),
            "tokens_per_sec": statistics.median(r["tokens_per_sec"] for r in recs),
            "tokens_per_sec_per_gpu": statistics.median(r["tokens_per_sec"] for r in recs) / cell["gpus"],
            "peak": max(b for r in recs for b in r["peak_memory"]["bytes_per_rank"]),
            "kind": recs[0]["peak_memory"]["kind"],
            "bubble_predicted": (pp - 1) / m if pp > 1 else None,
            "bubble_stage0": statistics.median(r["layout"]["bubble_measured"] for r in recs) if pp > 1 else None,
            "bubble_mean": statistics.median(r["layout"]["bubble_measured_mean"] for r in recs) if pp > 1 else None,
            "collective": {d: statistics.median(r["layout"]["collective_s_per_step"][d] for r in recs) for d in dims},
            "predicted": predicted}
    return out


@pytest.fixture(scope="module")
def report(store, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    code, _ = run_bench("report", "--store", str(store), "--out", str(out))
    assert code == 0
    return out


def test_the_fixture_holds_two_pipelined_and_tensor_parallel_cells_and_the_copy_one_without_a_layout(store):
    cells = expected(store)
    assert sorted(c["layout"] for c in cells.values()) == ["pp=2,schedule=1f1b,m=4", "tp=2"]
    assert all(c["windows"] == 3 for c in cells.values())
    with sqlite3.connect(store) as conn:
        plain = conn.execute("SELECT COUNT(DISTINCT cell_id) FROM records WHERE layout IS NULL").fetchone()[0]
    assert plain == 1


def test_the_csv_has_one_row_per_layout_cell_with_the_records_figures(store, report):
    want = expected(store)
    with open(report / "layouts.csv", newline="", encoding="utf-8") as f:
        rows = {r["cell_id"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(want)  # the cell without a layout is not a row

    def number(v: str) -> float | None:
        return float(v) if v != "" else None

    for cell_id, w in want.items():
        r = rows[cell_id]
        assert r["layout"] == w["layout"] and int(r["gpus"]) == w["gpus"] and int(r["windows"]) == w["windows"]
        assert number(r["units_per_sec"]) == pytest.approx(w["tokens_per_sec"], rel=1e-9)
        assert number(r["units_per_sec_per_gpu"]) == pytest.approx(w["tokens_per_sec_per_gpu"], rel=1e-9)
        assert number(r["ci_low_units"]) <= number(r["units_per_sec"]) <= number(r["ci_high_units"])
        assert number(r["peak_memory_bytes"]) == w["peak"] and r["peak_memory_kind"] == w["kind"]
        assert number(r["predicted_memory_bytes"]) == pytest.approx(w["predicted"])
        for name in ("bubble_predicted", "bubble_stage0", "bubble_mean"):
            assert number(r[name]) == (pytest.approx(w[name]) if w[name] is not None else None), name
        for dim, seconds in w["collective"].items():
            assert number(r[f"collective_s_{dim}"]) == pytest.approx(seconds)
        others = {k.removeprefix("collective_s_") for k in r if k.startswith("collective_s_")} - set(w["collective"])
        assert all(r[f"collective_s_{d}"] == "" for d in others)  # a dimension the cell has not: empty


def section_rows(report) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The section's Markdown table in summary.md: its columns, and cell_id → column → shown text."""
    text = (report / "summary.md").read_text(encoding="utf-8")
    part = text.split(SECTION_TITLE, 1)[1].split("\n## ", 1)[0]
    lines = [line for line in part.splitlines() if line.startswith("| ")]
    columns = [c.strip() for c in lines[0].strip("|").split(" | ")]
    rows = {}
    for line in lines[1:]:
        cells = [c.strip() for c in re.split(r"(?<!\\) \| ", line.strip().strip("|").strip())]
        row = dict(zip(columns, cells))
        rows[row["cell_id"]] = row
    return columns, rows


def test_the_summary_shows_measured_beside_predicted_for_each_layout_cell(store, report):
    want = expected(store)
    columns, rows = section_rows(report)
    assert set(rows) == set(want)
    dims = sorted({d for w in want.values() for d in w["collective"]})
    assert [f"{d} collectives per step" for d in dims] == sorted(c for c in columns if c.endswith("per step"))
    for cell_id, w in want.items():
        r = rows[cell_id]
        assert r["layout"] == w["layout"] and r["workers"] == str(w["gpus"])
        assert r["tokens/s"] == f"{w['tokens_per_sec']:,.0f} tokens/s"
        assert r["tokens/s per GPU"] == f"{w['tokens_per_sec_per_gpu']:,.0f} tokens/s"
        assert r["MFU"] == "CPU: no peak"  # a CPU has no dense peak to divide by
        # No 1-worker cell of the tiny decoder here to anchor the compute: the model's rate says so.
        assert r["model's tokens/s per GPU"].startswith("— (no 1-worker cell of the same model")
        assert r["the model's anchor"] == "—"
        assert r["peak memory per rank"] == f"{w['peak'] / 2**20:,.1f} MiB ({w['kind']})"
        assert r["model's memory per rank"] == f"{w['predicted'] / 2**20:,.1f} MiB"
        if w["bubble_predicted"] is None:
            assert {r["bubble: stage 0"], r["bubble: mean"], r["bubble: (p−1)/m"]} == {"no pipeline"}
        else:
            assert r["bubble: stage 0"] == f"{100 * w['bubble_stage0']:.0f}%"
            assert r["bubble: mean"] == f"{100 * w['bubble_mean']:.0f}%"
            assert r["bubble: (p−1)/m"] == f"{100 * w['bubble_predicted']:.0f}%"
        for dim in dims:
            shown = r[f"{dim} collectives per step"]
            if dim in w["collective"]:
                assert shown.startswith(f"{w['collective'][dim] * 1e3:,.1f} ms (")
            else:
                assert shown == f"no {dim} dimension"
    html = (report / "index.html").read_text(encoding="utf-8")
    assert 'id="layouts"' in html and 'id="layouts-table"' in html


def test_a_store_without_layout_cells_has_no_layout_section(store, tmp_path):
    from bench.report.render import read_store
    from bench.report.sections import layouts
    from bench.report.sections.context import build_context
    from bench.store import Store

    with Store(store, read_only=True) as s:
        records, _ = read_store(s)
    for name in ("with", "without"):
        (tmp_path / name).mkdir()
    assert layouts.build(build_context(records, tmp_path / "with")) is not None
    without = records[records["layout"].isna()]  # the copy's own transformer cell stays: it has no layout
    assert not without.empty
    assert layouts.build(build_context(without, tmp_path / "without")) is None
    # And end to end: the report of that cell alone has neither the section nor its CSV.
    plain = without["cell_id"].iloc[0]
    code, _ = run_bench("report", "--store", str(store), "--out", str(tmp_path / "r"), "--where", plain)
    assert code == 0
    assert SECTION_TITLE not in (tmp_path / "r" / "summary.md").read_text(encoding="utf-8")
    assert not (tmp_path / "r" / "layouts.csv").exists()


def test_status_json_carries_each_layout_cells_figures_and_null_for_the_others(store):
    import jsonschema

    code, text = run_bench("status", "--store", str(store), "--format", "json")
    assert code == 0
    rows = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(rows, SCHEMA)
    want = expected(store)
    assert {r["cell_id"] for r in rows if r["layout"] is not None} == set(want)
    assert sum(r["layout"] is None for r in rows) == 1
    for r in rows:
        if r["layout"] is None:
            continue
        got, w = r["layout"], want[r["cell_id"]]
        assert got["layout"] == w["layout"] and got["windows"] == w["windows"]
        assert got["peak_memory_bytes"] == w["peak"] and got["peak_memory_kind"] == w["kind"]
        assert got["predicted_memory_bytes"] == pytest.approx(w["predicted"])
        assert got["collective_s_per_step"] == pytest.approx(w["collective"])
        for name in ("bubble_predicted", "bubble_stage0", "bubble_mean"):
            assert got[name] == (pytest.approx(w[name]) if w[name] is not None else None), name
    bad = json.loads(json.dumps(rows))
    target = next(r for r in bad if r["layout"] is not None)
    target["layout"]["bubble_stage0"] = "126%"  # a figure as text: the schema refuses it
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)
    del target["layout"]["bubble_stage0"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


def test_status_verbose_says_each_layout_cells_figures_and_the_table_stays_narrow(store):
    want = expected(store)
    code, table = run_bench("status", "--store", str(store))
    assert code == 0
    assert all(len(line) <= 120 for line in table.splitlines())
    assert "parallel layouts" not in table  # the sentences only behind -v
    code, text = run_bench("status", "--store", str(store), "-v")
    assert code == 0
    lines = text.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("parallel layouts, measured beside the model"))
    said = {line.split()[0]: line for line in lines[title + 1:title + 1 + len(want)]}
    assert set(said) == set(want)
    for cell_id, w in want.items():
        line = said[cell_id]
        assert f"peak memory per rank {w['peak'] / 2**20:,.1f} MiB {w['kind']}" in line
        assert f"(the model: {w['predicted'] / 2**20:,.1f} MiB)" in line
        for dim, seconds in w["collective"].items():
            assert f"{dim} {seconds * 1e3:,.1f} ms" in line
        if w["bubble_predicted"] is None:
            assert "no pipeline" in line
        else:
            assert (f"bubble {100 * w['bubble_stage0']:.0f}% at stage 0, {100 * w['bubble_mean']:.0f}% over the "
                    f"stages ((p−1)/m: {100 * w['bubble_predicted']:.0f}%)") in line
        assert f"(over {w['windows']} windows)" in line
    # no step split for a layout cell: its collectives are inside its timed compute, so the split's communication
    # would read 0 beside the figures above
    assert not [line for line in lines if line.split()[:1] and line.split()[0] in want and "communication" in line]


def test_a_layout_cell_whose_records_say_nothing_of_it_shows_dashes_not_figures(store, tmp_path):
    """Records of a layout cell without their layout part (the JSON not read): the measured columns are dashes; what
    the layout's text gives (its (p − 1)/m, the memory model's figure) is still shown."""
    from bench.analysis.layout_cells import LAYOUT_JSON
    from bench.analysis.missing import MISSING
    from bench.report.render import read_store
    from bench.report.sections import layouts
    from bench.report.sections.context import build_context
    from bench.store import Store

    with Store(store, read_only=True) as s:
        records, _ = read_store(s)
    section = layouts.build(build_context(records.assign(**{LAYOUT_JSON: None}), tmp_path))
    [t] = section.tables
    want = expected(store)
    assert {r["cell_id"] for r in t.rows} == set(want)
    for r in t.rows:
        w = want[r["cell_id"]]
        assert r["peak memory per rank"] == MISSING
        assert r["model's memory per rank"] == f"{w['predicted'] / 2**20:,.1f} MiB"
        if w["bubble_predicted"] is None:
            assert r["bubble: stage 0"] == "no pipeline"
        else:
            assert r["bubble: stage 0"] == r["bubble: mean"] == MISSING
            assert r["bubble: (p−1)/m"] == f"{100 * w['bubble_predicted']:.0f}%"
    assert [c for c in t.columns if c.endswith("collectives per step")] == []  # no dimension was timed
