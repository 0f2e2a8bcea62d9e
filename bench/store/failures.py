"""What a storage failure becomes: a StoreError naming the store, never a sqlite3 exception past the store."""
from __future__ import annotations

import functools
import sqlite3
import time
import traceback
from typing import Any, Callable, TypeVar

from bench.core.errors import BenchInputError

WRITE_RETRY_S = 120.0  # beyond SQLite's own busy timeout: how long a write keeps trying on a locked store
REASON_CHARS = 200  # SQLite may quote a whole undecodable value in its message; one line stays readable

# What the CLI says before SQLite's own words, by what the store was doing.
UNUSABLE = "not a usable SQLite store"
REFUSED = "the store refused a write"

F = TypeVar("F", bound=Callable[..., Any])


class StoreError(BenchInputError):
    """A storage failure: the store is missing, a directory, not a database, corrupt, from a newer bench, read-only,
    full, or locked past the retry budget. One line naming the store; the CLI exits 2 on it (the --store given is
    unusable; nothing is written), and `bench run` turns one met while recording into RunFailed (exit 1), keeping
    what was recorded. `reason` is the failure without the store's name (SQLite's words, when SQLite refused)."""

    def __init__(self, message: str, where: str | None = None, *, reason: str | None = None):
        super().__init__(message, where)
        self.reason = " ".join(str(reason if reason is not None else message).split())


def sqlite_reason(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS] + "…"


def _reason_if_sqlite(error: Exception) -> str | None:
    cause = error if isinstance(error, sqlite3.Error) else error.__cause__
    return sqlite_reason(cause) if isinstance(cause, sqlite3.Error) else None


def guarded(doing: str) -> Callable[[F], F]:
    """Decorates a Store method: a sqlite3 error it raises (directly, or under pandas' DatabaseError from read_sql)
    leaves as StoreError `<store>: <doing>: <SQLite's reason>`."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def run(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except Exception as e:
                reason = _reason_if_sqlite(e)
                if reason is None:
                    raise
                # The failed query's frames hold its cursor (pandas' in a reference cycle); while the cursor lives,
                # closing the store leaves its -wal and -shm files behind. Drop them now.
                traceback.clear_frames(e.__traceback__)
            raise StoreError(f"{doing}: {reason}", str(self.path), reason=reason)

        return run  # type: ignore[return-value]

    return wrap


def retry_while_locked(operation: Callable[[], Any], budget_s: float = WRITE_RETRY_S) -> Any:
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
