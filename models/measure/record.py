"""Record writer for workers: one JSON object per measured repeat, one per line, flushed as it is written."""
from __future__ import annotations

import json
import os
import sys

SCHEMA_VERSION = 1
STDOUT_PREFIX = "BENCH_RECORD "


def write_record(record: dict, path: str | None) -> None:
    record = {"schema": SCHEMA_VERSION, **record}
    line = json.dumps(record, separators=(",", ":"), allow_nan=False)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())  # a record that was reported done must survive a crash of what follows
    else:
        sys.stdout.write(STDOUT_PREFIX + line + "\n")
        sys.stdout.flush()
