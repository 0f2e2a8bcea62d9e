"""bench import: the reference adapters on the real files, provenance, idempotence, bad files, CSV round trip."""
import csv
import hashlib
import json
import sqlite3

import pandas as pd
import pytest
from conftest import bench_cli
from factories import record

from bench.facts.reference import REFERENCE_DIR
from bench.imports.importer import imported_cell_id, is_imported, provenance, read_import
from bench.store import Store

TF = REFERENCE_DIR / "batchai_tf_cnn_benchmarks_synthetic_from_svg.csv"
PT = REFERENCE_DIR / "batchai_pytorch_synthetic_from_svg.csv"


def _csv_rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _dump(db):
    conn = sqlite3.connect(db)
    try:
        cur = conn.execute("SELECT * FROM records ORDER BY run_id, cell_id, job, repeat")
        names = [d[0] for d in cur.description]
        recs = [{k: v for k, v in zip(names, r) if k != "written_unix"} for r in cur.fetchall()]
        runs = conn.execute("SELECT run_id, matrix_name, backend, plan_json FROM runs ORDER BY run_id").fetchall()
        return recs, runs
    finally:
        conn.close()


@pytest.mark.parametrize("path, source, framework",
                         [(TF, "batchai-tf", "tensorflow"), (PT, "batchai-pytorch", "pytorch")])
def test_reference_adapter_row_counts_values_and_provenance(tmp_path, path, source, framework):
    rows = _csv_rows(path)
    final = [r for r in rows if r["status"].startswith("final")]
    db = tmp_path / "s.db"
    out = bench_cli("import", str(path), "--store", str(db), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    with Store(db, create=False) as store:
        recs = store.records()
        runs = store.runs()
    assert len(recs) == len(final) and len(final) < len(rows)
    assert {r["run_id"] for r in recs} == {f"import:{source}:{sha[:12]}"}
    assert all(is_imported(r["run_id"]) and r["status"] == "ok" and r["framework"] == framework for r in recs)
    assert len(runs) == 1 and runs[0]["backend"] == "import"
    plan = json.loads(runs[0]["plan_json"])["import"]
    assert plan["sha256"] == sha and plan["left_out"] == {"superseded chart version": len(rows) - len(final)}
    # Every final bar is there with its value, cell and provenance (checked against the CSV itself).
    by_line = {provenance(r["record_json"])["line"]: r for r in recs}
    reader_lines = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        for row in reader:
            reader_lines[reader.line_num] = row
    for line, row in reader_lines.items():
        if not row["status"].startswith("final"):
            assert line not in by_line
            continue
        rec = by_line[line]
        assert rec["samples_per_sec"] == pytest.approx(float(row["images_per_sec_total"]))
        assert rec["gpus"] == int(row["total_gpus"]) and rec["nodes"] == int(row["nodes"])
        assert rec["gpu"] == row["gpu_type"] and rec["model"] == row["model_arg"]
        assert rec["batch_per_gpu"] == int(row["batch_size_per_gpu"]) and rec["precision"] == "fp32"
        assert rec["data"] == "synthetic"
        expect_mpi = {"IntelMPI": "intelmpi", "OpenMPI+NCCL": "openmpi", "none (local)": "none"}[row["mpi"]]
        assert rec["mpi"] == expect_mpi and rec["ib"] == int(row["mpi"] == "IntelMPI")
        prov = provenance(rec["record_json"])
        assert (prov["repository"], prov["path"], prov["blob"], prov["commit"]) == \
            (row["source_repo"], row["source_path"], row["svg_blob"], row["first_commit"])
        assert prov["file_sha256"] == sha
        doc = json.loads(rec["record_json"])
        assert doc["published"] == row and rec["cell_id"] == imported_cell_id(source, doc["cell"])


def test_known_values_from_the_charts(tmp_path):
    db = tmp_path / "s.db"
    assert bench_cli("import", str(TF), "--store", str(db), cwd=tmp_path).returncode == 0
    with Store(db, create=False) as store:
        df = store.dataframe()
    r50 = df[df.model == "resnet50"]

    def pick(gpu, mpi, n):
        return r50[(r50.gpu == gpu) & (r50.mpi == mpi) & (r50.gpus == n)].samples_per_sec.item()

    assert pick("V100", "intelmpi", 32) == pytest.approx(6514.13)
    assert pick("V100", "openmpi", 32) == pytest.approx(4268.86)
    assert pick("K80", "none", 1) == pytest.approx(53.01)
    assert bool(r50[(r50.mpi == "intelmpi")].ib.all()) and not bool(r50[(r50.mpi == "openmpi")].ib.any())


@pytest.mark.slow
def test_import_is_idempotent_and_source_is_kept_apart(tmp_path):
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.begin_run("r1", matrix_name="m", matrix_path="m.yaml", backend="local", host="h", bench_version="0",
                        plan={})
        from bench.records.schema import parse_record
        store.write(parse_record(record()))
        measured = store.completed_cells()
    for _ in range(2):
        out = bench_cli("import", str(TF), "--store", str(db), cwd=tmp_path)
        assert out.returncode == 0, out.stderr
    first = _dump(db)
    assert bench_cli("import", str(TF), "--store", str(db), cwd=tmp_path).returncode == 0
    again = _dump(db)
    assert first == again and len(first[0]) == 345 + 1
    with Store(db, create=False) as store:
        df = store.dataframe()
    assert (df.run_id == "r1").sum() == 1 and (~df.run_id.map(is_imported)).sum() == 1
    # Imported cells have their own ids: no measured cell's id is taken.
    assert not measured & set(df[df.run_id.map(is_imported)].cell_id)


@pytest.mark.parametrize("content", [
    b"",
    b"\x00\x01\x02binary\xff\xfe",
    b"a,b,c\n1,2,3\n",
    b"BROKEN_HEADER\n",
])
def test_corrupt_or_unknown_file_exits_2_and_leaves_the_store_unchanged(tmp_path, content):
    db = tmp_path / "s.db"
    assert bench_cli("import", str(PT), "--store", str(db), cwd=tmp_path).returncode == 0
    before = _dump(db)
    bad = tmp_path / "bad.csv"
    bad.write_bytes(content)
    out = bench_cli("import", str(bad), "--store", str(db), cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "bad.csv" in out.stderr
    assert _dump(db) == before
    fresh = tmp_path / "fresh.db"
    assert bench_cli("import", str(bad), "--store", str(fresh), cwd=tmp_path).returncode == 2
    assert not fresh.exists()


def test_a_bad_row_late_in_a_reference_file_writes_nothing(tmp_path):
    text = TF.read_text(encoding="utf-8").splitlines()
    last = text[-1].split(",")
    header = text[0].split(",")
    last[header.index("images_per_sec_total")] = "NaN"
    (tmp_path / "late.csv").write_text("\n".join(text[:-1] + [",".join(last)]) + "\n", encoding="utf-8")
    db = tmp_path / "s.db"
    out = bench_cli("import", "late.csv", "--store", str(db), cwd=tmp_path)
    assert out.returncode == 2 and f"late.csv:{len(text)}" in out.stderr
    assert not db.exists()
    # A row with an extra field is caught too, naming its line.
    (tmp_path / "extra.csv").write_text("\n".join(text[:5] + [text[5] + ",x"]) + "\n", encoding="utf-8")
    out = bench_cli("import", "extra.csv", "--store", str(db), cwd=tmp_path)
    assert out.returncode == 2 and "extra.csv:6" in out.stderr


@pytest.mark.slow
def test_csv_round_trip_with_export(tmp_path):
    from bench.records.schema import parse_record

    a = tmp_path / "a.db"
    with Store(a) as store:
        for i in range(3):
            store.write(parse_record(record(run_id="r1", repeat=i, rate_scale=1 + i / 10)))
        store.write(parse_record(record(run_id="r2", repeat=0, gpus=2)))
    assert bench_cli("import", str(PT), "--store", str(a), cwd=tmp_path).returncode == 0
    assert bench_cli("export", "--store", str(a), "--format", "csv", "-o", "a.csv", cwd=tmp_path).returncode == 0
    out = bench_cli("import", "a.csv", "--store", "b.db", "--source", "ci", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert bench_cli("export", "--store", "b.db", "--format", "csv", "-o", "b.csv", cwd=tmp_path).returncode == 0
    ea, eb = pd.read_csv(tmp_path / "a.csv"), pd.read_csv(tmp_path / "b.csv")
    assert list(ea.columns) == list(eb.columns) and len(ea) == len(eb) == 25
    mapped = ea.run_id.map(lambda r: r if is_imported(r) else f"import:ci:{r}")
    key = ["run_id", "cell_id", "job", "repeat"]
    ea = ea.assign(run_id=mapped).sort_values(key).reset_index(drop=True)
    eb = eb.sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(ea, eb)
    # Importing the export of an import changes nothing more, and twice is the same as once.
    assert bench_cli("import", "b.csv", "--store", "b.db", "--source", "ci", cwd=tmp_path).returncode == 0
    assert bench_cli("export", "--store", "b.db", "--format", "csv", "-o", "b2.csv", cwd=tmp_path).returncode == 0
    pd.testing.assert_frame_equal(eb, pd.read_csv(tmp_path / "b2.csv").sort_values(key).reset_index(drop=True))


@pytest.mark.slow
def test_a_tampered_export_is_refused(tmp_path):
    from bench.records.schema import parse_record

    a = tmp_path / "a.db"
    with Store(a) as store:
        store.write(parse_record(record(run_id="r1")))
    assert bench_cli("export", "--store", str(a), "-o", "a.csv", cwd=tmp_path).returncode == 0
    df = pd.read_csv(tmp_path / "a.csv")
    df.loc[0, "repeat"] = 7  # disagrees with its record_json
    df.to_csv(tmp_path / "t.csv", index=False)
    out = bench_cli("import", "t.csv", "--store", "b.db", cwd=tmp_path)
    assert out.returncode == 2 and "t.csv:2" in out.stderr and "repeat" in out.stderr
    assert not (tmp_path / "b.db").exists()


def test_read_import_rejects_a_bad_source_name(tmp_path):
    from bench.core.errors import BenchInputError

    with pytest.raises(BenchInputError, match="--source"):
        read_import(TF, "no spaces please")
