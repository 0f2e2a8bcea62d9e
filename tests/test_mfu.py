"""MFU of every GPU cell (issue 33 item 3): the model FLOPs per trained image counted two independent ways and
written to bench/data/model_flops.yaml, the catalogue's dense peaks, the arithmetic, and MFU beside the sampled
power and energy in `bench status`, the report and `bench export` — on the real store of the first H200 run
(benchmarks/results/h200-resnet50.db, always copied first: opening the tracked file would leave -wal/-shm
files beside it)."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from bench.analysis.mfu import (EXPORT_COLUMNS, catalogue_peaks, export_columns, mfu, peak_format, power_of, with_mfu,
                                with_power)
from bench.facts.catalog import PEAK_FORMATS, catalog
from bench.facts.model_flops import flops_per_image, model_flops
from models.workloads.resnet50 import flops
from tests.conftest import ROOT, bench_cli

TABLE = ROOT / "bench" / "data" / "model_flops.yaml"
H200_STORE = ROOT / "benchmarks" / "results" / "h200-resnet50.db"
HEADLINE = "87f3f262f3d7"  # the H200 run's best synthetic cell: Horovod, AMP fp16, channels-last, 5,940 img/s


# --- the FLOP counts --------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("size", flops.SIZES)
def test_the_two_counts_agree(size):
    counted, analytic = flops.counted("resnet50", size), flops.analytic("resnet50", size)
    assert counted.forward == analytic.forward  # exactly: the same products, counted two ways
    assert counted.step == analytic.step
    # The convention (3 × forward) against the step autograd runs: the image batch needs no gradient, so the stem
    # convolution's input gradient is never computed; everything else is 2 × forward in backward.
    assert 0 < counted.model_flops / counted.step - 1 <= flops.TOLERANCE
    assert flops.disagreements("resnet50", size, counted, analytic) == []


def test_resnet50_at_224_is_4_09_gmacs_forward():
    c = flops.counted("resnet50", 224)
    assert c.forward / 2 / 1e9 == pytest.approx(4.09, abs=0.005)  # torchvision's "GFLOPS 4.09" (multiply-adds)
    assert c.model_flops == 3 * c.forward == 24_535_105_536
    assert c.step == 24_299_077_632


def test_a_disagreement_between_the_counts_is_named():
    c = flops.counted("resnet50", 32)
    off = flops.Counts(c.forward + 2, c.step)
    problems = flops.disagreements("resnet50", 32, c, off)
    assert len(problems) == 1 and "forward" in problems[0]
    with pytest.raises(ValueError, match="forward"):
        flops.table([("resnet50", 32, c, off)])


@pytest.mark.slow
def test_the_table_matches_a_fresh_count():
    assert flops.check(str(TABLE)) == []
    assert TABLE.read_text(encoding="utf-8") == flops.render(flops.table())
    assert model_flops()["resnet50"][224]["flops_per_image"] == flops_per_image("resnet50", 224) == 24_535_105_536
    assert flops_per_image("resnet50", 96) is None and flops_per_image("allreduce", 64) is None


@pytest.mark.slow
def test_a_wrong_entry_fails(tmp_path):
    text = TABLE.read_text(encoding="utf-8")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(text.replace("flops_per_image: 2014150656", "flops_per_image: 2014150657"), encoding="utf-8")
    problems = flops.check(str(wrong))
    assert len(problems) == 1 and "resnet50 64px" in problems[0]
    missing = tmp_path / "missing.yaml"
    missing.write_text("\n".join(line for line in text.splitlines() if not line.startswith("  32:")) + "\n",
                       encoding="utf-8")
    assert any("resnet50 32px" in p and "None" in p for p in flops.check(str(missing)))
    edited = tmp_path / "edited.yaml"
    edited.write_text(text.replace("# Model FLOPs", "# model FLOPs"), encoding="utf-8")
    assert flops.check(str(edited)) == ["the numbers match but the file is not as --write writes it (edited by hand?)"]
    out = subprocess.run([sys.executable, "-m", "models.workloads.resnet50.flops", "--check", str(wrong)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and "differs" in out.stdout


def test_every_image_size_the_matrices_use_has_a_count():
    from bench.planning.matrix import load_matrix
    from models.registry.collectives import COLLECTIVES
    from models.registry.workloads import is_transformer

    used = set()  # the image workloads' (a transformer's FLOPs come from its shape: test_transformer_flops_are_counted)
    for path in sorted([*ROOT.glob("matrix*.yaml"), *(ROOT / "ci").glob("*.yaml")]):
        used |= {(c["model"], c["image_size"]) for c in load_matrix(path).cells()
                 if c["model"] not in COLLECTIVES and not is_transformer(c["model"])}
    assert ("resnet50", 224) in used and len(used) >= 3
    assert {(m, s) for m, s in used if flops_per_image(m, s) is None} == set()


@pytest.mark.slow
def test_the_keras_model_has_the_same_forward_flops():
    """A third count, of the TensorFlow/Keras workloads' own model (models/workloads/resnet50/model_tf.py): its Conv2D
    and Dense layers' kernels and output shapes, so the table's row serves every framework. In a process of its own."""
    code = """
import math
import tf_keras as keras
from models.workloads.resnet50.model_tf import resnet50
model = resnet50(keras, 64)
macs = 0
for layer in model.layers:
    if isinstance(layer, keras.layers.Conv2D):
        kh, kw, cin, _ = layer.kernel.shape
        macs += math.prod(layer.output_shape[1:]) * kh * kw * cin
    elif isinstance(layer, keras.layers.Dense):
        macs += math.prod(layer.output_shape[1:]) * layer.kernel.shape[0]
print(2 * macs)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={"TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) == model_flops()["resnet50"][64]["forward_flops"]


# --- the peaks ------------------------------------------------------------------------------------------------------
def test_every_gpu_sku_has_a_dense_peak_for_each_precision_it_supports():
    for key, sku in catalog().items():
        peaks = sku.peak_tflops
        if sku.is_cpu:
            assert peaks == {} and sku.peak_source is None
            continue
        assert set(peaks) <= set(PEAK_FORMATS) and "fp32" in peaks and sku.peak_source, key
        assert ("fp16" in peaks) == sku.fp16 and ("bf16" in peaks) == sku.bf16, key
        assert ("tf32" in peaks) == (float(sku.compute_capability) >= 8.0), key  # TF32 from Ampere on
        for fmt in ("tf32", "fp16", "bf16"):
            if fmt in peaks:
                assert peaks[fmt] > peaks["fp32"], (key, fmt)
        for precision in ("fp32", "fp16", "bf16"):
            supported = precision == "fp32" or getattr(sku, precision)
            assert (peak_format(precision, peaks) is not None) == supported, (key, precision)
    skus = catalog()
    # Dense, not the data sheets' sparse figures; the H200 has the H100 SXM5's compute; a K80 GPU is one die.
    assert skus["H100"].peak_tflops == skus["H200"].peak_tflops == {"fp32": 66.9, "tf32": 494.7, "fp16": 989.4,
                                                                    "bf16": 989.4}
    assert skus["A100"].peak_tflops["bf16"] == 312.0 and skus["V100-ND40"].peak_tflops["fp16"] == 125.0
    assert skus["K80"].peak_tflops == {"fp32": 4.37}


def test_a_bad_peak_is_refused():
    from pydantic import ValidationError

    from bench.facts.catalog import GpuSku

    base = catalog()["H200"].model_dump()
    with pytest.raises(ValidationError, match="fp8"):
        GpuSku(**{**base, "peak_tflops": {"fp8": 1979.0}})
    with pytest.raises(ValidationError, match="positive"):
        GpuSku(**{**base, "peak_tflops": {"fp32": 0}})


def test_which_peak_a_cell_is_held_to():
    a100, v100, p40 = (catalog()[k].peak_tflops for k in ("A100", "V100", "P40"))
    assert peak_format("fp32", a100) == "tf32"  # the workers leave TF32 on: fp32 convolutions run on tensor cores
    assert peak_format("fp32", v100) == "fp32"  # no TF32 before Ampere
    assert peak_format("fp16", v100) == "fp16" and peak_format("bf16", a100) == "bf16"
    assert peak_format("bf16", v100) is None and peak_format("fp16", p40) is None


# --- the arithmetic -------------------------------------------------------------------------------------------------
def test_mfu_by_hand():
    # 2 GPUs at 2,000 img/s together: 1,000 per GPU × 24.5 GFLOP = 24.5 TFLOP/s of a 100 TFLOP/s peak = 24.5 %.
    assert mfu(1000.0, 24.5e9, 100.0) == pytest.approx(0.245)
    df = pd.DataFrame([
        {"gpu": "X1", "model": "resnet50", "image_size": 224, "precision": "fp16", "samples_per_sec": 2000.0,
         "gpus": 2},
        {"gpu": "X1", "model": "resnet50", "image_size": 224, "precision": "fp32", "samples_per_sec": 500.0, "gpus": 1},
        {"gpu": "X1", "model": "resnet50", "image_size": 96, "precision": "fp16", "samples_per_sec": 900.0, "gpus": 1},
        {"gpu": "X1", "model": "resnet50", "image_size": 224, "precision": "bf16", "samples_per_sec": 900.0, "gpus": 1},
        {"gpu": "cpu", "model": "resnet50", "image_size": 224, "precision": "fp32", "samples_per_sec": 9.0, "gpus": 1},
        {"gpu": "Z9", "model": "resnet50", "image_size": 224, "precision": "fp32", "samples_per_sec": 9.0, "gpus": 1},
        {"gpu": "X1", "model": "resnet50", "image_size": 224, "precision": "fp16", "samples_per_sec": None, "gpus": 1},
    ])
    peaks = {"X1": {"fp32": 10.0, "tf32": 50.0, "fp16": 100.0}, "cpu": {}}
    out = with_mfu(df, peaks=peaks, flops=lambda model, size, seq_len=None: 24_500_000_000 if size == 224 else None)
    assert out["mfu"].iloc[0] == pytest.approx(0.245)
    assert out["peak_format"].iloc[1] == "tf32" and out["mfu"].iloc[1] == pytest.approx(500 * 24.5e9 / 50e12)
    assert list(out["mfu_why"]) == [None, None, "no FLOP count for resnet50 at 96 px", "no bf16 peak for X1",
                                    "CPU: no peak", "Z9: not in the catalogue", "no throughput"]
    assert out["mfu"].iloc[2:].isna().all()
    assert math.isnan(out["flops_per_sample"].iloc[2]) and out["peak_tflops"].iloc[2] == 100.0


def test_a_cpu_cell_shows_no_mfu():
    row = {"gpu": "cpu", "model": "resnet50", "image_size": 64, "precision": "fp32", "samples_per_sec": 12.0,
           "gpus": 2}
    out = with_mfu(pd.DataFrame([row]))
    assert pd.isna(out["mfu"].iloc[0]) and out["mfu_why"].iloc[0] == "CPU: no peak"
    assert pd.isna(out["peak_tflops"].iloc[0]) and catalogue_peaks()["cpu"] == {}


def test_power_is_read_from_the_record_json():
    doc = {"power": {"source": "nvml", "gpus": 1, "samples": 21, "joules": 1326.0, "joules_per_image": 0.1036,
                     "mean_watts_per_gpu": 615.07, "note": None}}
    assert power_of(json.dumps(doc)) == (615.07, 0.1036)
    assert power_of(json.dumps({"power": None})) == (None, None)
    assert power_of(json.dumps({"power": {"joules_per_image": None, "mean_watts_per_gpu": None}})) == (None, None)
    assert power_of("{not json") == (None, None) and power_of(None) == (None, None)
    records = pd.DataFrame([{"run_id": "r", "cell_id": "c", "job": 0, "repeat": 0, "status": "ok", "gpu": "H200",
                             "record_json": json.dumps(doc)},
                            {"run_id": "r", "cell_id": "d", "job": 0, "repeat": 0, "status": "ok", "gpu": "cpu",
                             "record_json": json.dumps(doc)}])  # a CPU record's JSON is not read
    out = with_power(records)
    assert list(out["mean_watts_per_gpu"].fillna(-1)) == [615.07, -1]


# --- status, report and export on the real H200 store -------------------------------------------------------------
@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    d = tmp_path_factory.mktemp("h200")
    shutil.copy(H200_STORE, d / "bench.db")  # never the tracked file itself
    return d


def test_the_h200_headline_cell_mfu(h200):
    from bench.analysis.mfu import power_frame, with_cell_power
    from bench.analysis.scaling import cell_summary, latest_complete
    from bench.store import Store

    with Store(h200 / "bench.db", create=False) as store:
        records, rows = store.dataframe(record_json=False), store.records()
    ok = latest_complete(with_power(records, power_frame(rows)))
    table = with_cell_power(with_mfu(cell_summary(ok)), ok).set_index("cell_id")
    head = table.loc[HEADLINE]
    assert head["samples_per_sec"] == pytest.approx(5940.07, abs=0.01)  # the median of its three windows
    assert head["peak_format"] == "fp16" and head["peak_tflops"] == 989.4
    assert head["mfu"] == pytest.approx(5940.068 * 24_535_105_536 / 989.4e12, rel=1e-6)
    assert round(100 * head["mfu"], 1) == 14.7
    assert head["mean_watts_per_gpu"] == pytest.approx(615.07, abs=0.01)
    assert head["joules_per_image"] == pytest.approx(0.1036, abs=1e-4)


def test_status_shows_mfu_power_and_energy_for_gpu_cells(h200):
    out = bench_cli("status", "-v", "--store", "bench.db", cwd=h200)  # the MFU lines come after the table
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.strip().startswith(HEADLINE) and "MFU" in x)
    assert "5,940.1 img/s per GPU, MFU 14.7% (fp16 peak 989.4 TFLOP/s, 24.54 GFLOP/img), 615 W/GPU, 0.104 J/img" \
        in line
    assert sum("MFU" in x for x in out.stdout.splitlines() if x.startswith("  ")) == 4


@pytest.mark.slow
def test_the_report_shows_mfu_beside_watts_and_energy(h200):
    out = bench_cli("report", "--store", "bench.db", "--out", "out", cwd=h200)
    assert out.returncode == 0, out.stderr
    summary = (h200 / "out" / "summary.md").read_text(encoding="utf-8")
    header = next(x for x in summary.splitlines() if x.startswith("| gpu | framework |"))
    assert "| per worker | MFU | W/GPU | J/img |" in header  # the main table's H200 block
    assert "| 5,940.1 | 14.7% | 615 | 0.104 | — | 1.00× |" in summary
    assert "## MFU and energy per image (GPU cells)" in summary
    mfu_row = next(x for x in summary.splitlines() if x.startswith("| H200/pytorch/gloo/ib=off/1w fp16 b256 20+50x3"))
    assert "| 24.54 | 145.7 | fp16 989.4 TFLOP/s | 14.7% | 615 | 0.104 | 87f3f262f3d7 |" in mfu_row
    assert "NVIDIA H200 data sheet" in summary
    html = (h200 / "out" / "index.html").read_text(encoding="utf-8")
    assert 'id="mfu-table"' in html and "<th class=\"\">MFU</th>" in html
    cells = pd.read_csv(h200 / "out" / "cells.csv").set_index("cell_id")
    assert round(100 * cells.loc[HEADLINE, "mfu"], 1) == 14.7


@pytest.mark.slow
def test_export_adds_mfu_and_power_columns(h200):
    out = bench_cli("export", "--store", "bench.db", "-o", "records.csv", cwd=h200)
    assert out.returncode == 0, out.stderr
    df = pd.read_csv(h200 / "records.csv")
    assert list(df.columns[-len(EXPORT_COLUMNS):]) == list(EXPORT_COLUMNS)
    head = df[(df.cell_id == HEADLINE) & (df.status == "ok")]
    assert len(head) == 3 and (head["flops_per_sample"] == 24_535_105_536).all()
    assert head["mfu"].tolist() == pytest.approx((head["samples_per_sec"] * 24_535_105_536 / 989.4e12).tolist())
    assert head["mean_watts_per_gpu"].between(600, 640).all() and head["joules_per_image"].between(0.1, 0.11).all()
    assert df[df.status != "ok"]["mfu"].isna().all()
    # The derived columns are recomputed, never imported: the export imports back as it was.
    back = bench_cli("import", "records.csv", "--store", "again.db", cwd=h200)
    assert back.returncode == 0, back.stderr


@pytest.mark.slow
def test_cpu_records_export_and_report_without_mfu(tmp_path):
    from bench.records.schema import parse_record
    from bench.store import Store
    from tests.factories import record

    with Store(tmp_path / "bench.db") as store:
        store.write_many(parse_record(record(run_id="r1", repeat=i, repeats=3, gpu="cpu", mpi="gloo", gpus=1))
                         for i in range(3))
    assert bench_cli("export", "--store", "bench.db", "-o", "r.csv", cwd=tmp_path).returncode == 0
    df = pd.read_csv(tmp_path / "r.csv", keep_default_na=False)
    assert set(df["mfu"]) == {""} and set(df["peak_format"]) == {""} and set(df["joules_per_image"]) == {""}
    status = bench_cli("status", "--store", "bench.db", cwd=tmp_path)
    assert status.returncode == 0 and "MFU" not in status.stdout
    assert bench_cli("report", "--store", "bench.db", "--out", "out", cwd=tmp_path).returncode == 0
    summary = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "| MFU |" not in summary  # a CPU block has no MFU, W or J column
    assert "_MFU and energy per image (GPU cells): omitted — no GPU cell measured" in summary


def test_export_columns_on_an_empty_store():
    empty = pd.DataFrame(columns=["run_id", "cell_id", "job", "repeat", "status", "gpu", "model", "image_size",
                                  "precision", "samples_per_sec", "gpus", "record_json"])
    assert list(export_columns(empty).columns) == [*empty.columns, *EXPORT_COLUMNS]


def test_the_results_page_quotes_the_stores_mfu(h200):
    """The ResNet-50 loan's MFU column (its lab note, docs/lab/2026-11-26-h200-resnet50.md) is the store's, to 0.1 %."""
    import re

    from bench.analysis.scaling import cell_summary, latest_complete
    from bench.store import Store

    with Store(h200 / "bench.db", create=False) as store:
        table = with_mfu(cell_summary(latest_complete(store.dataframe(record_json=False)))).set_index("cell_id")
    resnet = (ROOT / "docs" / "lab" / "2026-11-26-h200-resnet50.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| ([0-9a-f]{12}) \|(?:[^|]*\|){7} ([\d.]+) % \|", resnet, re.M)
    assert len(rows) == 4
    for cell, shown in rows:
        assert f"{100 * table.loc[cell, 'mfu']:.1f}" == shown, cell


def test_the_results_page_quotes_the_transformer_stores_mfu(h200_gpt2):
    """The 2026-12-04 table's MFU column is what the store gives for each cell's latest run, to 0.1 %."""
    import re

    from bench.analysis.scaling import cell_summary, latest_complete
    from bench.store import Store

    with Store(h200_gpt2 / "bench.db", create=False) as store:
        table = with_mfu(cell_summary(latest_complete(store.dataframe(record_json=False)))).set_index("cell_id")
    transformer = (ROOT / "docs" / "lab" / "2026-12-04-h200-transformer.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| ([0-9a-f]{12}) \|(?:[^|]*\|){7} \**([\d.]+) %\** \|", transformer, re.M)
    assert len(rows) == 8
    for cell, shown in rows:
        assert f"{100 * table.loc[cell, 'mfu']:.1f}" == shown, cell


def test_reading_the_tracked_h200_store_leaves_it_byte_for_byte():
    """docs/gpu.md reads the tracked store in place: a reader brings it to today's schema in memory only."""
    import hashlib

    from bench.store import STORE_SCHEMA_VERSION, Store

    before = hashlib.sha256(H200_STORE.read_bytes()).hexdigest()
    with Store(H200_STORE, read_only=True) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION and len(store.records()) > 0
    assert hashlib.sha256(H200_STORE.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in H200_STORE.parent.glob(H200_STORE.name + "*")) == [H200_STORE.name]


def test_transformer_flops_are_counted_from_the_shape_at_the_cells_sequence_length():
    from bench.analysis.mfu import table_flops
    from models.workloads.transformer.shapes import CONFIGS

    gpt2 = CONFIGS["gpt2-124m"]
    assert table_flops("gpt2-124m", 224) == gpt2.flops_per_sequence(1024)
    assert table_flops("gpt2-124m", 224, 256) == gpt2.flops_per_sequence(256) < gpt2.flops_per_sequence(1024)
    # 6N + 12LHQT per token at T = 1024, N the matrices a token goes through (no position table): nanoGPT's count.
    n = gpt2.matmul_params()
    assert gpt2.flops_per_sequence(1024) == 1024 * (6 * n + 12 * 12 * 12 * 64 * 1024)


# --- the transformer's H200 store (docs/lab/2026-12-04-h200-transformer.md) -------------------------------------------
GPT2_STORE = ROOT / "benchmarks" / "results" / "h200-transformer.db"
GPT2_B64_DDP = "b1711f9bb4cd"  # GPT-2 124M, DDP, bf16, 64 x 1,024 tokens, compiled


@pytest.fixture(scope="module")
def h200_gpt2(tmp_path_factory):
    d = tmp_path_factory.mktemp("h200-gpt2")
    shutil.copy(GPT2_STORE, d / "bench.db")
    return d


def test_status_speaks_tokens_and_sequences_for_transformer_gpu_cells(h200_gpt2):
    # The MFU line in the cell's own unit: tokens/s per GPU, GFLOP and joules per sequence (the worker's energy is
    # per sample, and a sample here is a sequence of 1,024 tokens), never img/s.
    out = bench_cli("status", "-v", "--store", "bench.db", cwd=h200_gpt2)
    assert out.returncode == 0, out.stderr
    lines = [x for x in out.stdout.splitlines() if x.startswith("  ") and "MFU" in x]
    line = next(x for x in lines if x.strip().startswith(GPT2_B64_DDP))
    # The latest run's windows: 484,356, 479,588 and 474,928 tokens/s; the median is the figure.
    assert "479,588 tokens/s per GPU, MFU 41.4% (bf16 peak 989.4 TFLOP/s, 874.94 GFLOP/sequence), 690 W/GPU, " \
           "1.470 J/sequence" in line
    assert len(lines) == 8 and not any("img" in x for x in lines)


@pytest.mark.slow
def test_the_reports_transformer_section_has_power_energy_and_cost_per_million_tokens(h200_gpt2):
    # A price for the H200 (the catalogue has none): $ per million tokens = $/h ÷ (tokens/s × 3600) × 10⁶.
    (h200_gpt2 / "prices.yaml").write_text("H200: {price_per_hour_usd: 10.0, price_read: 2026-12-04}\n")
    out = bench_cli("report", "--store", "bench.db", "--out", "out", "--prices", "prices.yaml", cwd=h200_gpt2)
    assert out.returncode == 0, out.stderr
    md = (h200_gpt2 / "out" / "summary.md").read_text(encoding="utf-8")
    md = md.split("\n## Transformer language models")[1]  # its section (the headline above has 7 columns)
    header = next(x for x in md.splitlines() if x.startswith("| cell | tokens/s |"))
    assert "| MFU | peak memory per rank | W/GPU | J/sequence | $ per million tokens | cell_id |" in header
    row = next(x for x in md.splitlines() if x.endswith(f"| {GPT2_B64_DDP} |"))
    dollars = 10.0 / (479_588 * 3600) * 1e6  # the cell's latest run: the median window's 479,588 tokens/s
    assert f"| 41.4% | 36,406 MiB | 690 | 1.470 | ${dollars:,.4f} | {GPT2_B64_DDP} |" in row
