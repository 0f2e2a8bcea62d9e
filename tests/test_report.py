"""The report people act on: each analysis function alone on small frames (values worked out by hand), then
`bench report` end to end from a real store: hand-recomputed efficiencies, filters, empty store, 5,000 cells,
and the page in headless chromium."""
import csv
import datetime as dt
import math
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.analysis.compare import at_fixed_scale, compare, precision_table
from bench.analysis.cost import Price, cost_table, merge_prices
from bench.analysis.scaling import cell_summary, scaling, split_imported
from bench.analysis.stats.intervals import bootstrap_ci, bootstrap_many, ratio_ci, ratio_ci_many
from bench.cells.selection import matches, parse_selection
from bench.core.errors import BenchInputError
from bench.records.schema import parse_record
from bench.report.interactive import plotly_js
from bench.report.prices import load_prices
from bench.store import Store
from tests.conftest import bench_cli
from tests.factories import record
from tests.report_stores import write_full_store

BASE = {"cell_id": "c", "gpu": "V100", "framework": "pytorch", "mpi": "openmpi", "ib": False, "gpus": 1,
        "model": "resnet50", "engine": "horovod", "data": "synthetic", "data_layout": "jpeg", "loader_workers": 0,
        "batch_per_gpu": 64, "image_size": 224, "precision": "fp32", "warmup_steps": 10, "steps": 50, "repeats": 3,
        "jobs": 1, "channels_last": True, "threads": None, "workers_per_node": None, "max_message_bytes": None,
        "loader": "auto", "compile": "off", "optimizer_impl": "default", "cuda_graphs": False,
        "seq_len": None, "grad_accum": 1, "activation_checkpointing": False, "layout": None,
        "tp_across_nodes": False, "nodes": 1}


def summary(*cells):
    """A cell summary from (overrides, [window rates]) pairs, through the real cell_summary."""
    rows = []
    for i, (over, rates) in enumerate(cells):
        for j, v in enumerate(rates):
            rows.append({**BASE, "cell_id": f"c{i}", **over, "samples_per_sec": v, "job": j, "repeat": 0,
                         "slowest_rank": 0, "rank_spread": 0.0})
    return cell_summary(pd.DataFrame(rows))


# --- analysis, alone ---------------------------------------------------------------------------------------------
def test_compare_divides_matched_cells_only():
    s = summary(({"mpi": "intelmpi"}, [300, 310, 290]), ({"mpi": "openmpi"}, [200, 205, 195]),
                ({"mpi": "intelmpi", "gpus": 2}, [500]),  # no openmpi twin at 2 workers: not compared
                ({"mpi": "openmpi", "batch_per_gpu": 128}, [999]))  # other batch: not a match either
    pairs = compare(s, "mpi", "intelmpi", "openmpi")
    assert len(pairs) == 1
    p = pairs.iloc[0]
    assert p.ratio == pytest.approx(300 / 200)  # medians of the job medians: 300 and 200
    assert p.ratio_low <= 1.5 <= p.ratio_high and p.ratio_low > 1
    assert p.verdict == "a faster"
    assert pd.isna(p.threads)  # unset settings match each other


def test_compare_says_no_clear_difference_when_the_interval_contains_one():
    s = summary(({"ib": True}, [100, 130, 90]), ({"ib": False}, [110, 95, 120]))
    p = compare(s, "ib", True, False).iloc[0]
    assert p.ratio == pytest.approx(100 / 110)
    assert p.ratio_low < 1 < p.ratio_high and p.verdict == "no clear difference"


def test_vectorised_intervals_equal_the_reference_functions():
    rng = np.random.default_rng(3)
    samples = [tuple(rng.normal(100, 8, k)) for k in (1, 2, 2, 3, 4, 5, 6, 9, 14)]
    many = bootstrap_many(samples)
    for v, (lo, hi) in zip(samples, many):
        ref = bootstrap_ci(v)
        assert (lo, hi) == (ref.low, ref.high)
    other = samples[::-1]
    for a, b, got in zip(samples, other, ratio_ci_many(samples, other)):
        assert tuple(got) == ratio_ci(a, b)


def test_bootstrap_error_bars_are_over_job_medians():
    s = summary(({}, [100, 90, 110, 104]))  # four jobs, one window each
    row = s.iloc[0]
    ref = bootstrap_ci([100, 90, 110, 104])
    assert (row.boot_low, row.boot_high) == (ref.low, ref.high) and row.ci_over == "4 jobs"


def test_cost_per_million_images_by_hand():
    s = summary(({"gpu": "A100", "nodes": 2, "gpus": 16}, [1000.0]), ({"gpu": "cpu"}, [10.0]),
                ({"gpu": "V100"}, [500.0]))
    prices = {"A100": Price(10.0, "2025-01-01", "test"), "V100": Price(1.0, "2025-01-01", "test")}
    c = cost_table(s, prices).set_index("gpu")
    # A100: 2 VMs × $10/h = $20/h for 3.6M images/h → $5.5556 per million, 180,000 images per $.
    assert c.loc["A100", "usd_per_hour"] == 20.0
    assert c.loc["A100", "usd_per_million_images"] == pytest.approx(20 / 3.6)
    assert c.loc["A100", "images_per_usd"] == pytest.approx(180_000)
    # V100: $1/h for 1.8M images/h → $0.5556 per million: ranked first.
    assert list(c.index) == ["V100", "A100", "cpu"]
    assert math.isnan(c.loc["cpu", "usd_per_million_images"]) and c.loc["cpu", "price_source"] == "no price"
    merged = merge_prices({"V100": Price(1.0, "a", "catalogue"), "T4": Price(2.0, "b", "catalogue")},
                          {"V100": Price(3.0, "c", "mine.yaml")})
    assert merged["V100"].usd_per_hour == 3.0 and merged["T4"].usd_per_hour == 2.0


def test_catalogue_prices_are_dated_and_cpu_has_none():
    from bench.facts.catalog import catalog

    skus = catalog()
    assert skus["cpu"].price_per_hour_usd is None
    for sku in skus.values():
        if sku.price_per_hour_usd is not None:
            assert sku.price_per_hour_usd > 0 and dt.date.fromisoformat(sku.price_read)


def test_fixed_scale_picks_the_setting_most_gpus_share():
    s = summary(({"gpu": "V100", "gpus": 8}, [800]), ({"gpu": "A100", "gpus": 8}, [2000]),
                ({"gpu": "H100", "gpus": 8}, [4000]), ({"gpu": "H100", "gpus": 8, "precision": "bf16"}, [9000]),
                ({"gpu": "V100", "gpus": 1}, [100]), ({"gpu": "A100", "gpus": 1}, [250]))
    rows, setting = at_fixed_scale(s, "gpu")
    assert setting["gpus"] == 8 and setting["precision"] == "fp32"
    assert list(rows["gpu"]) == ["H100", "A100", "V100"]  # fastest first; the bf16 cell is not comparable


def test_precision_table_mixed_speedup_and_scaling():
    s = scaling(summary(({"gpus": 1}, [100]), ({"gpus": 2}, [180]), ({"gpus": 1, "precision": "fp16"}, [300]),
                        ({"gpus": 2, "precision": "fp16"}, [500])))
    t = precision_table(s).set_index("gpus")
    assert t.loc[1, "fp16_over_fp32"] == pytest.approx(3.0)
    assert t.loc[2, "fp16_over_fp32"] == pytest.approx(500 / 180)
    assert t.loc[2, "efficiency_fp32"] == pytest.approx(0.9) and t.loc[2, "efficiency_fp16"] == pytest.approx(500 / 600)


def test_imported_records_are_split_off():
    df = pd.DataFrame({"run_id": ["r1", "import:batchai:abc", "r2"], "x": [1, 2, 3]})
    measured, imported = split_imported(df)
    assert list(measured["x"]) == [1, 3] and list(imported["x"]) == [2]


# --- filters and prices --------------------------------------------------------------------------------------------
def test_where_parses_typed_alternatives():
    terms = parse_selection("gpu=V100|A100, ib=on,gpus=8|16")
    assert terms == {"gpu": ["V100", "A100"], "ib": [True], "gpus": [8, 16]}
    df = pd.DataFrame({"gpu": ["V100", "A100", "H100", "V100"], "ib": pd.array([True, True, True, False]),
                       "gpus": [8, 16, 8, 8]})
    assert list(df[matches(df, terms)].index) == [0, 1]


@pytest.mark.parametrize("text, says", [
    ("colour=red", "unknown key 'colour'"), ("gpu", "not key=value"), ("gpus=eight", "whole number"),
    ("ib=maybe", "true/false"), ("gpus>=8", "only key=value"), ("gpu=V100,gpu=A100", "given twice"),
    ("gpu=", "empty value"), ("__import__('os')=1", "unknown key"),
])
def test_bad_where_terms_are_rejected(text, says):
    with pytest.raises(BenchInputError, match=re.escape(says)):
        parse_selection(text)


def test_prices_file(tmp_path):
    good = tmp_path / "p.yaml"
    good.write_text("V100: {price_per_hour_usd: 3.5, price_read: 2026-01-02}\n")
    assert load_prices(good)["V100"] == Price(3.5, "2026-01-02", "p.yaml")
    for text, says in (("Z80: {price_per_hour_usd: 1, price_read: 2026-01-01}", "unknown gpu 'Z80'"),
                       ("V100: {price_per_hour_usd: 1}", "price_read"),
                       ("V100: {price_per_hour_usd: -1, price_read: 2026-01-01}", "non-negative"),
                       ("- 1", "expected a mapping")):
        good.write_text(text)
        with pytest.raises(BenchInputError, match=re.escape(says)):
            load_prices(good)


# --- the report from a real store ----------------------------------------------------------------------------------
SMALL = [  # (cell overrides, window rate scales): five measured cells
    (dict(gpu="cpu", mpi="gloo", gpus=1), [1.0, 1.1, 0.9]),
    (dict(gpu="cpu", mpi="gloo", gpus=2), [0.9, 0.95, 0.85]),
    (dict(gpu="cpu", mpi="openmpi", gpus=1), [1.2, 1.25, 1.15]),
    (dict(gpu="cpu", mpi="openmpi", gpus=2), [1.0, 1.05, 0.98]),
    (dict(gpu="V100", mpi="openmpi", gpus=2), [3.0, 3.1, 2.9]),
]


def write_small_store(path: Path, extra: list | None = None) -> None:
    with Store(path) as store:
        for over, scales in SMALL + (extra or []):
            store.write_many(parse_record(record(run_id="r1", repeat=i, rate_scale=s, repeats=len(scales), **over))
                             for i, s in enumerate(scales))


@pytest.fixture
def small_store(tmp_path):
    write_small_store(tmp_path / "bench.db")
    return tmp_path


@pytest.mark.slow
def test_efficiencies_in_the_report_equal_a_hand_computation_from_the_stored_records(small_store):
    result = bench_cli("report", "--store", "bench.db", "--out", "out", cwd=small_store)
    assert result.returncode == 0, result.stderr
    with Store(small_store / "bench.db") as store:
        recs = store.records()
    # Median of each cell's windows, then E(N) = X(N) / ((N / N0) · X(N0)) within (gpu, mpi).
    median = {}
    for r in recs:
        median.setdefault((r["gpu"], r["mpi"], r["gpus"]), []).append(r["samples_per_sec"])
    median = {k: statistics.median(v) for k, v in median.items()}
    expected = {}
    for (gpu, mpi, n), x in median.items():
        n0 = min(m for (g, f, m) in median if (g, f) == (gpu, mpi))
        expected[(gpu, mpi, n)] = x / ((n / n0) * median[(gpu, mpi, n0)])
    with open(small_store / "out" / "cells.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 5
    for row in rows:
        assert float(row["efficiency"]) == pytest.approx(expected[(row["gpu"], row["mpi"], int(row["gpus"]))])
    html = (small_store / "out" / "index.html").read_text()
    e = expected[("cpu", "gloo", 2)]
    assert f"{100 * e:.0f}%" in html and f"{e * 2:.2f}×" in html  # speedup = 2 · E at N = 2, N0 = 1
    assert 'id="mpi"' in html and 'id="gpus"' in html and 'id="cost"' in html
    assert "no price" in html  # the CPU fallback has none
    assert 'class="omitted" id="framework"' in html  # one framework only: omitted with a line, no empty chart
    # CPU series with baselines but no allreduce sweep: the prediction section says what it lacks.
    assert "CPU cells are predicted from a measured allreduce sweep of their own stack only, and this store has none" \
        in html


@pytest.mark.slow
def test_where_selects_cells_and_a_bad_filter_exits_2(small_store):
    ok = bench_cli("report", "--store", "bench.db", "--out", "sel", "--where", "mpi=gloo,gpus=1|2", cwd=small_store)
    assert ok.returncode == 0, ok.stderr
    with open(small_store / "sel" / "cells.csv") as f:
        rows = list(csv.DictReader(f))
    assert {(r["mpi"], r["gpus"]) for r in rows} == {("gloo", "1"), ("gloo", "2")}
    assert "mpi=gloo,gpus=1|2" in (small_store / "sel" / "index.html").read_text()
    for bad in ("gpu=V100,colour=red", "gpus=two", "mpi=nonesuch"):
        r = bench_cli("report", "--store", "bench.db", "--out", "bad", "--where", bad, cwd=small_store)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (bad, r.stderr)
        assert not (small_store / "bad").exists()


@pytest.mark.slow
def test_prices_override_reaches_the_cost_table(small_store):
    (small_store / "prices.yaml").write_text("cpu: {price_per_hour_usd: 0.5, price_read: 2026-11-01}\n")
    r = bench_cli("report", "--store", "bench.db", "--out", "out", "--prices", "prices.yaml", cwd=small_store)
    assert r.returncode == 0, r.stderr
    with open(small_store / "out" / "cost.csv") as f:
        cpu = [row for row in csv.DictReader(f) if row["gpu"] == "cpu"]
    for row in cpu:
        expect = 0.5 * int(row["nodes"]) / (float(row["samples_per_sec"]) * 3600) * 1e6
        assert float(row["usd_per_million_images"]) == pytest.approx(expect)
        assert row["price_read"] == "2026-11-01" and row["price_source"] == "prices.yaml"
    bad = bench_cli("report", "--store", "bench.db", "--prices", "nope.yaml", cwd=small_store)
    assert bad.returncode == 2 and "nope.yaml" in bad.stderr


@pytest.mark.slow
def test_empty_store_exits_2(tmp_path):
    Store(tmp_path / "bench.db").close()
    r = bench_cli("report", "--store", "bench.db", "--out", "out", cwd=tmp_path)
    assert r.returncode == 2 and "no records" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_ib_mismatch_is_marked_and_imports_stay_out_of_measured_tables(tmp_path):
    mismatch = {"requested_transport": "ib", "effective_transport": "tcp", "transport_verdict": "mismatch"}
    extra = [(dict(gpu="cpu", mpi="openmpi", gpus=2, ib=True), [1.3, 1.35, 1.25])]
    write_small_store(tmp_path / "bench.db", extra)
    with Store(tmp_path / "bench.db") as store:
        over, scales = extra[0]
        store.write_many(parse_record({**record(run_id="r2", repeat=i, rate_scale=s, repeats=3, **over), **mismatch})
                         for i, s in enumerate(scales))
        ref = record(run_id="import:batchai:0123456789ab", repeat=0, rate_scale=50.0, gpu="cpu", mpi="gloo", gpus=2)
        store.write(parse_record({**ref, "cell_id": "refcell00001"}))
    r = bench_cli("report", "--store", "bench.db", "--out", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "out" / "index.html").read_text()
    assert "⚠ MISMATCH: tcp (asked ib)" in html and 'id="ib"' in html
    with open(tmp_path / "out" / "cells.csv") as f:
        cells = {row["cell_id"] for row in csv.DictReader(f)}
    assert "refcell00001" not in cells and len(cells) == 6
    assert 'id="references"' in html and "batchai" in html


# --- 5,000 cells and the browser -----------------------------------------------------------------------------------
def write_many_cells(path: Path, n: int) -> None:
    import itertools

    grid = itertools.product([224, 128], [16, 32, 64, 128], ["fp32", "bf16"], [False, True],
                             ["openmpi", "gloo", "mpich"], ["pytorch", "tensorflow", "keras"],
                             ["cpu", "V100", "A100", "H100", "T4"], [1, 2, 4, 8, 16, 32])  # 8,640 cells
    with Store(path) as store:
        batch = []
        for i, (size, b, p, ib, mpi, fw, gpu, g) in enumerate(itertools.islice(grid, n)):
            first = parse_record(record(run_id="big", repeats=1, rate_scale=1 + (i % 7) / 10, gpu=gpu, framework=fw,
                                        mpi=mpi, ib=ib, precision=p, batch_per_gpu=b, gpus=g, image_size=size))
            batch.append(first)
            if len(batch) >= 2000:
                store.write_many(batch)
                batch = []
        store.write_many(batch)


@pytest.fixture(scope="module")
def reports():
    d = Path(tempfile.mkdtemp(prefix="bench-report-"))
    write_small_store(d / "small.db")
    write_many_cells(d / "big.db", 5000)
    for name in ("small", "big"):
        r = bench_cli("report", "--store", f"{name}.db", "--out", name, cwd=d)
        assert r.returncode == 0, r.stderr
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
def test_5000_cells_stay_readable(reports):
    html = (reports / "big" / "index.html").read_text()
    assert "5000 measured cells" in html
    assert html.count("<details>") == 5 and "<details open>" not in html  # one folded block per GPU
    assert html.count("Showing 200 of") >= 5  # every big table is cut, with the CSV named
    assert html.count("<tr>") < 5000  # not every row on the page
    with open(reports / "big" / "cells.csv") as f:
        assert sum(1 for _ in csv.DictReader(f)) == 5000
    assert html.count(plotly_js()) == 1 and len(html) - len(plotly_js()) < 8_000_000  # plotly.js once, inline
    small = (reports / "small" / "index.html").read_text()
    # The headline tables answer first; the wide ones fold below it, small report or not.
    assert 'id="headline-resnet-50-img-s-table"' in small and "<details open>" not in small and "Showing" not in small


PAGE_SECTIONS = {"small": ["scaling", "study", "gpus", "mpi", "cost", "environment"],
            "big": ["scaling", "study", "gpus", "framework", "mpi", "ib", "cost", "precision", "environment"]}


@pytest.mark.browser
@pytest.mark.parametrize("name", ["small", "big"])
def test_page_renders_in_headless_chromium(reports, name):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("chromium is not installed (make test installs it)")
    profile = tempfile.mkdtemp()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--window-size=1200,2400"]
    url = (reports / name / "index.html").as_uri()
    dom = subprocess.run([chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=180).stdout
    for section in PAGE_SECTIONS[name]:
        assert f'id="{section}"' in dom, section
    assert 'src="data:image/png;base64,' in dom and 'src="http' not in dom
    shot = reports / f"{name}.png"
    subprocess.run([chromium, *flags, f"--screenshot={shot}", url], capture_output=True, timeout=180)
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[0] >= 2000
    colourful = int(((pixels.max(axis=2) - pixels.min(axis=2)) > 0.3).sum())
    assert colourful > 300, "the page shows no chart colours"


# --- the study's charts (published references read from the repository) and legends --------------------------------
def test_a_legend_names_what_differs_and_the_title_what_is_shared():
    from bench.report.charts import differing_labels

    rows = [pd.Series({**BASE, "mpi": m, "batch_per_gpu": b}) for m, b in (("gloo", 64), ("openmpi", 64),
                                                                            ("openmpi", 32))]
    labels, common = differing_labels(rows, ["batch_per_gpu"])
    assert labels == ["gloo · batch_per_gpu=64", "openmpi · batch_per_gpu=64", "openmpi · batch_per_gpu=32"]
    assert common == "pytorch · IB off · synthetic"
    alone, nothing = differing_labels(rows[:1], [])
    assert alone == ["pytorch · gloo · IB off · synthetic"] and nothing == ""


def test_published_series_and_predictions_equal_the_csv_and_the_model():
    from bench.analysis.study_validation import predicted_series
    from bench.analysis.whatif import predict
    from bench.facts.reference import REFERENCE_DIR, published_series

    with open(REFERENCE_DIR / "batchai_tf_cnn_benchmarks_synthetic_from_svg.csv", newline="") as f:
        bars = {(r["gpu_type"], r["mpi"], int(r["total_gpus"])): float(r["images_per_sec_total"])
                for r in csv.DictReader(f) if r["status"].startswith("final") and r["model_arg"] == "resnet50"}
    pub = published_series()
    assert set(pub["gpu"]) == {"K80", "P40", "P100", "V100"} and set(pub["gpus"]) == {1, 2, 3, 4, 8, 16, 32}
    pred = predicted_series(pub)
    for gpu in ("K80", "P40", "P100", "V100"):
        for mpi, series, fabric, route in (
                ("IntelMPI", "TensorFlow · Intel MPI · IB", "ib", "host"),
                ("OpenMPI+NCCL", "TensorFlow · Open MPI + NCCL · TCP", "tcp", "nccl-ring")):
            row = pub[(pub["gpu"] == gpu) & (pub["series"] == series) & (pub["gpus"] == 32)].iloc[0]
            assert row["efficiency"] == pytest.approx(bars[(gpu, mpi, 32)] / (32 * bars[(gpu, mpi, 1)]))
            want = predict(gpu, 32, bars[(gpu, mpi, 1)], 64, fabric=fabric, path=route).efficiency
            got = pred[(pred["gpu"] == gpu) & (pred["series"] == series) & (pred["gpus"] == 32)]["efficiency"]
            assert got.iloc[0] == pytest.approx(want)
    assert (pub[pub["gpu"] == "V100"]["series"] == "PyTorch · Open MPI + NCCL · TCP").sum() == 7


def _store_state(path: Path):
    """What resume and `check` read: the records and the cells the store counts as done."""
    with Store(path) as store:
        records, done = store.records(), store.completed_cells()
    return len(records), sorted((r["run_id"], r["cell_id"], r["job"], r["repeat"]) for r in records), done


@pytest.mark.slow
def test_a_first_run_whose_cells_all_failed_still_shows_the_study(tmp_path):
    with Store(tmp_path / "bench.db") as store:
        store.write(parse_record({**record(run_id="r1", repeat=0, repeats=1), "status": "failed",
                                  "error": "exit code 1"}))
    before = _store_state(tmp_path / "bench.db")
    result = bench_cli("report", "--store", "bench.db", "--out", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    html = (tmp_path / "out" / "index.html").read_text()
    assert 'class="omitted" id="scaling"' in html and 'id="study"' in html and 'id="study-table"' in html
    assert "No cell of these GPU types is measured in this store yet." in html
    assert _store_state(tmp_path / "bench.db") == before and before[2] == set()


@pytest.mark.slow
def test_the_page_escapes_what_workers_and_users_wrote(tmp_path):
    """A failed cell's error is a worker's stderr: the page shows it as text, whatever it holds."""
    error = "RuntimeError: <unexpected> shape & </td></table><script>alert(1)</script>"
    with Store(tmp_path / "bench.db") as store:
        store.write(parse_record({**record(run_id="r1", repeat=0, repeats=1), "status": "failed", "error": error}))
        store.write(parse_record(record(run_id="r1", repeat=0, repeats=1, gpus=2)))
    result = bench_cli("report", "--store", "bench.db", "--out", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    html = (tmp_path / "out" / "index.html").read_text()
    # The page's own scripts are plotly's (its hover charts); none comes from what a worker wrote.
    assert "<script>alert" not in html and "<unexpected>" not in html
    assert "RuntimeError: &lt;unexpected&gt; shape &amp; &lt;/td&gt;&lt;/table&gt;&lt;script&gt;" in html
    # The Markdown summary keeps the text as it is (a Markdown viewer escapes it).
    assert error.split(" shape")[0] in (tmp_path / "out" / "summary.md").read_text()


@pytest.mark.slow
def test_the_report_after_a_run_shows_the_study_and_leaves_the_store_alone(small_store):
    before = _store_state(small_store / "bench.db")
    result = bench_cli("report", "--store", "bench.db", "--out", "out", cwd=small_store)
    assert result.returncode == 0, result.stderr
    html = (small_store / "out" / "index.html").read_text()
    assert 'id="study"' in html and "published (Batch AI 2018), not measured here" in html
    assert re.search(r'<section id="study">\s*<h2>The 2018 Batch AI study: published scaling', html)
    assert "msalvaris/BatchAIHorovodBenchmark" in html and "msalvaris/BatchAIPyTorchHorovodBenchmark" in html
    for gpu in ("K80", "P40", "P100", "V100"):
        assert (small_store / "out" / f"study_{gpu}.png").stat().st_size > 10_000
    # The small store has one V100 cell: it is drawn on the V100 study chart, and only there.
    assert "V100: published (Batch AI 2018), not measured here (dotted), what-if model (dashed), measured here" in html
    assert "K80: published (Batch AI 2018), not measured here (dotted), what-if model (dashed)<" in html
    # Beside the K80 curve and in its rows: the model's miss over TCP is shown and said to be unexplained, with why.
    assert "K80 · TensorFlow · Open MPI + NCCL · TCP: the model&#39;s miss is shown, not fitted away — not explained" \
        in html
    assert re.search(r"<td[^>]*>\+4[01] pts \(not explained\)</td>", html)
    # The references never reach the store (records, hence resume and check) nor a measured table.
    after = _store_state(small_store / "bench.db")
    assert after == before and not any(run.startswith("import:") for run, *_ in after[1])
    with open(small_store / "out" / "cells.csv") as f:
        assert {r["gpu"] for r in csv.DictReader(f)} == {"cpu", "V100"}
    assert "imported published records" not in html


# Appended to a copy of the page: for each table, the nearest ancestor that scrolls sideways (if any), the table's
# width and that box's; and whether the page itself grew wider than the window (something pushed out, cut off).
PROBE = """<script>
window.addEventListener("load", () => {
  for (const d of document.querySelectorAll("details")) d.open = true;  // the wide tables fold: open them all
  const tables = [];
  for (const t of document.querySelectorAll("table")) {
    let box = t.parentElement;
    while (box !== document.body && !["auto", "scroll"].includes(getComputedStyle(box).overflowX)) {
      box = box.parentElement;
    }
    tables.push({id: t.id, width: t.scrollWidth, box: box === document.body ? null : box.clientWidth,
                 box_scrolls: box !== document.body && box.scrollWidth > box.clientWidth});
  }
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify({page: document.documentElement.scrollWidth, window: window.innerWidth, tables});
  document.body.appendChild(out);
});
</script>"""


@pytest.mark.browser
def test_wide_tables_scroll_inside_their_box_in_headless_chromium(reports):
    import json

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("chromium is not installed (make test installs it)")
    page = reports / "small" / "probe.html"
    page.write_text((reports / "small" / "index.html").read_text().replace("</body>", PROBE + "</body>"))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tempfile.mkdtemp()}", "--window-size=1000,2000"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=180).stdout
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, "the probe did not run"
    probe = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    wide = [t for t in probe["tables"] if t["box"] is None or t["width"] > t["box"]]
    assert any(t["id"] == "scaling-table" for t in wide), probe  # 19 columns are wider than a 1000 px window
    for t in probe["tables"]:
        assert t["box"] is not None, f"table {t['id']!r} has no box that scrolls sideways"
        assert t["box_scrolls"] == (t["width"] > t["box"]), t
    assert probe["page"] <= probe["window"], "a table pushed the page wider than the window"
    assert 'id="study"' in dom


# --- sections as data: one module each, in SECTIONS order, for the page and summary.md alike -----------------------
FULL_ORDER = ["headline", "scaling", "expected", "transformer", "study", "gpus", "mfu", "framework", "mpi", "ib",
              "data", "cost", "precision", "prediction", "collectives", "history", "references", "failures",
              "environment"]
# The sections the full store leaves out: the layout cells' (tests/test_layout_report.py, on a real layout store).
NOT_IN_FULL = ("layouts",)


def _page_ids(html: str) -> list[str]:
    """The ids of the page's sections in reading order: full sections, omitted lines, failed cells, what ran."""
    return ["".join(m) for m in re.findall(r'<section id="([^"]+)">|<p class="omitted" id="([^"]+)">|<h2 id="([^"]+)"',
                                           html)]


@pytest.fixture(scope="module")
def full_report():
    from bench.report.render import report_from_store

    d = Path(tempfile.mkdtemp(prefix="bench-report-full-"))
    write_full_store(d / "bench.db")
    written = report_from_store(str(d / "bench.db"), d / "out")
    yield d, written
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
def test_every_section_shows_in_sections_order_in_the_page_and_the_summary(full_report):
    from bench.report.sections import SECTIONS

    d, _ = full_report
    html = (d / "out" / "index.html").read_text()
    # The full store fills every section but NOT_IN_FULL's.
    assert _page_ids(html) == FULL_ORDER and len(SECTIONS) == len(FULL_ORDER) + len(NOT_IN_FULL)
    modules = [m.__name__.rsplit(".", 1)[1] for m in SECTIONS]  # one module gives a section per workload
    modules = [m for m in modules if m not in NOT_IN_FULL]
    assert [{"workloads": "transformer"}.get(m, m) for m in modules] == [*FULL_ORDER[:-1], "what_ran"]
    headings = re.findall(r"<h2[^>]*>([^<]+)</h2>", html)
    nav = re.findall(r'<a href="#([^"]+)">', html.split("<nav>")[1].split("</nav>")[0])
    assert nav == FULL_ORDER and len(headings) == len(FULL_ORDER)
    summary = (d / "out" / "summary.md").read_text()
    # The same objects, the same order; the environments are in the page only.
    assert re.findall(r"^## (.+)$", summary, re.M) == headings[:-1] and headings[-1] == "What ran"
    assert summary.endswith("| cpu/pytorch/gloo/ib=off/4w fp32 10+50x1 | d2fb765b0bb4 | failed | exit code 1 |\n")


def test_the_page_follows_the_sections_tuple(full_report, monkeypatch, tmp_path):
    from bench.report import sections
    from bench.report.render import report_from_store

    d, _ = full_report
    order = (sections.what_ran, sections.failures, sections.references, sections.collectives)
    monkeypatch.setattr(sections, "SECTIONS", order)
    report_from_store(str(d / "bench.db"), tmp_path / "out")
    html = (tmp_path / "out" / "index.html").read_text()
    assert _page_ids(html) == ["environment", "failures", "references", "collectives"]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert re.findall(r"^## (.+)$", summary, re.M) == ["Failed cells (latest attempt)",
                                                        "Published references (imported, not measured here)",
                                                        "Collectives: bandwidth vs message size"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["index.html", "summary.md"]  # no charts drawn


def test_the_files_a_report_names_are_the_files_its_sections_wrote(full_report):
    d, written = full_report
    assert written[:2] == [d / "out" / "index.html", d / "out" / "summary.md"]
    assert len(written) == len(set(written)) and set(written) == set((d / "out").iterdir())
    assert {"cells.csv", "compare_ib.csv", "cost.png", "prediction.png", "study_V100.png"} <= {p.name for p in written}


def test_every_section_builder_returns_none_on_an_empty_store(tmp_path):
    from bench.report.sections import SECTIONS
    from bench.report.sections.context import build_context

    with Store(tmp_path / "bench.db") as store:
        records, collectives = store.dataframe(record_json=False), store.collectives()
    out = tmp_path / "out"
    out.mkdir()
    ctx = build_context(records, out, collectives=collectives)
    for module in SECTIONS:
        assert module.build(ctx) is None, module.__name__
    assert not any(out.iterdir())
