"""Faults injected for real: workers killed, hung, raising, out of memory (models/measure/faults.py's test hook
BENCH_FAULT), and the controller itself SIGKILLed mid-cell, at start-up and mid-store-write. Nothing lost, nothing
duplicated, no process left behind.

The runs here pass --no-probe: what they prove is the cells' bookkeeping, and the local backend's compute and engine
probes would triple each run's time (12 s against 44 s for two tiny two-worker cells) without touching it."""
import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import psutil
import pytest

from bench.planning.cell import cell_id
from bench.planning.matrix import load_matrix_text
from tests.conftest import ROOT, TINY_WORKLOAD, bench_cli

pytestmark = pytest.mark.e2e


def cells_of(text: str) -> list[dict]:
    return load_matrix_text(text).cells()


def records(d: Path) -> list[dict]:
    with sqlite3.connect(d / "results" / "bench.db") as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM records")]


def processes_under(d: Path) -> list[psutil.Process]:
    """Every process working in `d` (launchers, workers, watchdogs inherit the test's cwd) or naming it."""
    found = []
    me = os.getpid()
    for p in psutil.process_iter(["cmdline", "cwd"]):
        if p.pid == me:
            continue
        try:
            cwd, cmd = p.info["cwd"] or "", p.info["cmdline"] or []
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        if cwd.startswith(str(d)) or any(str(d) in part for part in cmd):
            found.append(p)
    return found


def wait_until(predicate, timeout: float, step: float = 0.2) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


def kill_leftovers(d: Path) -> None:
    for p in processes_under(d):
        try:
            p.kill()
        except psutil.Error:
            pass


WORKER_FAULTS = f"""
name: faults
{TINY_WORKLOAD}
axes:
  gpu: [cpu]
  mpi: [openmpi, gloo]
  steps: [2, 3, 4]
  gpus: [2]
exclude:
  - {{mpi: openmpi, steps: 4}}
"""


def test_worker_faults_end_the_group_record_the_reason_and_the_other_cells_still_run(tmp_path):
    (tmp_path / "m.yaml").write_text(WORKER_FAULTS, encoding="utf-8")
    ids = {(c["mpi"], c["steps"]): cell_id(c) for c in cells_of(WORKER_FAULTS)}
    # Step 3 is the second step of the first measured window (warm-up is step 1): mid-window, on rank 1 only.
    faults = {("openmpi", 2): "kill", ("openmpi", 3): "raise", ("gloo", 2): "kill", ("gloo", 3): "oom"}
    env = {"BENCH_FAULT": ",".join(f"{kind}:rank=1:step=3:cell={ids[key]}" for key, kind in faults.items())}
    try:
        result = bench_cli("run", "m.yaml", "--no-probe", cwd=tmp_path, env=env, timeout=900)
        leftovers = processes_under(tmp_path)
    finally:
        kill_leftovers(tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    assert not leftovers, f"processes survived their cells: {[(p.pid, p.info['cmdline']) for p in leftovers]}"
    rows = records(tmp_path)
    by_cell = {}
    for r in rows:
        by_cell.setdefault(r["cell_id"], []).append(r)
    assert set(by_cell) == set(ids.values())
    for key, kind in faults.items():
        (row,) = by_cell[ids[key]]
        assert row["status"] == "failed", (key, row["error"])
        rec = json.loads(row["record_json"])
        log = (tmp_path / "results" / "runs" / row["run_id"] / row["cell_id"] / "job0" / "log.txt").read_text()
        assert f"bench fault: {kind} at step 3" in log, (key, log[-3000:])
        assert rec["log_tail"] and rec["log_tail"].strip() in log  # the tail of the kept log, in the record
        assert row["error"].startswith("exit code"), (key, row["error"])
        assert row["error"] in result.stderr  # the reason is shown as the cell ends, too
        if kind == "raise":
            assert "RuntimeError: bench fault injection: raised at step 3" in row["error"]
        if kind == "kill":
            assert "signal 9" in row["error"] or "Killed" in row["error"], (key, row["error"])
        if kind == "oom":
            assert "MemoryError" in log and "MemoryError" in row["error"], (key, log[-3000:])
    ok = by_cell[ids[("gloo", 4)]]
    assert [r["status"] for r in ok] == ["ok", "ok"], "the cell after the faults must still be measured"


def test_a_hung_rank_that_ignores_sigterm_is_killed_at_the_timeout(tmp_path):
    text = WORKER_FAULTS.replace("mpi: [openmpi, gloo]", "mpi: [openmpi]").replace("steps: [2, 3, 4]", "steps: [2]")
    text = text.split("exclude:")[0]
    (tmp_path / "m.yaml").write_text(text, encoding="utf-8")
    (cell,) = cells_of(text)
    started = time.monotonic()
    try:
        result = bench_cli("run", "m.yaml", "--no-probe", "--timeout", "45", cwd=tmp_path, timeout=300,
                           env={"BENCH_FAULT": "hang:rank=1:step=3"})
        leftovers = processes_under(tmp_path)
    finally:
        kill_leftovers(tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    assert not leftovers, f"the hung rank survived: {[(p.pid, p.info['cmdline']) for p in leftovers]}"
    (row,) = records(tmp_path)
    assert row["cell_id"] == cell_id(cell) and row["status"] == "timeout"
    assert "timed out after 45 s; the process group was killed" in row["error"]
    assert "bench fault: hang at step 3" in json.loads(row["record_json"])["log_tail"]
    assert time.monotonic() - started < 120  # SIGTERM ignored, SIGKILL followed within seconds

    # Resuming with --skip-failed does not spend the timeout again: the cell is named, not run, and still failed.
    again = bench_cli("run", "m.yaml", "--no-probe", "--timeout", "45", "--skip-failed", cwd=tmp_path, timeout=300,
                      env={"BENCH_FAULT": "hang:rank=1:step=3"})
    assert again.returncode == 1, again.stderr[-2000:]
    assert f"its last attempt (run {row['run_id']}) failed; --skip-failed  {row['cell_id']}" in again.stderr
    assert "0 ok, 0 failed, 1 failed before and not retried" in again.stderr
    assert [r["status"] for r in records(tmp_path)] == ["timeout"]
    assert not (tmp_path / "results" / "runs").exists() or \
        len(list((tmp_path / "results" / "runs").iterdir())) == 1  # no job directory for the second run


def test_rerun_and_skip_failed_together_are_bad_input(tmp_path):
    (tmp_path / "m.yaml").write_text(WORKER_FAULTS, encoding="utf-8")
    result = bench_cli("run", "m.yaml", "--rerun", "--skip-failed", cwd=tmp_path, timeout=120)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "--rerun" in result.stderr and "--skip-failed" in result.stderr
    assert not (tmp_path / "results").exists()


CONTROLLER = f"""
name: controller
{TINY_WORKLOAD}
axes:
  gpu: [cpu]
  mpi: [openmpi]
  steps: [2, 3]
  gpus: [2]
"""


def test_controller_sigkilled_mid_cell_leaves_no_workers_and_the_next_run_resumes(tmp_path):
    (tmp_path / "m.yaml").write_text(CONTROLLER, encoding="utf-8")
    first, second = (cell_id(c) for c in cells_of(CONTROLLER))
    db = tmp_path / "results" / "bench.db"

    def ok_rows(cid):
        if not db.exists():
            return 0
        try:
            with sqlite3.connect(db, timeout=30) as conn:
                return conn.execute("SELECT COUNT(*) FROM records WHERE cell_id = ? AND status = 'ok'",
                                    (cid,)).fetchone()[0]
        except sqlite3.OperationalError:
            return 0

    def workers_of(cid):
        return [p for p in processes_under(tmp_path) if any(cid in part for part in (p.info["cmdline"] or []))]

    proc = subprocess.Popen([sys.executable, "-m", "bench", "run", "m.yaml", "--no-probe"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: ok_rows(first) == 2, 300), "the first cell never finished"
        assert wait_until(lambda: len(workers_of(second)) >= 2, 120), "the second cell never started"
        time.sleep(1.0)
        proc.kill()  # SIGKILL: no handler runs, nothing is cleaned up by the controller itself
        proc.wait(timeout=30)
        # The job's watchdog sees its controller die and ends the launcher group and every token carrier.
        gone = wait_until(lambda: not processes_under(tmp_path), 30)
        leftovers = processes_under(tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_leftovers(tmp_path)
    assert gone, f"workers outlived their controller: {[(p.pid, p.info['cmdline']) for p in leftovers]}"
    with sqlite3.connect(db) as conn:
        stale = conn.execute("SELECT cell_id FROM claims").fetchall()
    assert stale == [(second,)], "the killed run's claim on its running cell stays until someone takes it over"

    again = bench_cli("run", "m.yaml", "--no-probe", cwd=tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resume: 1 cell(s) already measured" in again.stderr
    rows = records(tmp_path)
    assert sorted((r["cell_id"], r["repeat"]) for r in rows) == sorted(
        [(first, 0), (first, 1), (second, 0), (second, 1)]), "a cell kept twice or lost"
    assert {r["status"] for r in rows} == {"ok"}
    assert len({r["run_id"] for r in rows if r["cell_id"] == first}) == 1
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT COUNT(*) FROM claims").fetchone() == (0,)
        runs = conn.execute("SELECT finished_unix FROM runs ORDER BY started_unix").fetchall()
    assert runs[0][0] is None and runs[1][0] is not None  # the killed run stays visibly unfinished


def test_controller_sigkilled_while_it_creates_and_opens_the_store(tmp_path):
    """Killed at moments of start-up right after the store file appears (creation, migrations, WAL set-up), each
    time with a fresh store: what is left behind is sound and opens at today's schema."""
    from bench.records.schema import parse_record
    from bench.store import STORE_SCHEMA_VERSION, Store
    from tests.factories import record

    (tmp_path / "m.yaml").write_text(CONTROLLER.replace("steps: [2, 3]", "steps: [2]"), encoding="utf-8")
    for attempt, delay_s in enumerate((0.0, 0.001, 0.005, 0.02)):
        db = tmp_path / f"store{attempt}" / "bench.db"
        proc = subprocess.Popen([sys.executable, "-m", "bench", "run", "m.yaml", "--no-probe", "--store", str(db)],
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert wait_until(db.exists, 120, step=0.001), "the run never created its store"
            time.sleep(delay_s)
            assert proc.poll() is None, "the run ended before the kill"
        finally:
            proc.kill()
            proc.wait()
        wait_until(lambda: not processes_under(tmp_path), 30)
        with closing(sqlite3.connect(db)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        with Store(db) as store:
            assert store.schema_version == STORE_SCHEMA_VERSION
            store.write(parse_record(record()))
            assert len(store.records()) == 1
    kill_leftovers(tmp_path)


WRITER = """
import sys
from bench.records.schema import parse_record
from bench.store import Store
from tests.factories import record
store = Store(sys.argv[1])
batch = 0
print("ready", flush=True)
while True:
    store.write_many([parse_record(record(run_id=f"{sys.argv[2]}-{batch}", repeat=i)) for i in range(6)])
    batch += 1
"""


def test_sigkill_during_store_writes_keeps_whole_jobs_only_and_a_sound_store(tmp_path):
    db = tmp_path / "bench.db"
    rng = random.Random(7)

    def jobs_written(run: str) -> list[int]:
        with closing(sqlite3.connect(db, timeout=30)) as conn:
            return [n for _, n in conn.execute("SELECT run_id, COUNT(*) FROM records WHERE run_id LIKE ? "
                                               "GROUP BY run_id", (f"{run}-%",))]

    for attempt in range(5):
        run = f"w{attempt}"
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db), run], cwd=ROOT, stdout=subprocess.PIPE,
                                text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            # Killed only once it is writing, so every attempt kills a writer mid-stream.
            assert wait_until(lambda: jobs_written(run), 60, step=0.01), "the writer never wrote a job"
            time.sleep(rng.uniform(0.0, 0.3))
        finally:
            proc.kill()
            proc.wait()
        with closing(sqlite3.connect(db)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        written = jobs_written(run)
        assert written and set(written) == {6}, f"a killed write left part of a job: {written}"


def test_a_dead_runs_claim_is_taken_over_and_its_leftover_processes_swept(tmp_path):
    """The second line of defence behind the watchdog: the next run sweeps a stale claim's job token."""
    from bench.backends.local.backend import LocalBackend
    from bench.backends.shared.process import TOKEN_VAR
    from bench.store import Store

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    straggler = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                 env={**os.environ, TOKEN_VAR: "tok-123"}, start_new_session=True)
    try:
        with Store(tmp_path / "b.db") as store:
            store.conn.execute("INSERT INTO claims VALUES ('cellA', 'old-run', ?, ?, 1.0, 'tok-123', 0, ?)",
                               (__import__("socket").gethostname(), dead.pid, time.time()))
            claim = store.claim("cellA", "new-run")
            assert claim.status == "claimed" and claim.stale_token == "tok-123"
            assert LocalBackend(tmp_path, 60).sweep(claim.stale_token) == 1
            assert straggler.wait(timeout=15) is not None
    finally:
        if straggler.poll() is None:
            straggler.kill()
