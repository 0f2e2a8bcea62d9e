"""Report speed: `bench report` over a store of 100,000 records (5,000 cells × 2 jobs × 10 windows) must take
≤ 10 s (issue 5).

Run: .venv/bin/python -m pytest benchmarks/test_report_speed.py --benchmark-only --benchmark-columns=min,median,max
The store is built through the store API (Store.write_many) from records the factory builds and validates, one per
cell; the other windows of a cell are copies with their own window time (so every cell has a spread).
"""
import itertools
import random

import pytest

from bench.records.schema import parse_record
from bench.report.render import report_from_store
from bench.store import Store
from tests.factories import record

GPUS = ["V100", "A100", "H100", "T4", "V100-ND40", "H200", "A100-PCIe", "P100", "K80", "P40", "cpu"]
JOBS, WINDOWS = 2, 10


def cells(n: int):
    grid = itertools.product([64, 128, 256], ["fp32", "fp16", "bf16"], [True, False],
                             ["openmpi", "intelmpi", "mpich", "gloo"], ["pytorch", "tensorflow", "keras"], GPUS,
                             [1, 2, 4, 8, 16, 32])
    for batch, precision, ib, mpi, framework, gpu, gpus in itertools.islice(grid, n):
        yield dict(gpu=gpu, framework=framework, mpi=mpi, ib=ib, precision=precision, batch_per_gpu=batch,
                   gpus=gpus, repeats=WINDOWS, jobs=JOBS)


def build_store(path, n_cells: int = 5000) -> int:
    rnd = random.Random(0)
    written = 0
    with Store(path) as store:
        batch = []
        for c in cells(n_cells):
            first = parse_record(record(run_id="speed", **c))
            for job in range(JOBS):
                for repeat in range(WINDOWS):
                    window = first.window_s * (1 + 0.05 * rnd.random())
                    batch.append(first.model_copy(update={
                        "job": job, "repeat": repeat, "window_s": window,
                        "samples_per_sec": first.samples / window,
                        "samples_per_sec_per_gpu": first.samples / window / c["gpus"]}))
            if len(batch) >= 5000:
                written += store.write_many(batch)
                batch = []
        written += store.write_many(batch)
    return written


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("report-speed") / "bench.db"
    assert build_store(path) == 100_000
    return path


def test_report_100k_records(benchmark, big_store, tmp_path):
    out = tmp_path / "reports"
    paths = benchmark.pedantic(report_from_store, args=(str(big_store), out), rounds=3, iterations=1)
    html = (out / "index.html").read_text()
    assert "5000 measured cells" in html and "Showing 200 of" in html
    assert any(p.name == "cells.csv" for p in paths)
    assert benchmark.stats.stats.median <= 10.0, f"report took {benchmark.stats.stats.median:.1f} s (limit 10 s)"
