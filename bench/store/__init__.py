"""The results store: one SQLite file, the single source of truth for reports and checks.

WAL journal, one transaction per record, a schema-version table with forward migrations. (run_id, cell_id, job,
repeat) is the key, so writing the same record twice leaves one row. `pandas.read_sql("SELECT * FROM records", conn)`
gives one tidy row per record; the full record is kept as JSON beside the columns.

The store owns storage: only this package imports sqlite3 or writes SQL (tests/test_commands.py checks both). Callers
ask the Store by name (db.py) and meet one exception, StoreError (failures.py). schema.py holds the pinned
migrations, rows.py a Record as rows, preflight.py what is checked before a store is opened.
"""
from __future__ import annotations

from bench.store.db import CLAIM_LEASE_S, Claim, Store
from bench.store.failures import WRITE_RETRY_S, StoreError
from bench.store.preflight import MIN_FREE_BYTES, check_writable
from bench.store.schema import MIGRATIONS, STORE_SCHEMA_VERSION, record_columns

__all__ = ["CLAIM_LEASE_S", "MIGRATIONS", "MIN_FREE_BYTES", "STORE_SCHEMA_VERSION", "WRITE_RETRY_S", "Claim", "Store",
           "StoreError", "check_writable", "record_columns"]
