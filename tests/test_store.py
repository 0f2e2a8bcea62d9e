"""The SQLite store: schema version, WAL, idempotent writes, tidy rows for pandas, refusing what it can't read."""
import sqlite3

import pandas as pd
import pytest

from bench.errors import BenchInputError
from bench.record import parse_record
from bench.store import STORE_SCHEMA_VERSION, Store
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
    assert row.images_per_sec == pytest.approx(recs[0].images_per_sec)
    assert parse_record(row.record_json).images_per_sec == row.images_per_sec


def test_completed_cells_need_every_repeat_ok_in_one_run(tmp_path):
    with Store(tmp_path / "b.db") as store:
        ok_cell = [parse_record(record(run_id="a", repeat=i, repeats=2)) for i in range(2)]
        partial = [parse_record(record(run_id="a", repeat=0, repeats=2, gpus=2))]
        failed = parse_record({**record(run_id="a", repeat=1, repeats=2, gpus=2), "status": "failed",
                               "error": "exit code 1"})
        store.write_many([*ok_cell, *partial, failed])
        assert store.completed_cells() == {ok_cell[0].cell_id}


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
        assert rows[0]["images_per_sec"] == 12.5
        assert store.completed_cells() == {"c"}
