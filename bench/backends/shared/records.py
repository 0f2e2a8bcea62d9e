"""Reading back what a job left in its directory: the workers' records and the end of its log."""
from __future__ import annotations

import json
import os
from pathlib import Path

LOG_TAIL_LINES = 40


def read_records(path: Path) -> tuple[list[dict], str | None]:
    """The records in a records.jsonl, and why the file is bad (None if every line reads)."""
    if not path.exists():
        return [], None
    records = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            return records, f"record line {n} is not valid JSON ({e.msg}); the file may be truncated"
    return records, None


def read_end(path: Path, limit: int = 256 * 1024) -> str:
    """The last `limit` bytes of a log: enough to find the error, bounded however much a job printed."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - limit))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def tail_of(log: str) -> str:
    return "\n".join(log.splitlines()[-LOG_TAIL_LINES:])
