"""When a cell counts as measured: the one rule the store (what `run` resumes past) and the report (which run of a
cell it shows) both apply.

A run completed a cell when it recorded every repeat of every job ok (at least repeats × jobs ok records) and no
record of that cell in that run failed. Imported results (run ids `import:...`) are references, not measurements:
they never complete a cell. Plain Python over columns, no heavy imports: the store calls it inside a claim's
transaction, the report over 100,000 records.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

# Imported runs are named `import:<source>:...` (bench/imports/importer.py, which takes the prefix from here).
IMPORT_RUN_PREFIX = "import:"


def complete_runs(cell_ids: Sequence[str], run_ids: Sequence[str], statuses: Sequence[str], repeats: Sequence[Any],
                  jobs: Sequence[Any]) -> set[tuple[str, str]]:
    """(cell_id, run_id) of every run that completed its cell, from the records' columns (equal lengths, one entry
    per record). A record without `jobs` (written before jobs existed) counts as one job; one without `repeats`
    (NULL, NaN, NA) cannot show that its cell is complete."""
    # Counted by Counter and set over zips (C loops): 100,000 records take a few tens of ms; the Python loops below
    # run once per (cell, run, status) and per distinct (cell, run, repeats, jobs).
    ok: dict[tuple[str, str], int] = {}
    failed: set[tuple[str, str]] = set()
    for (cell_id, run_id, status), n in Counter(zip(cell_ids, run_ids, statuses)).items():
        if status == "ok":
            ok[(cell_id, run_id)] = n
        else:
            failed.add((cell_id, run_id))
    expected: dict[tuple[str, str], float] = {}
    for cell_id, run_id, reps, njobs in set(zip(cell_ids, run_ids, repeats, jobs)):
        if isinstance(reps, (int, float)) and reps == reps:
            need = reps * (njobs if isinstance(njobs, (int, float)) and njobs == njobs else 1)
            if need > expected.get((cell_id, run_id), 0):
                expected[(cell_id, run_id)] = need
    return {key for key, n in ok.items() if key not in failed and n >= expected.get(key, _NEVER)
            and not str(key[1]).startswith(IMPORT_RUN_PREFIX)}


_NEVER = float("inf")
