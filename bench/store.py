"""The results store: one SQLite file, the single source of truth for reports and checks.

WAL journal, one transaction per record, a schema-version table with forward migrations. (run_id, cell_id, job,
repeat) is the key, so writing the same record twice leaves one row. `pandas.read_sql("SELECT * FROM records", conn)` gives
one tidy row per record; the full record is kept as JSON beside the columns.
"""
from __future__ import annotations

import json
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any, Iterable

from bench.errors import BenchInputError
from bench.matrix import CELL_KEYS
from bench.record import Record

STORE_SCHEMA_VERSION = 3
DEFAULT_STORE = Path("results/bench.db")

_CELL_COLUMNS = {
    "gpu": "TEXT", "framework": "TEXT", "mpi": "TEXT", "ib": "INTEGER", "gpus": "INTEGER", "model": "TEXT",
    "engine": "TEXT", "data": "TEXT", "data_layout": "TEXT", "loader_workers": "INTEGER", "batch_per_gpu": "INTEGER",
    "image_size": "INTEGER", "precision": "TEXT",
    "warmup_steps": "INTEGER", "steps": "INTEGER", "repeats": "INTEGER", "jobs": "INTEGER",
    "channels_last": "INTEGER", "threads": "INTEGER",
}
assert tuple(_CELL_COLUMNS) == CELL_KEYS, "store columns must follow the cell keys"

_MEASURE_COLUMNS_V2 = {
    "nodes": "INTEGER", "images_per_sec": "REAL", "images_per_sec_per_gpu": "REAL", "samples": "INTEGER",
    "window_s": "REAL", "step_time_median_s": "REAL", "slowest_rank": "INTEGER",
    "slowest_rank_images_per_sec": "REAL", "world_size": "INTEGER", "start_unix": "REAL", "end_unix": "REAL",
    "requested_transport": "TEXT", "effective_transport": "TEXT", "workload_version": "TEXT",
    "rank_spread": "REAL", "input_wait_s": "REAL",
}
_V3_COLUMNS = {"transport_verdict": "TEXT", "transport_evidence": "TEXT"}
_MEASURE_COLUMNS = {**_MEASURE_COLUMNS_V2, **_V3_COLUMNS}

# Schema 1's columns, frozen: migration 2 copies from exactly these.
_V1_COLUMNS = ["run_id", "cell_id", "repeat", "status", "error", "gpu", "framework", "mpi", "ib", "gpus", "model",
               "data", "batch_per_gpu", "image_size", "precision", "warmup_steps", "steps", "repeats",
               "channels_last", "threads", "nodes", "images_per_sec", "images_per_sec_per_gpu", "samples",
               "window_s", "step_time_median_s", "slowest_rank", "slowest_rank_images_per_sec", "world_size",
               "start_unix", "end_unix", "requested_transport", "effective_transport", "workload_version",
               "record_json", "written_unix"]

MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        started_unix REAL NOT NULL,
        finished_unix REAL,
        matrix_name TEXT,
        matrix_path TEXT,
        backend TEXT,
        host TEXT,
        bench_version TEXT,
        plan_json TEXT
    );
    CREATE TABLE records (
        run_id TEXT NOT NULL, cell_id TEXT NOT NULL, repeat INTEGER NOT NULL, status TEXT NOT NULL, error TEXT,
        gpu TEXT, framework TEXT, mpi TEXT, ib INTEGER, gpus INTEGER, model TEXT, data TEXT, batch_per_gpu INTEGER,
        image_size INTEGER, precision TEXT, warmup_steps INTEGER, steps INTEGER, repeats INTEGER,
        channels_last INTEGER, threads INTEGER, nodes INTEGER, images_per_sec REAL, images_per_sec_per_gpu REAL,
        samples INTEGER, window_s REAL, step_time_median_s REAL, slowest_rank INTEGER,
        slowest_rank_images_per_sec REAL, world_size INTEGER, start_unix REAL, end_unix REAL,
        requested_transport TEXT, effective_transport TEXT, workload_version TEXT,
        record_json TEXT NOT NULL, written_unix REAL NOT NULL,
        PRIMARY KEY (run_id, cell_id, repeat)
    );
    CREATE INDEX records_cell ON records (cell_id, status);
    """,
    # 2: job-level repeats (`jobs` per cell, `job` in the key), engine, data layout and loader workers, rank
    # spread, input wait. Built from the column dicts as they are at schema 2: a later column needs its own
    # migration, and this text must then keep schema 2's list.
    2: f"""
    CREATE TABLE records_v2 (
        run_id TEXT NOT NULL,
        cell_id TEXT NOT NULL,
        job INTEGER NOT NULL DEFAULT 0,
        repeat INTEGER NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        {", ".join(f"{k} {t}" for k, t in {**_CELL_COLUMNS, **_MEASURE_COLUMNS_V2}.items())},
        record_json TEXT NOT NULL,
        written_unix REAL NOT NULL,
        PRIMARY KEY (run_id, cell_id, job, repeat)
    );
    INSERT INTO records_v2 ({", ".join(_V1_COLUMNS)}, job, jobs)
        SELECT {", ".join(_V1_COLUMNS)}, 0, 1 FROM records;
    DROP TABLE records;
    ALTER TABLE records_v2 RENAME TO records;
    CREATE INDEX records_cell ON records (cell_id, status);
    """,
    # 3: the transport verdict (requested vs effective) and the log line it rests on.
    3: ";\n".join(f"ALTER TABLE records ADD COLUMN {k} {t}" for k, t in _V3_COLUMNS.items()),
}


class Store:
    def __init__(self, path: str | Path = DEFAULT_STORE, *, create: bool = True):
        self.path = Path(path)
        if self.path.exists() and self.path.is_dir():
            raise BenchInputError("is a directory, expected a SQLite store", str(self.path))
        if not self.path.exists() and not create:
            raise BenchInputError("no results store here (run `bench run` first)", str(self.path))
        if self.path.exists():
            _check_sqlite_header(self.path)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self.conn.execute("PRAGMA busy_timeout = 30000")
        try:
            self.conn.execute("PRAGMA journal_mode = WAL")
            self._migrate()
        except sqlite3.DatabaseError as e:
            self.conn.close()
            raise BenchInputError(f"not a usable SQLite store: {e}", str(self.path)) from None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- schema -------------------------------------------------------------------------------------------------
    def _migrate(self) -> None:
        c = self.conn
        c.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = c.execute("SELECT MAX(version) FROM schema_version").fetchone()
        current = row[0] or 0
        if current > STORE_SCHEMA_VERSION:
            raise BenchInputError(f"store schema {current} is newer than this bench understands "
                                  f"({STORE_SCHEMA_VERSION}); upgrade bench", str(self.path))
        for version in range(current + 1, STORE_SCHEMA_VERSION + 1):
            c.execute("BEGIN IMMEDIATE")
            try:
                again = c.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0
                if again < version:  # another process may have migrated meanwhile
                    for statement in MIGRATIONS[version].split(";"):
                        if statement.strip():
                            c.execute(statement)
                    c.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise

    @property
    def schema_version(self) -> int:
        return self.conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]

    # --- writing ------------------------------------------------------------------------------------------------
    def begin_run(self, run_id: str, *, matrix_name: str, matrix_path: str, backend: str, host: str,
                  bench_version: str, plan: dict[str, Any]) -> None:
        self.conn.execute(
            "INSERT OR IGNORE INTO runs (run_id, started_unix, matrix_name, matrix_path, backend, host, bench_version,"
            " plan_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, time.time(), matrix_name, matrix_path, backend, host, bench_version, json.dumps(plan)))

    def finish_run(self, run_id: str) -> None:
        self.conn.execute("UPDATE runs SET finished_unix = ? WHERE run_id = ?", (time.time(), run_id))

    def write(self, record: Record) -> None:
        """One record, one transaction. Same (run, cell, job, repeat) again replaces the row: idempotent."""
        row = _row(record)
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        self.conn.execute(f"INSERT OR REPLACE INTO records ({cols}) VALUES ({marks})", tuple(row.values()))

    def write_many(self, records: Iterable[Record]) -> int:
        n = 0
        for record in records:
            self.write(record)
            n += 1
        return n

    # --- reading ------------------------------------------------------------------------------------------------
    def completed_cells(self) -> set[str]:
        """Cells with a run that measured every repeat of every job and failed none: what resume skips."""
        rows = self.conn.execute(
            "SELECT cell_id FROM records GROUP BY run_id, cell_id "
            "HAVING SUM(status = 'ok') >= MAX(repeats * jobs) AND SUM(status != 'ok') = 0").fetchall()
        return {r[0] for r in rows}

    def records(self, where: str = "", params: tuple = ()) -> list[dict[str, Any]]:
        cur = self.conn.execute(f"SELECT * FROM records {where}", params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    def runs(self) -> list[dict[str, Any]]:
        cur = self.conn.execute("SELECT * FROM runs ORDER BY started_unix")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    def dataframe(self):
        import pandas as pd

        df = pd.read_sql("SELECT * FROM records", self.conn)
        for col in ("ib", "channels_last"):
            df[col] = df[col].astype("boolean")
        return df


def _row(record: Record) -> dict[str, Any]:
    cell = record.cell
    slowest = next((r for r in record.per_rank if r.rank == record.slowest_rank), None)
    rates = [r.images_per_sec for r in record.per_rank if r.images_per_sec]
    row: dict[str, Any] = {"run_id": record.run_id, "cell_id": record.cell_id, "job": record.job,
                           "repeat": record.repeat,
                           "status": record.status, "error": record.error}
    for key in CELL_KEYS:
        value = cell.get(key)
        row[key] = int(value) if isinstance(value, bool) else value
    row.update({
        "nodes": record.nodes, "images_per_sec": record.images_per_sec,
        "images_per_sec_per_gpu": record.images_per_sec_per_gpu, "samples": record.samples,
        "window_s": record.window_s,
        "step_time_median_s": record.step_time_s.median if record.step_time_s else None,
        "slowest_rank": record.slowest_rank,
        "slowest_rank_images_per_sec": slowest.images_per_sec if slowest else None,
        "world_size": record.world_size, "start_unix": record.start_unix, "end_unix": record.end_unix,
        "requested_transport": record.requested_transport, "effective_transport": record.effective_transport,
        "transport_verdict": record.transport_verdict, "transport_evidence": record.transport_evidence,
        "workload_version": record.workload_version,
        "rank_spread": (max(rates) - min(rates)) / max(rates) if rates else None,
        "input_wait_s": record.input_wait_s,
        "record_json": record.to_json(), "written_unix": time.time(),
    })
    return row


def _check_sqlite_header(path: Path) -> None:
    try:
        with closing(open(path, "rb")) as f:
            head = f.read(16)
    except OSError as e:
        raise BenchInputError(f"cannot read the store: {e.strerror}", str(path)) from None
    if head and head != b"SQLite format 3\x00":
        raise BenchInputError("not a SQLite database", str(path))
