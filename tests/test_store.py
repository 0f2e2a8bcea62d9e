"""The SQLite store: schema version, WAL, idempotent writes, tidy rows for pandas, refusing what it can't read."""
import sqlite3
from contextlib import closing

import pandas as pd
import pytest

from bench.core.errors import BenchInputError
from bench.records.schema import parse_record
from bench.store import STORE_SCHEMA_VERSION, Store, StoreError
from tests.factories import record


def test_writes_are_idempotent_and_read_back_one_row_per_record(tmp_path):
    path = tmp_path / "b.db"
    with Store(path) as store:
        recs = [parse_record(record(repeat=i, gpus=2)) for i in range(3)]
        store.write_many(recs)
        store.write_many(recs)  # the same (run, cell, repeat) again
        assert store.schema_version == STORE_SCHEMA_VERSION
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn = sqlite3.connect(path)
    df = pd.read_sql("SELECT * FROM records", conn)
    assert len(df) == 3
    assert sorted(df["repeat"]) == [0, 1, 2]
    row = df.iloc[0]
    assert row.gpus == 2 and row.gpu == "cpu" and row.status == "ok"
    assert row.samples_per_sec == pytest.approx(recs[0].samples_per_sec)
    assert parse_record(row.record_json).samples_per_sec == row.samples_per_sec


def test_completed_cells_need_every_repeat_ok_in_one_run(tmp_path):
    with Store(tmp_path / "b.db") as store:
        ok_cell = [parse_record(record(run_id="a", repeat=i, repeats=2)) for i in range(2)]
        partial = [parse_record(record(run_id="a", repeat=0, repeats=2, gpus=2))]
        failed = parse_record({**record(run_id="a", repeat=1, repeats=2, gpus=2), "status": "failed",
                               "error": "exit code 1"})
        store.write_many([*ok_cell, *partial, failed])
        assert store.completed_cells() == {ok_cell[0].cell_id}


def test_failed_cells_are_those_whose_newest_attempt_failed_or_timed_out(tmp_path):
    def attempt(run_id, status, **cell):
        rec = record(run_id=run_id, repeat=0, repeats=1, **cell)
        return parse_record(rec if status == "ok" else {**rec, "status": status, "error": status})

    with Store(tmp_path / "b.db") as store:
        store.write_many([attempt("a", "failed", steps=2),      # failed, then measured: not failed
                          attempt("a", "failed", steps=3),      # failed, then interrupted: tried again
                          attempt("a", "ok", steps=4),          # measured, then a --rerun failed: measured
                          attempt("a", "failed", steps=5)])     # failed, nothing since
        store.write_many([attempt("b", "ok", steps=2), attempt("b", "interrupted", steps=3),
                          attempt("b", "timeout", steps=4), attempt("b", "timeout", steps=6),
                          attempt("import:x:1", "failed", steps=7)])  # an imported failure is no attempt here
        ids = {steps: attempt("z", "ok", steps=steps).cell_id for steps in (2, 3, 4, 5, 6, 7)}
        assert store.failed_cells() == {ids[5]: "a", ids[6]: "b"}


def test_newer_schema_and_non_sqlite_files_are_refused_untouched(tmp_path):
    path = tmp_path / "b.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_version VALUES (99)")
    conn.commit()
    conn.close()
    with pytest.raises(BenchInputError, match="newer than this bench"):
        Store(path)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database at all, just text" * 10)
    before = junk.read_bytes()
    with pytest.raises(BenchInputError, match="not a SQLite database"):
        Store(junk)
    assert junk.read_bytes() == before
    with pytest.raises(BenchInputError, match="no results store"):
        Store(tmp_path / "missing.db", create=False)


def test_a_schema_1_store_is_migrated_with_its_rows(tmp_path):
    from bench.store import MIGRATIONS

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.executescript(MIGRATIONS[1])
    conn.execute("INSERT INTO schema_version VALUES (1)")
    conn.execute("INSERT INTO records (run_id, cell_id, repeat, status, gpu, gpus, repeats, images_per_sec, "
                 "record_json, written_unix) VALUES ('r', 'c', 0, 'ok', 'cpu', 1, 1, 12.5, '{}', 0)")
    conn.commit()
    conn.close()
    with Store(path) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION
        rows = store.records()
        assert len(rows) == 1 and rows[0]["job"] == 0 and rows[0]["jobs"] == 1
        assert rows[0]["samples_per_sec"] == 12.5
        assert store.completed_cells() == {"c"}


# --- the named queries the benchmarks ask instead of writing SQL ----------------------------------------------------

def _sweep(cell_id: str, mpi: str, sizes: list[int], repeat: int = 0):
    def row(size: int) -> dict:
        t = 1e-4 + size / 1e9
        return {"op": "allreduce", "bytes": size, "iterations": 3, "time_median_s": t, "time_p10_s": t,
                "time_p90_s": t, "time_min_s": t, "time_max_s": t, "algbw_bytes_per_s": size / t,
                "busbw_bytes_per_s": size / t}  # 2 ranks: busbw = algbw x 2(n-1)/n = algbw
    return parse_record({"run_id": "r", "cell_id": cell_id, "repeat": repeat, "status": "ok", "world_size": 2,
                         "cell": {"model": "allreduce", "mpi": mpi, "gpus": 2}, "collective": [row(s) for s in sizes]})


def _raw(path, sql: str) -> list[dict]:
    with closing(sqlite3.connect(path)) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(sql)]


def test_collective_rows_are_the_sweep_table_by_mpi_and_size(tmp_path):
    """benchmarks/collectives_shaped.py prints these rows as it printed `SELECT * FROM collectives ORDER BY mpi,
    bytes`: the same dicts in the same order."""
    path = tmp_path / "b.db"
    with Store(path) as store:
        store.write_many([_sweep("c2", "openmpi", [4096, 1024]), _sweep("c1", "gloo", [65536, 1024, 4096]),
                          _sweep("c1", "gloo", [1024, 4096, 65536], repeat=1)])
        rows = store.collective_rows()
    assert rows == _raw(path, "SELECT * FROM collectives ORDER BY mpi, bytes")
    assert [(r["mpi"], r["bytes"]) for r in rows] == [("gloo", 1024), ("gloo", 1024), ("gloo", 4096), ("gloo", 4096),
                                                      ("gloo", 65536), ("gloo", 65536), ("openmpi", 1024),
                                                      ("openmpi", 4096)]


def test_ok_samples_per_sec_are_a_one_cell_store_s_rates_by_repeat(tmp_path):
    """benchmarks/shaped_link.py's figures: what `SELECT samples_per_sec FROM records WHERE status = 'ok' ORDER BY
    repeat` gave, failed repeats left out."""
    path = tmp_path / "b.db"
    with Store(path) as store:
        store.write_many([parse_record(record(repeat=2, repeats=3, rate_scale=3.0)),
                          parse_record(record(repeat=0, repeats=3, rate_scale=1.0)),
                          parse_record({**record(repeat=1, repeats=3), "status": "failed", "error": "exit code 1"})])
        rates = store.ok_samples_per_sec()
    assert rates == [r["samples_per_sec"] for r in _raw(path, "SELECT samples_per_sec FROM records WHERE status = 'ok' "
                                                               "ORDER BY repeat")]
    assert len(rates) == 2 and rates[1] == pytest.approx(3 * rates[0])


# --- every storage failure is a StoreError ------------------------------------------------------------------------

def test_a_refused_write_and_an_unreadable_store_leave_as_store_error(tmp_path):
    path = tmp_path / "b.db"
    with Store(path) as store:
        store.write(parse_record(record()))
        store.conn.execute("PRAGMA query_only = ON")  # as a read-only file would (root ignores file modes)
        with pytest.raises(StoreError) as refused:
            store.write(parse_record(record(repeat=1)))
        with pytest.raises(StoreError):
            store.claim("c", "r")
    assert not isinstance(refused.value, sqlite3.Error)
    assert str(refused.value) == f"{path}: the store refused a write: attempt to write a readonly database"
    assert refused.value.reason == "attempt to write a readonly database"  # what `bench run` quotes mid-run
    _corrupt_past_the_schema(path)
    with Store(path, create=False) as store:  # opens: the schema pages are intact
        for read in (store.records, store.dataframe, store.completed_cells):
            with pytest.raises(StoreError, match=r"b\.db: not a usable SQLite store: "):
                read()


def _corrupt_past_the_schema(path) -> None:
    """Garbage over every page after the first few (the schema and the small tables' roots): the store opens and
    its runs read, its records do not."""
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    assert len(data) > 8 * page, "too few records to corrupt past the schema"
    data[6 * page:] = b"\xab" * (len(data) - 6 * page)
    path.write_bytes(bytes(data))


def _store_of(path, kind: str) -> None:
    with Store(path) as store:
        store.begin_run("r", matrix_name="m", matrix_path="m.yaml", backend="local", host="h", bench_version="0",
                        plan={})
        store.write_many([parse_record(record(run_id="r", repeat=i, repeats=200)) for i in range(200)])
    if kind == "not sqlite":
        path.write_bytes(b"id,samples_per_sec\n1,200\n" * 40)
    elif kind == "not a database":
        path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    elif kind == "truncated":
        path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 3])
    elif kind == "corrupt records":
        _corrupt_past_the_schema(path)


@pytest.mark.parametrize("verb", ["report", "status"])
@pytest.mark.parametrize("kind", ["not sqlite", "not a database", "truncated", "corrupt records"])
def test_a_bad_store_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, monkeypatch, verb, kind):
    from bench.cli import main

    monkeypatch.chdir(tmp_path)
    store = tmp_path / "results" / "bad.db"
    store.parent.mkdir()
    _store_of(store, kind)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main([verb, "--store", str(store)]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith(f"bench: error: {store}: "), err
    assert out == ""
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # no report, store untouched
    assert not (tmp_path / "reports").exists()


def test_every_flag_reads_back_as_a_bool_not_0_or_1():
    """SQLite keeps a flag as 0/1; the frame gives back a bool for every key bench/cells/keys.py names a flag (the
    transformer's activation_checkpointing and tp_across_nodes read 0/1 before)."""
    from bench.cells.keys import BOOL_KEYS
    from tests.conftest import ROOT

    assert {"ib", "channels_last", "cuda_graphs", "activation_checkpointing", "tp_across_nodes"} <= BOOL_KEYS
    with Store(str(ROOT / "tests" / "data" / "layouts-run.db"), read_only=True) as db:
        df = db.dataframe(record_json=False)
    assert BOOL_KEYS <= set(df.columns)
    for key in BOOL_KEYS:
        assert str(df[key].dtype) == "boolean", (key, df[key].dtype)
    assert set(df["tp_across_nodes"].dropna()) == {False} and set(df["activation_checkpointing"].dropna()) == {False}
