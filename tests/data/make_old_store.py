"""Writes tests/data/store_before_id_scheme.db: a results store written by bench before id scheme 1 was written
down and before the store's migrations were frozen as literals.

The committed file was made by running this at commit d9cf06a (schema 4, ids hashing every key present):

    git worktree add /tmp/old d9cf06a && cd /tmp/old && PYTHONPATH=$PWD python3 <this file> <out.db>

It holds every repeat of every job of ci/matrix-cpu.yaml's two cells (a complete run, as resume sees it), built
the way a worker reports them (tests/factories.py, the real meter). Never regenerate it with newer code.
"""
from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from bench.matrix import load_matrix
from bench.record import Record
from bench.store import Store
from tests.factories import record

RUN_ID = "20250101T000000Z-before"


def main(out: Path) -> None:
    cells = load_matrix("ci/matrix-cpu.yaml").cells()
    with Store(out) as store:
        store.begin_run(RUN_ID, matrix_name="ci-cpu", matrix_path="ci/matrix-cpu.yaml", backend="local", host="old",
                        bench_version="0.1.0", plan={})
        for c in cells:
            for job in range(c["jobs"]):
                store.write_many(Record.model_validate({**record(RUN_ID, repeat, 1.0 + 0.1 * job, **c), "job": job})
                                 for repeat in range(c["repeats"]))
        store.finish_run(RUN_ID)
    conn = sqlite3.connect(out)  # one self-contained file: no WAL beside it
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("VACUUM")
    conn.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
