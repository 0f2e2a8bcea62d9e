"""When a cell counts as measured: the one rule the store (what `run` resumes past) and the report (which run of a
cell it shows) both apply.

A run completed a cell when it recorded every repeat of every job ok (at least repeats × jobs ok records) and no
record of that cell in that run failed. Imported results (run ids `import:...`) are references, not measurements:
they never complete a cell. Plain Python over row tuples, no imports: the store calls it inside a claim's
transaction, the report over 100,000 records.
"""
from __future__ import annotations

from typing import Any, Iterable

# Imported runs are named `import:<source>:...` (bench/importer.py, which takes the prefix from here).
IMPORT_RUN_PREFIX = "import:"


def _missing(x: Any) -> bool:
    return x is None or x != x  # NULL from SQLite, NaN/NA from pandas


def complete_runs(rows: Iterable[tuple[str, str, str, Any, Any]]) -> set[tuple[str, str]]:
    """(cell_id, run_id) of every run that completed its cell, from (cell_id, run_id, status, repeats, jobs) rows.
    A record without `jobs` (written before jobs existed) counts as one job; one without `repeats` cannot show
    that its cell is complete."""
    ok: dict[tuple[str, str], int] = {}
    expected: dict[tuple[str, str], float] = {}
    failed: set[tuple[str, str]] = set()
    for cell_id, run_id, status, repeats, jobs in rows:
        if str(run_id).startswith(IMPORT_RUN_PREFIX):
            continue
        key = (cell_id, run_id)
        if status == "ok":
            ok[key] = ok.get(key, 0) + 1
        else:
            failed.add(key)
        if not _missing(repeats):
            need = repeats * (1 if _missing(jobs) else jobs)
            if need > expected.get(key, 0):
                expected[key] = need
    return {key for key, n in ok.items() if key not in failed and key in expected and n >= expected[key]}
