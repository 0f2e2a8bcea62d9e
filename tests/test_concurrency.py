"""Several writers and several `bench run`s on one store at once: nothing lost, no cell measured twice at once."""
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

from bench.planning.cell import cell_id
from bench.planning.matrix import load_matrix_text
from bench.store import MIGRATIONS, STORE_SCHEMA_VERSION, Store
from tests.conftest import ROOT, TINY_WORKLOAD

WRITER = """
import sys, time
from pathlib import Path
from bench.records.schema import parse_record
from bench.store import Store
from tests.factories import record
go = Path(sys.argv[3])
while not go.exists():
    time.sleep(0.01)
with Store(sys.argv[1]) as store:  # every writer creates/migrates the same new store at the same moment
    for batch in range(40):
        store.write_many([parse_record(record(run_id=f"{sys.argv[2]}-{batch}", repeat=i)) for i in range(5)])
"""


@pytest.mark.slow
def test_concurrent_writers_lose_nothing(tmp_path):
    db, go = tmp_path / "bench.db", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), f"w{n}", str(go)], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for n in range(4)]
    time.sleep(1.5)  # let every interpreter reach the starting line
    go.touch()
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM records").fetchone() == (4 * 40 * 5,)
        assert conn.execute("SELECT COUNT(DISTINCT run_id) FROM records").fetchone() == (4 * 40,)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT COUNT(*) FROM schema_version").fetchone() == (STORE_SCHEMA_VERSION,)


def test_a_live_claim_blocks_a_second_run_and_an_old_heartbeat_frees_it(tmp_path):
    with Store(tmp_path / "b.db") as store:
        assert store.claim("c1", "run-a").status == "claimed"
        busy = store.claim("c1", "run-b")
        assert busy.status == "busy" and busy.holder == "run-a"
        assert store.claim("c1", "run-a").status == "claimed"  # the owner may claim again
        time.sleep(0.4)
        store.heartbeat("c1", "run-a", token="t1")
        assert store.claim("c1", "run-b", lease_s=0.3).status == "busy"  # kept alive by its heartbeat
        time.sleep(0.4)
        taken = store.claim("c1", "run-b", lease_s=0.3)  # owner silent past the lease (another host, hung)
        assert taken.status == "claimed" and taken.stale_token == "t1"
        store.release("c1", "run-a")  # a late release by the old owner does not free the new owner's claim
        assert store.claims()[0]["run_id"] == "run-b"
        store.release("c1", "run-b")
        assert store.claims() == []


def test_a_claim_of_a_dead_process_on_this_host_expires_at_once(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with Store(tmp_path / "b.db") as store:
        store.conn.execute("INSERT INTO claims VALUES ('c1', 'old', ?, ?, 1.0, NULL, ?, ?)",
                           (socket.gethostname(), dead.pid, time.time(), time.time()))
        assert store.claim("c1", "new").status == "claimed"


def test_a_cell_complete_meanwhile_is_not_claimed(tmp_path):
    from bench.records.schema import parse_record
    from tests.factories import record

    with Store(tmp_path / "b.db") as store:
        rec = [parse_record(record(run_id="a", repeat=i, repeats=1)) for i in range(1)]
        store.write_many(rec)
        assert store.claim(rec[0].cell_id, "b").status == "done"
        assert store.claim(rec[0].cell_id, "b", skip_done=False).status == "claimed"  # --rerun


def test_schema_3_store_migrates_to_4_with_its_rows(tmp_path):
    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for v in (1, 2, 3):
        conn.executescript(MIGRATIONS[v])
        conn.execute("INSERT INTO schema_version VALUES (?)", (v,))
    conn.execute("INSERT INTO records (run_id, cell_id, job, repeat, status, repeats, jobs, record_json, "
                 "written_unix) VALUES ('r', 'c', 0, 0, 'ok', 1, 1, '{}', 0)")
    conn.commit()
    conn.close()
    with Store(path) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION  # every later migration applied on top of 3
        assert len(store.records()) == 1 and store.claims() == []


MATRIX = f"""
name: twice
{TINY_WORKLOAD}
axes:
  gpu: [cpu]
  mpi: [openmpi]
  steps: [2, 3]
  gpus: [1]
"""


@pytest.mark.e2e
def test_two_runs_of_one_matrix_on_one_store_measure_each_cell_once(tmp_path):
    (tmp_path / "m.yaml").write_text(MATRIX, encoding="utf-8")
    ids = {cell_id(c) for c in load_matrix_text(MATRIX).cells()}
    procs = [subprocess.Popen([sys.executable, "-m", "bench", "run", "m.yaml"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        errs = [p.communicate(timeout=600)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], errs
    with sqlite3.connect(tmp_path / "results" / "bench.db") as conn:
        rows = conn.execute("SELECT cell_id, run_id, repeat, status FROM records").fetchall()
        assert conn.execute("SELECT COUNT(*) FROM claims").fetchone() == (0,)
        runs = [r[0] for r in conn.execute("SELECT run_id FROM runs")]
    assert len(runs) == 2
    assert sorted((c, rep) for c, _, rep, _ in rows) == sorted((c, rep) for c in ids for rep in (0, 1))
    assert {s for *_, s in rows} == {"ok"}
    for c in ids:
        assert len({run for cid, run, *_ in rows if cid == c}) == 1, f"cell {c} measured by both runs"
        # Nothing of a cell was even started by the other run: it would have left a job directory.
        started = [run for run in runs if (tmp_path / "results" / "runs" / run / c).exists()]
        assert len(started) == 1, f"cell {c} was started by {started}"
    assert any("being measured by run" in e or "measured meanwhile by another run" in e for e in errs), errs
