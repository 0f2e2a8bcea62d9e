"""A read-only or full results directory: one line and exit 2 before any cell runs. A disk that fills up mid-run:
the cell whose records cannot be written is not marked done, and runs again next time. Real tmpfs mounts."""
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import TINY_WORKLOAD, bench_cli

MATRIX = f"""
name: disk
{TINY_WORKLOAD}
axes:
  gpu: [cpu]
  mpi: [openmpi]
  gpus: [1]
"""


@pytest.fixture
def tmpfs(tmp_path):
    """Mounts a small tmpfs; unmounted afterwards. Needs root (mount); skipped with the reason otherwise."""
    mounted = []

    def mount(name: str, size: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(where: Path) -> Path:
    filler = where / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError:
            pass
    return filler


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_read_only_results_directory_is_refused_before_anything_runs(tmp_path, tmpfs):
    disk = tmpfs("ro", "16m")
    (tmp_path / "m.yaml").write_text(MATRIX, encoding="utf-8")
    store = disk / "results" / "bench.db"
    from bench.store import Store

    Store(store).close()
    before = snapshot(disk)
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    result = bench_cli("run", "m.yaml", "--store", str(store), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "results: the results directory is not writable: Read-only file system" \
        in result.stderr, result.stderr
    assert snapshot(disk) == before and not (disk / "results" / "runs").exists()
    # A results directory that cannot even be created: named the same way.
    result = bench_cli("run", "m.yaml", "--store", str(disk / "new" / "bench.db"), cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "cannot create the results directory: Read-only file system" in result.stderr, result.stderr


def test_full_results_directory_is_refused_before_anything_runs(tmp_path, tmpfs):
    disk = tmpfs("full", "8m")
    (tmp_path / "m.yaml").write_text(MATRIX, encoding="utf-8")
    (disk / "results").mkdir()
    fill(disk)
    before = snapshot(disk)
    result = bench_cli("run", "m.yaml", "--store", str(disk / "results" / "bench.db"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "the results directory is not writable: No space left on device" in result.stderr, result.stderr
    assert snapshot(disk) == before


def test_almost_full_results_directory_is_refused_too(tmp_path, tmpfs):
    disk = tmpfs("tight", "12m")  # a 1 MiB probe fits; the 16 MiB a run needs does not
    (tmp_path / "m.yaml").write_text(MATRIX, encoding="utf-8")
    result = bench_cli("run", "m.yaml", "--store", str(disk / "results" / "bench.db"), cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "MiB free, less than the 16 MiB a run needs" in result.stderr


@pytest.mark.e2e
def test_disk_filling_up_mid_run_leaves_the_cell_not_done(tmp_path, tmpfs):
    disk = tmpfs("fills", "64m")
    (tmp_path / "m.yaml").write_text(MATRIX, encoding="utf-8")
    store = disk / "results" / "bench.db"
    proc = subprocess.Popen([sys.executable, "-m", "bench", "run", "m.yaml", "--store", str(store)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    filler = None
    try:
        end = time.monotonic() + 300
        while time.monotonic() < end and proc.poll() is None:
            if any(str(disk) in " ".join(p.info["cmdline"] or []) and "resnet50/pytorch_worker.py" in " ".join(
                    p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])):
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before its cell started"
        filler = fill(disk)  # the cell is running; its records will have nowhere to go
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("bench: error: cpu/pytorch/openmpi/ib=off/1w") and "store refused its records" in last \
        and "not recorded as done" in last, err[-3000:]
    filler.unlink()
    with sqlite3.connect(store) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT COUNT(*) FROM records").fetchone() == (0,)
    again = bench_cli("run", "m.yaml", "--store", str(store), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already measured" not in again.stderr and "1 ok" in again.stderr
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT status, COUNT(*) FROM records GROUP BY status").fetchall() == [("ok", 2)]
