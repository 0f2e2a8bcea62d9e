"""Before a store is opened: the results directory can take a run, and an existing file is SQLite at all."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from bench.store.failures import StoreError

MIN_FREE_BYTES = 16 << 20  # logs and records of a few cells; less is a full disk waiting to happen mid-run


def check_writable(store_path: str | Path) -> None:
    """Before any cell runs: the store's directory exists (or can be made), takes a real write, and has room. A
    read-only or full results directory is bad input (one line, exit 2), not a failure found after an hour."""
    d = Path(store_path).parent
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create the results directory: {e.strerror}", str(d)) from None
    probe = d / f".bench-write-probe-{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * (1 << 20))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise StoreError(f"the results directory is not writable: {e.strerror}", str(d)) from None
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:
            pass
    free = shutil.disk_usage(d).free
    if free < MIN_FREE_BYTES:
        raise StoreError(f"the results directory has {free / 2**20:.1f} MiB free, less than the "
                         f"{MIN_FREE_BYTES >> 20} MiB a run needs", str(d))


def check_store_file(path: Path, *, create: bool) -> None:
    """The store's path names a SQLite file, or nothing yet when `create` (its directory is made)."""
    if path.is_dir():
        raise StoreError("is a directory, expected a SQLite store", str(path))
    if not path.exists():
        if not create:
            raise StoreError("no results store here (run `bench run` first)", str(path))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the results directory: {e.strerror}", str(path.parent)) from None
        return
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise StoreError(f"cannot read the store: {e.strerror}", str(path)) from None
    if head and head != b"SQLite format 3\x00":
        raise StoreError("not a SQLite database", str(path))
