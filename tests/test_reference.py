"""bench/facts/reference.py: the one home of the published 2018 Batch AI study — its files, the one table of what each
published run was, and the one reader every user (import, the model's validation, the report) derives from."""
import ast
import csv
import json
import sys

import pytest

from bench.core.errors import BenchInputError
from bench.facts import reference
from bench.imports.importer import read_import
from tests.conftest import ROOT


def _csv_rows(name):
    with open(reference.REFERENCE_DIR / name, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_it_is_a_low_level_module():
    """Only the standard library, pandas, bench.core.errors and bench.facts.catalog: no analysis, report, store or
    command."""
    tree = ast.parse((ROOT / "bench" / "facts" / "reference.py").read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    bench = {m for m in names if m == "bench" or m.startswith("bench.")}
    assert bench <= {"bench.core.errors", "bench.facts.catalog"}, bench
    assert {m.split(".")[0] for m in names - bench} <= set(sys.stdlib_module_names) | {"pandas"}, names


def test_every_published_run_is_in_the_one_table():
    for name in reference.REFERENCE_FILES:
        rows = _csv_rows(name)
        assert list(rows[0]) == reference.HEADER
        assert {r["mpi"] for r in rows} <= set(reference.RUNS)
    # the meaning, as the reference README states it (`mpi`, `interconnect`)
    intel, openmpi, local = (reference.RUNS[k] for k in ("IntelMPI", "OpenMPI+NCCL", "none (local)"))
    assert (intel.fabric, intel.route, intel.mpi) == ("ib", "host", "intelmpi")
    assert (openmpi.fabric, openmpi.route, openmpi.mpi) == ("tcp", "nccl-ring", "openmpi")
    assert (local.fabric, local.route, local.mpi, local.engine) == (None, None, "none", "none")
    assert set(reference.MPI_RUNS) == {"IntelMPI", "OpenMPI+NCCL"}


def test_the_validation_rows_are_the_file_with_each_runs_fabric_and_route():
    rows = reference.validation_rows()
    published = _csv_rows(reference.VALIDATION_FILE)
    assert [{k: v for k, v in r.items() if k not in ("fabric", "route")} for r in rows] == published
    for r in rows:
        run = reference.RUNS[r["mpi"]]
        assert (r["fabric"], r["route"]) == (run.fabric, run.route)


def test_the_published_series_and_the_imported_cells_derive_from_the_table():
    pub = reference.published_series()
    shown = {run.shown: run for run in reference.MPI_RUNS.values()}
    assert set(pub["mpi"]) == set(shown)
    for r in pub.itertuples():
        run = shown[r.mpi]
        assert (r.fabric, r.route) == (run.fabric, run.route)
        assert r.series == reference.series_name(r.framework, run)
    batch = read_import(reference.REFERENCE_DIR / reference.VALIDATION_FILE)
    lines = {i + 2: row for i, row in enumerate(_csv_rows(reference.VALIDATION_FILE))}  # line 1 is the header
    for rec in batch.records:
        run = reference.RUNS[lines[json.loads(rec["record_json"])["provenance"]["line"]]["mpi"]]
        assert (rec["mpi"], rec["ib"], rec["engine"], rec["requested_transport"]) == \
            (run.mpi, int(run.ib), run.engine, run.fabric)


@pytest.mark.parametrize("content,message", [
    (None, "cannot read the reference"),
    ("a,b\n1,2\n", "not the Batch AI chart layout"),
    (",".join(reference.HEADER) + "\n" + ",".join("x" * len(reference.HEADER)) + "\n", "mpi 'x' is not one of"),
])
def test_a_bad_reference_file_is_one_line(tmp_path, monkeypatch, content, message):
    if content is not None:
        (tmp_path / reference.VALIDATION_FILE).write_text(content, encoding="utf-8")
    monkeypatch.setattr(reference, "REFERENCE_DIR", tmp_path)
    with pytest.raises(BenchInputError, match=message) as e:
        reference.validation_rows()
    assert "\n" not in str(e.value) and str(tmp_path) in str(e.value)
