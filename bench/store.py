"""The results store: one SQLite file, the single source of truth for reports and checks.

WAL journal, one transaction per record, a schema-version table with forward migrations. (run_id, cell_id, job,
repeat) is the key, so writing the same record twice leaves one row. `pandas.read_sql("SELECT * FROM records", conn)` gives
one tidy row per record; the full record is kept as JSON beside the columns.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from bench.errors import BenchInputError
from bench.cell_keys import CELL_KEYS
from bench.completeness import IMPORT_RUN_PREFIX, complete_runs
from bench.record import Record

STORE_SCHEMA_VERSION = 8
DEFAULT_STORE = Path("results/bench.db")

# Each migration's SQL is a literal, written once and never edited: a store made by any earlier bench replays
# exactly what that bench ran. A new column (a new cell key, say) is a new migration that ALTERs the table;
# tests/test_store_migrations.py holds each text's hash, so editing an old one fails a test.
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
    # spread, input wait. SQLite cannot add a column to a primary key, so the table is rebuilt and schema 1's
    # rows copied over.
    2: """
    CREATE TABLE records_v2 (
        run_id TEXT NOT NULL,
        cell_id TEXT NOT NULL,
        job INTEGER NOT NULL DEFAULT 0,
        repeat INTEGER NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        gpu TEXT, framework TEXT, mpi TEXT, ib INTEGER, gpus INTEGER, model TEXT, engine TEXT, data TEXT,
        data_layout TEXT, loader_workers INTEGER, batch_per_gpu INTEGER, image_size INTEGER, precision TEXT,
        warmup_steps INTEGER, steps INTEGER, repeats INTEGER, jobs INTEGER, channels_last INTEGER, threads INTEGER,
        nodes INTEGER, images_per_sec REAL, images_per_sec_per_gpu REAL, samples INTEGER, window_s REAL,
        step_time_median_s REAL, slowest_rank INTEGER, slowest_rank_images_per_sec REAL, world_size INTEGER,
        start_unix REAL, end_unix REAL, requested_transport TEXT, effective_transport TEXT, workload_version TEXT,
        rank_spread REAL, input_wait_s REAL,
        record_json TEXT NOT NULL,
        written_unix REAL NOT NULL,
        PRIMARY KEY (run_id, cell_id, job, repeat)
    );
    INSERT INTO records_v2 (
        run_id, cell_id, repeat, status, error, gpu, framework, mpi, ib, gpus, model, data, batch_per_gpu,
        image_size, precision, warmup_steps, steps, repeats, channels_last, threads, nodes, images_per_sec,
        images_per_sec_per_gpu, samples, window_s, step_time_median_s, slowest_rank, slowest_rank_images_per_sec,
        world_size, start_unix, end_unix, requested_transport, effective_transport, workload_version, record_json,
        written_unix, job, jobs)
    SELECT
        run_id, cell_id, repeat, status, error, gpu, framework, mpi, ib, gpus, model, data, batch_per_gpu,
        image_size, precision, warmup_steps, steps, repeats, channels_last, threads, nodes, images_per_sec,
        images_per_sec_per_gpu, samples, window_s, step_time_median_s, slowest_rank, slowest_rank_images_per_sec,
        world_size, start_unix, end_unix, requested_transport, effective_transport, workload_version, record_json,
        written_unix, 0, 1
    FROM records;
    DROP TABLE records;
    ALTER TABLE records_v2 RENAME TO records;
    CREATE INDEX records_cell ON records (cell_id, status);
    """,
    # 3: the transport verdict (requested vs effective) and the log line it rests on.
    3: """
    ALTER TABLE records ADD COLUMN transport_verdict TEXT;
    ALTER TABLE records ADD COLUMN transport_evidence TEXT;
    """,
    # 4: claims, so two runs on one store never measure a cell at the same time. A claim names its owner (run,
    # host, pid and the pid's start time, so a reused pid is not mistaken for it) and is kept alive by heartbeats;
    # a claim whose owner is gone (same host) or whose heartbeat is older than the lease may be taken over, and
    # the job token lets the new owner sweep the dead owner's processes.
    4: """
    CREATE TABLE claims (
        cell_id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        pid_started REAL,
        token TEXT,
        claimed_unix REAL NOT NULL,
        heartbeat_unix REAL NOT NULL
    )
    """,
    # 5: workers per node (a cell key; null = as many as the SKU's VM holds).
    5: """
    ALTER TABLE records ADD COLUMN workers_per_node INTEGER;
    """,
    # 6: collective cells (model: allreduce): the sweep's largest message (a cell key), and one row per message
    # size per repeat, beside the record that carries the same rows in its JSON. The stack's keys are copied in so
    # fitting latency and bandwidth per stack reads this table alone.
    6: """
    ALTER TABLE records ADD COLUMN max_message_bytes INTEGER;
    CREATE TABLE collectives (
        run_id TEXT NOT NULL, cell_id TEXT NOT NULL, job INTEGER NOT NULL, repeat INTEGER NOT NULL,
        op TEXT NOT NULL, bytes INTEGER NOT NULL, iterations INTEGER NOT NULL,
        time_median_s REAL NOT NULL, time_p10_s REAL, time_p90_s REAL, time_min_s REAL, time_max_s REAL,
        algbw_bytes_per_s REAL, busbw_bytes_per_s REAL,
        gpu TEXT, framework TEXT, mpi TEXT, ib INTEGER, engine TEXT, world_size INTEGER, nodes INTEGER,
        PRIMARY KEY (run_id, cell_id, job, repeat, op, bytes)
    );
    CREATE INDEX collectives_stack ON collectives (mpi, ib, engine, nodes)
    """,
    # 7: what a collective costs the CPU: the busiest rank's engine CPU seconds per iteration (the process's less the
    # waiting caller's), median (null for sweeps recorded before it was measured).
    7: """
    ALTER TABLE collectives ADD COLUMN cpu_time_median_s REAL;
    """,
    # 8: compute and collective on shared cores (CPU allreduce sweeps, at the largest size): the probe kernel's rate
    # while the engine idles and while the allreduce is in flight, as fractions of its rate alone, and the
    # allreduce's time under that load (null elsewhere and in older sweeps).
    8: """
    ALTER TABLE collectives ADD COLUMN idle_compute_ratio REAL;
    ALTER TABLE collectives ADD COLUMN contended_compute_ratio REAL;
    ALTER TABLE collectives ADD COLUMN contended_time_median_s REAL;
    """,
}

CLAIM_LEASE_S = 60.0  # a claim not heartbeaten for this long is abandoned (owner on another host, say)
WRITE_RETRY_S = 120.0  # beyond SQLite's own busy timeout: how long a write keeps trying on a locked store


@dataclass
class Claim:
    status: str  # claimed | busy (another live run has it) | done (complete in the store meanwhile)
    holder: str | None = None  # busy: the run holding it
    stale_token: str | None = None  # claimed over an abandoned claim: its job token, to sweep leftovers


def _process_started(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


MIN_FREE_BYTES = 16 << 20  # logs and records of a few cells; less is a full disk waiting to happen mid-run


def check_writable(store_path: str | Path) -> None:
    """Before any cell runs: the store's directory exists (or can be made), takes a real write, and has room. A
    read-only or full results directory is bad input (one line, exit 2), not a failure found after an hour."""
    d = Path(store_path).parent
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BenchInputError(f"cannot create the results directory: {e.strerror}", str(d)) from None
    probe = d / f".bench-write-probe-{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * (1 << 20))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise BenchInputError(f"the results directory is not writable: {e.strerror}", str(d)) from None
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:
            pass
    free = shutil.disk_usage(d).free
    if free < MIN_FREE_BYTES:
        raise BenchInputError(f"the results directory has {free / 2**20:.1f} MiB free, less than the "
                              f"{MIN_FREE_BYTES >> 20} MiB a run needs", str(d))


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
        try:
            self.conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except sqlite3.Error as e:
            raise BenchInputError(f"cannot open the store: {e}", str(self.path)) from None
        self.conn.execute("PRAGMA busy_timeout = 30000")
        try:
            self._refuse_newer()  # before anything is written: a store this bench cannot read stays untouched
            _retry(lambda: self.conn.execute("PRAGMA journal_mode = WAL"))
            _retry(self._migrate)
        except sqlite3.DatabaseError as e:
            self.conn.close()
            raise BenchInputError(f"not a usable SQLite store: {e}", str(self.path)) from None
        except BaseException:
            self.conn.close()
            raise

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- schema -------------------------------------------------------------------------------------------------
    def _refuse_newer(self) -> None:
        if self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone():
            current = self.conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0
            if current > STORE_SCHEMA_VERSION:
                raise BenchInputError(f"store schema {current} is newer than this bench understands "
                                      f"({STORE_SCHEMA_VERSION}); upgrade bench", str(self.path))

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
        self.write_many([record])

    def write_many(self, records: Iterable[Record]) -> int:
        """A job's records in one transaction: all of them or none (a controller killed mid-write never leaves
        half a job that could pass for a measured cell). Retried while another writer holds the store."""
        records = list(records)
        rows = [_row(r) for r in records]
        sizes = [row for r in records for row in _collective_rows(r)]
        if rows:
            _retry(lambda: self._insert(rows, sizes))
        return len(rows)

    def _insert(self, rows: list[dict[str, Any]], sizes: list[dict[str, Any]] = ()) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            for row in rows:
                c.execute(f"INSERT OR REPLACE INTO records ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                          tuple(row.values()))
                # A record written again replaces its sizes too (its sweep may differ).
                c.execute("DELETE FROM collectives WHERE run_id = ? AND cell_id = ? AND job = ? AND repeat = ?",
                          (row["run_id"], row["cell_id"], row["job"], row["repeat"]))
            for size in sizes:
                c.execute(f"INSERT OR REPLACE INTO collectives ({', '.join(size)}) "
                          f"VALUES ({', '.join('?' * len(size))})", tuple(size.values()))
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise

    # --- claims: one run measures a cell at a time -------------------------------------------------------------
    def claim(self, cell_id: str, run_id: str, *, skip_done: bool = True, lease_s: float = CLAIM_LEASE_S) -> Claim:
        return _retry(lambda: self._claim(cell_id, run_id, skip_done, lease_s))

    def _claim(self, cell_id: str, run_id: str, skip_done: bool, lease_s: float) -> Claim:
        c = self.conn
        now, host, pid = time.time(), socket.gethostname(), os.getpid()
        c.execute("BEGIN IMMEDIATE")
        try:
            if skip_done and cell_id in self.completed_cells(cell_id):
                c.execute("COMMIT")
                return Claim("done")
            row = c.execute("SELECT run_id, host, pid, pid_started, token, heartbeat_unix FROM claims "
                            "WHERE cell_id = ?", (cell_id,)).fetchone()
            stale = None
            if row is not None and row[0] != run_id:
                holder, holder_host, holder_pid, holder_started, token, beat = row
                gone = holder_host == host and _process_started(holder_pid) != holder_started
                if not gone and now - beat < lease_s:
                    c.execute("COMMIT")
                    return Claim("busy", holder=holder)
                stale = token
            c.execute("INSERT OR REPLACE INTO claims (cell_id, run_id, host, pid, pid_started, token, claimed_unix,"
                      " heartbeat_unix) VALUES (?, ?, ?, ?, ?, NULL, ?, ?)",
                      (cell_id, run_id, host, pid, _process_started(pid), now, now))
            c.execute("COMMIT")
            return Claim("claimed", stale_token=stale)
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise

    def heartbeat(self, cell_id: str, run_id: str, token: str | None = None) -> None:
        _retry(lambda: self.conn.execute(
            "UPDATE claims SET heartbeat_unix = ?, token = COALESCE(?, token) WHERE cell_id = ? AND run_id = ?",
            (time.time(), token, cell_id, run_id)))

    def release(self, cell_id: str, run_id: str) -> None:
        _retry(lambda: self.conn.execute("DELETE FROM claims WHERE cell_id = ? AND run_id = ?", (cell_id, run_id)))

    def claims(self) -> list[dict[str, Any]]:
        cur = self.conn.execute("SELECT * FROM claims")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    # --- reading ------------------------------------------------------------------------------------------------
    def completed_cells(self, cell_id: str | None = None) -> set[str]:
        """Cells some run completed (bench.completeness: every repeat of every job ok, none failed): what resume
        skips. Imported results never complete a cell."""
        where, params = (" WHERE cell_id = ?", (cell_id,)) if cell_id is not None else ("", ())
        rows = self.conn.execute(f"SELECT cell_id, run_id, status, repeats, jobs FROM records{where}",
                                 params).fetchall()
        return {cell for cell, _ in complete_runs(*zip(*rows))} if rows else set()

    def records(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Every record (column → value), or a run's."""
        cur = self.conn.execute("SELECT * FROM records" + (" WHERE run_id = ?" if run_id is not None else ""),
                                (run_id,) if run_id is not None else ())
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    def collectives(self):
        """One row per message size per repeat of every collective cell (a DataFrame; empty when none ran)."""
        import pandas as pd

        return pd.read_sql("SELECT * FROM collectives ORDER BY run_id, cell_id, job, repeat, op, bytes", self.conn)

    def runs(self) -> list[dict[str, Any]]:
        cur = self.conn.execute("SELECT * FROM runs ORDER BY started_unix")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    def runs_with_records(self) -> set[str]:
        """Ids of the runs that wrote at least one record (a run that stopped before its first cell wrote none)."""
        return {r[0] for r in self.conn.execute("SELECT DISTINCT run_id FROM records")}

    def dataframe(self, *, record_json: bool = True):
        """One row per record. record_json=False leaves the full JSON out: the columns hold what reports and
        checks read, and 100,000 JSON documents would be most of the time and memory."""
        import pandas as pd

        cols = [r[1] for r in self.conn.execute("PRAGMA table_info(records)") if record_json or r[1] != "record_json"]
        df = pd.read_sql(f"SELECT {', '.join(cols)} FROM records", self.conn)
        for col in ("ib", "channels_last"):
            df[col] = df[col].astype("boolean")
        return df

    def environment_sample(self, limit: int) -> list[str]:
        """record_json of the newest ok measured record per (gpu, framework, mpi, engine, nodes), at most `limit`:
        enough to describe the environments a report covers without parsing every record."""
        return [r[0] for r in self.conn.execute(
            "SELECT record_json FROM records WHERE rowid IN (SELECT MAX(rowid) FROM records WHERE status = 'ok' "
            "AND run_id NOT LIKE ? GROUP BY gpu, framework, mpi, engine, nodes) LIMIT ?",
            (IMPORT_RUN_PREFIX + "%", limit))]

    # --- imports ------------------------------------------------------------------------------------------------
    def import_rows(self, runs: Iterable[dict[str, Any]], records: Iterable[dict[str, Any]]) -> int:
        """Writes imported runs and records (column → value; keys that are not columns of this store are left
        out) in one transaction, retried while another writer holds the store: all of them or none. A run already
        imported keeps its first import time; its provenance (plan_json, matrix_path) is refreshed. Records
        replace those with the same key. Returns the number of records written."""
        runs, records = list(runs), list(records)
        _retry(lambda: self._import(runs, records))
        return len(records)

    def _import(self, runs: list[dict[str, Any]], records: list[dict[str, Any]]) -> None:
        c = self.conn
        columns = {r[1] for r in c.execute("PRAGMA table_info(records)")}
        run_columns = {r[1] for r in c.execute("PRAGMA table_info(runs)")}
        now = time.time()
        c.execute("BEGIN IMMEDIATE")
        try:
            for run in runs:
                row = {k: v for k, v in {**run, "started_unix": now, "finished_unix": now}.items() if k in run_columns}
                c.execute(f"INSERT OR IGNORE INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                          tuple(row.values()))
                c.execute("UPDATE runs SET plan_json = ?, matrix_path = ? WHERE run_id = ?",
                          (run["plan_json"], run["matrix_path"], run["run_id"]))
            for record in records:
                row = {k: v for k, v in record.items() if k in columns}
                c.execute(f"INSERT OR REPLACE INTO records ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                          tuple(row.values()))
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise


def record_columns() -> dict[str, str]:
    """Column → declared type (upper case) of the records table at this bench's schema, read from a scratch
    in-memory store built by the migrations (what `bench import` checks a CSV's header and values against)."""
    conn = sqlite3.connect(":memory:")
    try:
        for version in range(1, STORE_SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version].split(";"):
                if statement.strip():
                    conn.execute(statement)
        return {r[1]: r[2].upper() for r in conn.execute("PRAGMA table_info(records)")}
    finally:
        conn.close()


def _retry(operation, budget_s: float = WRITE_RETRY_S):
    """Run `operation`, again while SQLite says the store is locked or busy (another writer, a checkpoint)."""
    deadline = time.monotonic() + budget_s
    delay = 0.05
    while True:
        try:
            return operation()
        except sqlite3.OperationalError as e:
            text = str(e).lower()
            if ("locked" not in text and "busy" not in text) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


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


def _collective_rows(record: Record) -> list[dict[str, Any]]:
    cell = record.cell
    stack = {"gpu": cell.get("gpu"), "framework": cell.get("framework"), "mpi": cell.get("mpi"),
             "ib": int(cell["ib"]) if isinstance(cell.get("ib"), bool) else cell.get("ib"),
             "engine": cell.get("engine"), "world_size": record.world_size, "nodes": record.nodes}
    return [{"run_id": record.run_id, "cell_id": record.cell_id, "job": record.job, "repeat": record.repeat,
             **row.model_dump(), **stack} for row in record.collective]


def _check_sqlite_header(path: Path) -> None:
    try:
        with closing(open(path, "rb")) as f:
            head = f.read(16)
    except OSError as e:
        raise BenchInputError(f"cannot read the store: {e.strerror}", str(path)) from None
    if head and head != b"SQLite format 3\x00":
        raise BenchInputError("not a SQLite database", str(path))
