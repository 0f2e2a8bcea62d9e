"""The Store: one SQLite connection, and every query bench runs on it, by name. Each public method lets only
StoreError out (failures.guarded)."""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from bench.cells.keys import BOOL_KEYS
from bench.records.completeness import IMPORT_RUN_PREFIX, complete_runs
from bench.store.failures import REFUSED, UNUSABLE, StoreError, guarded, retry_while_locked, sqlite_reason
from bench.store.preflight import check_store_file
from bench.store.rows import record_row, size_rows
from bench.store.schema import STORE_SCHEMA_VERSION, migrate, refuse_newer, schema_version_of

if TYPE_CHECKING:
    from bench.records.schema import Record

CLAIM_LEASE_S = 60.0  # a claim not heartbeaten for this long is abandoned (owner on another host, say)


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


def _read_only(conn: sqlite3.Connection, where: str) -> sqlite3.Connection:
    """`conn`'s store at this bench's schema, without a write to its file, query_only: `conn` itself when the store
    is current, else a migrated in-memory copy (sqlite3's backup API copies a consistent snapshot, even while a run
    writes; `conn` is then closed). Not SQLite's mode=ro: a read-only connection to a WAL store cannot remove the -wal
    and -shm files it makes, and would leave them beside the store."""
    if schema_version_of(conn) < STORE_SCHEMA_VERSION:
        copy = sqlite3.connect(":memory:", isolation_level=None)
        try:
            conn.backup(copy)
            migrate(copy, where)
        except BaseException:
            copy.close()
            raise
        conn.close()
        conn = copy
    conn.execute("PRAGMA query_only = ON")  # a write to a copy would be lost: refuse it, as in place
    return conn


class Store:
    """One store file, opened and brought to this bench's schema (a missing one is made unless create=False); close
    it, or use it in a `with`.

    `read_only=True` (what the verbs that only read use: report, status, export, check, history, diagnose): the file
    must exist and is never written. A store of this schema is read in place (the connection is query_only); an older
    one is copied into memory and migrated there, so reading a store an earlier bench made (an archived run, a results
    folder under version control) leaves its file byte for byte as it was."""

    def __init__(self, path: str | Path, *, create: bool = True, read_only: bool = False):
        self.path = Path(path)
        check_store_file(self.path, create=create and not read_only)
        try:
            self.conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open the store: {sqlite_reason(e)}", str(self.path)) from None
        try:
            self.conn.execute("PRAGMA busy_timeout = 30000")
            # Before anything is written: a store this bench cannot read stays untouched.
            refuse_newer(self.conn, str(self.path))
            if read_only:
                self.conn = _read_only(self.conn, str(self.path))
                return
            retry_while_locked(lambda: self.conn.execute("PRAGMA journal_mode = WAL"))
            retry_while_locked(lambda: migrate(self.conn, str(self.path)))
        except sqlite3.Error as e:
            self.conn.close()
            reason = sqlite_reason(e)
            raise StoreError(f"{UNUSABLE}: {reason}", str(self.path), reason=reason) from None
        except BaseException:
            self.conn.close()
            raise

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    @guarded(UNUSABLE)
    def schema_version(self) -> int:
        return self.conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]

    # --- writing ------------------------------------------------------------------------------------------------
    @guarded(REFUSED)
    def begin_run(self, run_id: str, *, matrix_name: str, matrix_path: str, backend: str, host: str,
                  bench_version: str, plan: dict[str, Any], source_json: str | None = None) -> None:
        self.conn.execute(
            "INSERT OR IGNORE INTO runs (run_id, started_unix, matrix_name, matrix_path, backend, host, bench_version,"
            " plan_json, source_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, time.time(), matrix_name, matrix_path, backend, host, bench_version, json.dumps(plan),
             source_json))

    @guarded(REFUSED)
    def finish_run(self, run_id: str) -> None:
        self.conn.execute("UPDATE runs SET finished_unix = ? WHERE run_id = ?", (time.time(), run_id))

    def write(self, record: Record) -> None:
        """One record, one transaction. Same (run, cell, job, repeat) again replaces the row: idempotent."""
        self.write_many([record])

    @guarded(REFUSED)
    def write_many(self, records: Iterable[Record]) -> int:
        """A job's records in one transaction: all of them or none (a controller killed mid-write never leaves
        half a job that could pass for a measured cell). Retried while another writer holds the store."""
        records = list(records)
        rows = [record_row(r) for r in records]
        sizes = [row for r in records for row in size_rows(r)]
        if rows:
            retry_while_locked(lambda: self._insert(rows, sizes))
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
    @guarded(REFUSED)
    def claim(self, cell_id: str, run_id: str, *, skip_done: bool = True, lease_s: float = CLAIM_LEASE_S) -> Claim:
        return retry_while_locked(lambda: self._claim(cell_id, run_id, skip_done, lease_s))

    def _claim(self, cell_id: str, run_id: str, skip_done: bool, lease_s: float) -> Claim:
        c = self.conn
        now, host, pid = time.time(), socket.gethostname(), os.getpid()
        c.execute("BEGIN IMMEDIATE")
        try:
            if skip_done and cell_id in self._completed_cells(cell_id):
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

    @guarded(REFUSED)
    def heartbeat(self, cell_id: str, run_id: str, token: str | None = None) -> None:
        retry_while_locked(lambda: self.conn.execute(
            "UPDATE claims SET heartbeat_unix = ?, token = COALESCE(?, token) WHERE cell_id = ? AND run_id = ?",
            (time.time(), token, cell_id, run_id)))

    @guarded(REFUSED)
    def release(self, cell_id: str, run_id: str) -> None:
        retry_while_locked(lambda: self.conn.execute("DELETE FROM claims WHERE cell_id = ? AND run_id = ?",
                                                     (cell_id, run_id)))

    @guarded(UNUSABLE)
    def claims(self) -> list[dict[str, Any]]:
        return self._dicts("SELECT * FROM claims")

    # --- reading ------------------------------------------------------------------------------------------------
    @guarded(UNUSABLE)
    def completed_cells(self, cell_id: str | None = None) -> set[str]:
        """Cells some run completed (bench.records.completeness: every repeat of every job ok, none failed): what resume
        skips. Imported results never complete a cell."""
        return self._completed_cells(cell_id)

    def _completed_cells(self, cell_id: str | None) -> set[str]:
        where, params = (" WHERE cell_id = ?", (cell_id,)) if cell_id is not None else ("", ())
        rows = self.conn.execute(f"SELECT cell_id, run_id, status, repeats, jobs FROM records{where}",
                                 params).fetchall()
        return {cell for cell, _ in complete_runs(*zip(*rows))} if rows else set()

    @guarded(UNUSABLE)
    def failed_cells(self) -> dict[str, str]:
        """Cells whose newest attempt ended failed or timeout, not completed by any run: cell id → that attempt's run
        id. What `run --skip-failed` leaves alone. The newest record is the attempt's verdict (a failure record is
        written after the job's ok ones); an interrupted or skipped attempt is not a failure of the cell."""
        rows = self.conn.execute(
            "SELECT cell_id, run_id, status FROM records WHERE rowid IN (SELECT MAX(rowid) FROM records "
            "WHERE run_id NOT LIKE ? GROUP BY cell_id)", (IMPORT_RUN_PREFIX + "%",)).fetchall()
        failed = {cell: run for cell, run, status in rows if status in ("failed", "timeout")}
        if not failed:
            return {}
        done = self._completed_cells(None)  # an older run measured it: resume skips it anyway
        return {cell: run for cell, run in failed.items() if cell not in done}

    @guarded(UNUSABLE)
    def records(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Every record (column → value), or a run's."""
        return self._dicts("SELECT * FROM records" + (" WHERE run_id = ?" if run_id is not None else ""),
                           (run_id,) if run_id is not None else ())

    @guarded(UNUSABLE)
    def ok_samples_per_sec(self) -> list[float]:
        """images/sec of every ok record, by repeat: the measurements of a store that holds one cell."""
        return [r for (r,) in self.conn.execute(
            "SELECT samples_per_sec FROM records WHERE status = 'ok' ORDER BY repeat")]

    @guarded(UNUSABLE)
    def rank_windows(self) -> list[dict[str, Any]]:
        """cell_id, run_id and per_rank (the ranks' figures and phases, parsed) of every ok training record: what
        the expected values and breakdowns read (bench/analysis/expected.py), without parsing whole records."""
        import json

        rows = self.conn.execute("SELECT cell_id, run_id, json_extract(record_json, '$.per_rank') FROM records "
                                 "WHERE status = 'ok' AND samples_per_sec IS NOT NULL AND run_id NOT LIKE ?",
                                 (IMPORT_RUN_PREFIX + "%",)).fetchall()
        return [{"cell_id": c, "run_id": r, "per_rank": json.loads(p) if p else []} for c, r, p in rows]

    @guarded(UNUSABLE)
    def collectives(self):
        """One row per message size per repeat of every collective cell (a DataFrame; empty when none ran)."""
        import pandas as pd

        return pd.read_sql("SELECT * FROM collectives ORDER BY run_id, cell_id, job, repeat, op, bytes", self.conn)

    @guarded(UNUSABLE)
    def collective_rows(self) -> list[dict[str, Any]]:
        """The same rows as collectives(), as column → value, by MPI then message size: a sweep's table."""
        return self._dicts("SELECT * FROM collectives ORDER BY mpi, bytes")

    @guarded(UNUSABLE)
    def runs(self) -> list[dict[str, Any]]:
        return self._dicts("SELECT * FROM runs ORDER BY started_unix")

    @guarded(UNUSABLE)
    def runs_with_records(self) -> set[str]:
        """Ids of the runs that wrote at least one record (a run that stopped before its first cell wrote none)."""
        return {r[0] for r in self.conn.execute("SELECT DISTINCT run_id FROM records")}

    @guarded(UNUSABLE)
    def dataframe(self, *, record_json: bool = True):
        """One row per record. record_json=False leaves the full JSON out: the columns hold what reports and
        checks read, and 100,000 JSON documents would be most of the time and memory."""
        import pandas as pd

        cols = [r[1] for r in self.conn.execute("PRAGMA table_info(records)") if record_json or r[1] != "record_json"]
        df = pd.read_sql(f"SELECT {', '.join(cols)} FROM records", self.conn)
        for col in sorted(BOOL_KEYS & set(df.columns)):  # 0/1 in SQLite
            df[col] = df[col].astype("boolean")
        return df

    @guarded(UNUSABLE)
    def environment_sample(self, limit: int) -> list[str]:
        """record_json of the newest ok measured record per (gpu, framework, mpi, engine, nodes), at most `limit`:
        enough to describe the environments a report covers without parsing every record."""
        return [r[0] for r in self.conn.execute(
            "SELECT record_json FROM records WHERE rowid IN (SELECT MAX(rowid) FROM records WHERE status = 'ok' "
            "AND run_id NOT LIKE ? GROUP BY gpu, framework, mpi, engine, nodes) LIMIT ?",
            (IMPORT_RUN_PREFIX + "%", limit))]

    @guarded(UNUSABLE)
    def run_environments(self) -> dict[str, str]:
        """run_id → record_json of the run's newest ok record: what each run's environment was (the history's
        "what changed" at a change point), one document per run rather than every record's."""
        return dict(self.conn.execute(
            "SELECT run_id, record_json FROM records WHERE rowid IN (SELECT MAX(rowid) FROM records "
            "WHERE status = 'ok' GROUP BY run_id)").fetchall())

    def _dicts(self, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
        cur = self.conn.execute(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    # --- imports ------------------------------------------------------------------------------------------------
    @guarded(REFUSED)
    def import_rows(self, runs: Iterable[dict[str, Any]], records: Iterable[dict[str, Any]]) -> int:
        """Writes imported runs and records (column → value; keys that are not columns of this store are left
        out) in one transaction, retried while another writer holds the store: all of them or none. A run already
        imported keeps its first import time; its provenance (plan_json, matrix_path) is refreshed. Records
        replace those with the same key. Returns the number of records written."""
        runs, records = list(runs), list(records)
        retry_while_locked(lambda: self._import(runs, records))
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
