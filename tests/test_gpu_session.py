"""scripts/gpu_session.sh's dry run, as it runs on a machine with no GPU: a complete kit lists every phase's commands
and exits 0 having run and written nothing; a kit missing a wheel exits non-zero naming it; bad options are one
line and exit 2."""
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "gpu_session.sh"
PINS = [line.split("#")[0].strip()
        for line in (ROOT / "scripts" / "device_kit_requirements.txt").read_text().splitlines()]
PINS = [p for p in PINS if p]


@pytest.fixture
def kit(tmp_path):
    """A kit with every file `make device-kit` puts there (small stand-ins: the dry run checks presence, not
    content)."""
    kit = tmp_path / "kit"
    (kit / "wheels").mkdir(parents=True)
    for pin in PINS:
        name, version = pin.split("==")
        (kit / "wheels" / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"PK")
    (kit / "requirements.txt").write_text("\n".join(PINS))
    (kit / "horovod-0.28.1.tar.gz").write_bytes(b"\x1f\x8b")
    (kit / "gpu").mkdir()
    (kit / "gpu" / "torchvision-0.26.0-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"PK")
    (kit / "gpu" / "horovod-0.28.1-cp312-cp312-linux_x86_64.whl").write_bytes(b"PK")
    (kit / "gpu" / "built-for.txt").write_text("python=3.12\ntorch=2.11.0+cu130\n")
    return kit


def dry_run(tmp_path, kit, *extra):
    return subprocess.run([str(SCRIPT), "--dry-run", "--kit", str(kit), "--work", str(tmp_path / "work"),
                           "--out", str(tmp_path / "out"), *extra], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


def test_a_complete_kit_lists_every_phase_and_runs_nothing(tmp_path, kit):
    done = dry_run(tmp_path, kit)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "kit complete" in out
    phases = [line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("phase ")]
    assert phases == ["install", "build", "doctor", "data", "cells", "report"]
    assert f"--find-links {kit}/wheels" in out
    assert f"{kit}/gpu/torchvision-0.26.0-cp312-cp312-manylinux_2_28_x86_64.whl" in out
    # The kit's prebuilt Horovod first, then (the fallback) the sdist build.
    assert out.index(f"{kit}/gpu/horovod-0.28.1-cp312-cp312-linux_x86_64.whl") < out.index("scripts/gpu_horovod.sh")
    assert f"BENCH_HOROVOD_SDIST={kit}/horovod-0.28.1.tar.gz" in out and "scripts/gpu_build_check.py" in out
    assert "-m bench data make-imagenet-sample .gpu-session/imagenet-sample" in out and "--profile imagenet" in out
    # The nvjpeg cells' pre-flight: nvJPEG against Pillow on the sample just made.
    assert out.index("make-imagenet-sample") < out.index(
        "scripts/gpu_loader_check.py --sample .gpu-session/imagenet-sample --device auto") < out.index("phase cells:")
    assert "-m bench doctor" in out
    assert "NCCL_DEBUG=INFO" in out and "-m bench run matrix-gpu.yaml --store" in out
    # A cell failed or timed out in an earlier command is not run again (its timeout is not spent twice).
    # --no-probe: a GPU cell is never probed, and the CPU stand-in of the rehearsal runs what the GPU will
    assert re.search(r"-m bench run matrix-gpu\.yaml --store \S+ --no-probe --skip-failed\n", out), out
    assert "-m bench report" in out
    assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists()


def test_retry_failed_runs_the_cells_that_failed_before(tmp_path, kit, monkeypatch):
    monkeypatch.setenv("GPU_SESSION_RETRY_FAILED", "1")
    done = dry_run(tmp_path, kit)
    assert done.returncode == 0, done.stderr
    assert "-m bench run matrix-gpu.yaml --store" in done.stdout and "--skip-failed" not in done.stdout


@pytest.mark.parametrize("pin", ["pydantic-core==2.50.4", "cloudpickle==3.1.2"])
def test_a_kit_missing_a_wheel_fails_naming_it(tmp_path, kit, pin):
    assert pin in PINS
    name, version = pin.split("==")
    (kit / "wheels" / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").unlink()
    done = dry_run(tmp_path, kit)
    assert done.returncode == 1
    assert f"kit incomplete: missing wheel {pin}" in done.stderr
    assert "phase report:" in done.stdout  # the commands are still listed


def test_a_kit_missing_the_sdist_or_the_gpu_wheels_fails_naming_each(tmp_path, kit):
    (kit / "horovod-0.28.1.tar.gz").unlink()
    for wheel in (kit / "gpu").glob("*.whl"):
        wheel.unlink()
    done = dry_run(tmp_path, kit)
    assert done.returncode == 1
    assert "missing Horovod's sdist" in done.stderr and "missing torchvision's wheel" in done.stderr
    assert "missing the prebuilt Horovod wheel" in done.stderr


def test_the_dry_run_prints_a_time_plan_that_fits_the_loan(tmp_path, kit):
    """The loan is 900 s of device time, the machine's start included: the plan of every phase and cell of
    matrix-gpu.yaml must fit 720 s with the kit's prebuilt Horovod."""
    import re

    out = dry_run(tmp_path, kit).stdout
    plan = out[out.index("time plan for one"):]
    assert "machine start" in plan and "build (the kit's Horovod wheel)" in plan and "data" in plan
    cells = [line for line in plan.splitlines() if line.strip().startswith("cell ")]
    assert len(cells) >= 6
    total = float(re.search(r"total\s+(\d+) s \(limit 720 s\)", plan).group(1))
    assert total <= 720
    parts = [float(m) for m in re.findall(r"^  .*\s(\d+) s$", plan, re.M)]
    assert abs(sum(parts) - total) <= len(parts)  # the total is the sum of what is listed (each rounded)
    # How it splits into 600 s commands of `--phase all --deadline 540`: every cell in exactly one, each command's
    # work within the deadline, and the worst case (a cell cut at the first deadline, rerun) within the 900 s lent.
    split = re.findall(r"^command (\d) \(scripts/gpu_session.sh --phase all --deadline 540\): (\d+) s, (\d+) cells?",
                       plan, re.M)
    assert split and sum(int(n) for _, _, n in split) == len(cells)
    assert all(int(s) <= 540 for _, s, _ in split)
    worst = re.search(r"cut at the deadline: (\d+) s of the 900 lent", plan)
    assert worst is None or int(worst.group(1)) <= 900
    # Without the kit's wheel (another torch there), the sdist build's ~2 minutes come out of the cells: the plan says
    # so, and the cells' budget cuts the last ones (they run most telling first: matrix-gpu.yaml's order).
    fallback = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_time_plan.py"), "--prebuilt", "no"],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert "Horovod from the sdist" in fallback.stdout
    fallback_total = float(re.search(r"total\s+(\d+) s", fallback.stdout).group(1))
    assert fallback_total == total - 15 + 120  # the wheel's install (15 s) swapped for the sdist build (120 s)


def test_a_time_plan_over_its_limit_fails_saying_so():
    over = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_time_plan.py"), "--limit", "100"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert over.returncode == 1 and "over the 100 s limit" in over.stderr


def test_a_transformer_loan_skips_the_build_and_data_and_needs_only_the_wheels(tmp_path, kit):
    # `make device-kit-wheels`: the wheels and requirements.txt, no sdist, no GPU folder.
    import shutil

    shutil.rmtree(kit / "gpu")
    (kit / "horovod-0.28.1.tar.gz").unlink()
    done = dry_run(tmp_path, kit, "--skip", "build,data", "--matrix", "matrix-gpu-transformer.yaml")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "kit complete for this matrix" in out and "phases skipped: build,data" in out
    assert [line for line in out.splitlines() if line.startswith("phase ")] == [
        "phase install:", "phase build: skipped (--skip)", "phase doctor:", "phase data: skipped (--skip)",
        "phase cells:", "phase report:"]
    assert "gpu_horovod.sh" not in out and "torchvision" not in out.split("phase build")[0].replace(
        "no torchvision in the kit", "")
    assert "-m bench run matrix-gpu-transformer.yaml --store" in out
    plan = out[out.index("time plan for one"):]
    rows = [line.split()[0] for line in plan.splitlines() if line.startswith("  ")]
    assert "build" not in rows and "data" not in rows and "install" in rows and "doctor" in rows
    assert sum(line.strip().startswith("cell ") for line in plan.splitlines()) == 8  # one SKU's cells
    # The same kit without --skip is incomplete, naming what the build needs.
    full = dry_run(tmp_path, kit, "--matrix", "matrix-gpu-transformer.yaml")
    assert full.returncode == 1 and "missing Horovod's sdist" in full.stderr


@pytest.mark.parametrize("args,says", [(["--phase", "train"], "--phase must be one of"),
                                       (["--arch", "sm90"], "--arch must be like"),
                                       (["--deadline", "9m"], "--deadline must be a positive number"),
                                       (["--skip", "build,install"], "--skip takes build and data"),
                                       (["--bogus"], "unknown argument")])
def test_bad_options_are_one_line_and_exit_2(tmp_path, kit, args, says):
    done = dry_run(tmp_path, kit, *args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and says in done.stderr
    assert done.stdout == ""


@pytest.mark.slow
def test_a_real_phase_brings_back_one_archive_and_the_store(tmp_path, kit):
    """The doctor phase for real, on this machine's CPU venv (a stand-in venv python that execs it): what comes back
    is one archive of the logs and phase markers, not a tree of files (the device tool returns at most 8)."""
    import sys
    import tarfile

    work, out = tmp_path / "work", tmp_path / "out"
    (work / "venv" / "bin").mkdir(parents=True)
    python = work / "venv" / "bin" / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    done = subprocess.run([str(SCRIPT), "--phase", "doctor", "--kit", str(kit), "--work", str(work), "--out", str(out)],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["gpu-session.tar.gz"]  # no store yet: no cells ran
    with tarfile.open(out / "gpu-session.tar.gz") as archive:
        names = archive.getnames()
        assert {"logs/doctor.log", "done/doctor"} <= set(names), names
        log = archive.extractfile("logs/doctor.log").read().decode()
    assert "-m bench plan matrix-gpu.yaml --all" in log and "== phase doctor done" in log


def stand_in_venv(work):
    """The session's venv python, standing in: it execs this machine's CPU venv."""
    (work / "venv" / "bin").mkdir(parents=True)
    python = work / "venv" / "bin" / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)


def cells_phase(tmp_path, kit, *extra, timeout_s: float = 180):
    work, out = tmp_path / "work", tmp_path / "out"
    if not work.exists():
        stand_in_venv(work)
    return subprocess.run([str(SCRIPT), "--phase", "cells", "--kit", str(kit), "--work", str(work), "--out", str(out),
                           *extra], capture_output=True, text=True, timeout=timeout_s, cwd=ROOT), work


def test_the_deadline_shrinks_the_cells_budget_to_what_is_left(tmp_path, kit):
    """--deadline 400 with the default 540 s budget: the cells get what is left of 400 s since the script started
    (bench run for real: on this CPU machine every GPU cell is planned as skipped, so it ends at once)."""
    done, work = cells_phase(tmp_path, kit, "--deadline", "400")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    log = (work / "logs" / "cells.log").read_text()
    seconds = int(log.split("timeout --signal=INT --kill-after=30 ")[1].split()[0])
    assert 380 <= seconds <= 400, log
    assert (work / "done" / "cells").exists()


def test_a_deadline_already_past_runs_no_cells_and_leaves_the_phase_to_resume(tmp_path, kit):
    done, work = cells_phase(tmp_path, kit, "--deadline", "1")
    assert done.returncode == 124, done.stdout[-2000:] + done.stderr[-2000:]
    log = (work / "logs" / "cells.log").read_text()
    assert "no time left for cells before the 1 s deadline" in log and "bench run" not in log
    assert not (work / "done" / "cells").exists()  # not done: the same command again resumes it


@pytest.mark.launcher
def test_the_cells_phase_runs_the_rehearsal_matrix_for_real(tmp_path, kit):
    """`make gpu-rehearsal`'s cells, small: ci/matrix-gpu-session-rehearsal.yaml through the session's cells phase
    with this machine's CPU venv as the session's python - Horovod's Gloo and mpirun launches with 1 and 2 processes,
    DDP, and the Pillow loader on a JPEG sample (here a small one, where the rehearsal uses the data phase's) - every
    cell measured, and the store and the archive brought back."""
    import sqlite3
    import tarfile

    import yaml

    from bench.execution.datasets import make_imagenet_sample

    sample = tmp_path / "sample"
    make_imagenet_sample(sample, classes=2, per_class=16, seed=1, tfrecord=False)
    matrix = yaml.safe_load((ROOT / "ci" / "matrix-gpu-session-rehearsal.yaml").read_text())
    matrix["backend"]["imagenet_dir"] = str(sample)
    # The compile cell is the rehearsal's (the GPU machine's torch); here it would add a minute of compiling to the
    # suite, and tests/test_step_settings.py compiles with this torch already.
    matrix["include"] = [entry for entry in matrix["include"] if "compile" not in entry]
    (tmp_path / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    # six real cells, unprobed as a GPU's are (the phase passes --no-probe)
    done, work = cells_phase(tmp_path, kit, "--matrix", str(tmp_path / "matrix.yaml"), timeout_s=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with sqlite3.connect(work / "bench.db") as db:
        rows = db.execute("SELECT mpi, gpus, engine, data, status, samples_per_sec FROM records").fetchall()
    cells = {(mpi, gpus, engine, data) for mpi, gpus, engine, data, status, rate in rows if status == "ok" and rate > 0}
    assert cells == {("gloo", 1, "horovod", "synthetic"), ("gloo", 2, "horovod", "synthetic"),
                     ("openmpi", 1, "horovod", "synthetic"), ("openmpi", 2, "horovod", "synthetic"),
                     ("gloo", 1, "horovod", "imagenet"), ("gloo", 2, "native", "synthetic")}, rows
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["bench.db", "gpu-session.tar.gz"]
    with tarfile.open(out / "gpu-session.tar.gz") as archive:
        assert {"bench.db", "logs/cells.log", "done/cells"} <= set(archive.getnames())
    # Then the report phase on that store: the report, and the time plan beside what each cell took (a CPU's tiny
    # cells against a GPU's plan, which counts 22 s for each start: under it).
    report = subprocess.run([str(SCRIPT), "--phase", "report", "--kit", str(kit), "--work", str(work), "--out",
                             str(out), "--matrix", str(tmp_path / "matrix.yaml")], capture_output=True, text=True,
                            timeout=180, cwd=ROOT)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    assert (work / "report" / "index.html").is_file()
    log = (work / "logs" / "report.log").read_text()
    plan_rows = [line for line in log.splitlines() if line.startswith("  cell cpu/")]
    assert len(plan_rows) == len(cells) and all(re.search(r"\d s\s+\d+ s\s+\d+\.\d\d$", r) for r in plan_rows), log
    # 6 cells x 22 s planned; what they took depends on the machine's load (CI has seen 0.6 to 1.13 of the plan), so
    # the check is the arithmetic, not the speed.
    compared = re.search(r"^  compared\s+(\d+) s\s+(\d+) s\s+(\d+\.\d\d)$", log, re.M)
    assert compared and compared.group(1) == "132", log
    # planned and taken are printed to the second and the ratio to 0.01: each rounding moves it by up to half a step
    # (0.004 for either second at this size, 0.005 for the ratio)
    assert float(compared.group(3)) == pytest.approx(int(compared.group(2)) / 132, abs=0.015), log


def test_the_report_phase_with_no_records_says_so_and_passes(tmp_path, kit):
    """On a machine whose GPU no cell names, every cell is skipped and no record is written: the report phase says
    so (bench report would refuse an empty store) and still sets the plan beside the phases that ran."""
    work, out = tmp_path / "work", tmp_path / "out"
    stand_in_venv(work)
    (work / "done").mkdir()
    (work / "done" / "install").write_text("2026-11-29T07:00:00Z in 9 s\n")
    done = subprocess.run([str(SCRIPT), "--phase", "report", "--kit", str(kit), "--work", str(work), "--out",
                           str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "no records in" in done.stdout and "no cell ran here" in done.stdout
    assert not (work / "report").exists()
    assert re.search(r"^  install\s+15 s\s+9 s\s+0\.60$", done.stdout, re.M), done.stdout


def jobs_under(work):
    """The live processes of the jobs a session started: their command lines name their output under work/runs."""
    import psutil

    return [p for p in psutil.process_iter(["cmdline", "status"]) if p.info["status"] != psutil.STATUS_ZOMBIE
            and str(work / "runs") in " ".join(p.info["cmdline"] or [])]


def ok_records(store) -> int:
    import sqlite3

    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        return db.execute("SELECT count(*) FROM records WHERE status = 'ok'").fetchone()[0]


@pytest.mark.launcher
def test_a_command_killed_mid_cells_still_brings_back_the_cells_it_finished(tmp_path, kit):
    """The device tool kills a command at its limit, which may come before the session's deadline (less device time
    left than asked): the cells phase syncs the store and archive while it runs, so what finished comes back. Two
    quick cells, then one that would run for minutes; the whole session is SIGKILLed once the two are in the store.
    The long cell's job outlives the kill (the local backend starts each job in a session of its own): the next
    command's cells phase ends it before anything else."""
    import contextlib
    import os
    import signal
    import sqlite3
    import tarfile
    import time

    import psutil
    import yaml

    matrix = {"name": "killed-mid-cells",
              "workload": {"batch_per_gpu": 4, "image_size": 32, "warmup_steps": 1, "steps": 2, "repeats": 1,
                           "threads": 1, "channels_last": False},
              "axes": {"gpu": ["cpu"], "framework": ["pytorch"], "mpi": ["gloo"], "ib": [False], "gpus": [1],
                       "engine": ["horovod"], "precision": ["fp32"], "batch_per_gpu": [4, 8]},
              # Minutes at most, should anything outlive this test.
              "include": [{"gpu": "cpu", "mpi": "gloo", "gpus": 1, "batch_per_gpu": 2, "steps": 3000}],
              "backend": {"name": "local", "timeout_s": 300}}
    (tmp_path / "matrix.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False))
    work, out = tmp_path / "work", tmp_path / "out"
    stand_in_venv(work)
    args = [str(SCRIPT), "--phase", "cells", "--kit", str(kit), "--work", str(work), "--out", str(out), "--matrix",
            str(tmp_path / "matrix.yaml")]
    session = subprocess.Popen(args, cwd=ROOT, start_new_session=True, env={**os.environ, "GPU_SESSION_SYNC_S": "1"},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        waited, done = time.monotonic() + 150, 0
        while done < 2 and time.monotonic() < waited and session.poll() is None:
            time.sleep(1)
            with contextlib.suppress(sqlite3.Error):  # no store yet, or its schema being made
                done = ok_records(work / "bench.db")
        assert done == 2 and session.poll() is None, "the two quick cells did not finish with the third running"
        time.sleep(4)  # a sync or more since (every second here; every 20 s by default)
        os.killpg(session.pid, signal.SIGKILL)  # the session and bench run: a command cut at its limit
        session.wait(timeout=30)
        # What came back: the two cells, in a whole store and a whole archive, and no half-written file.
        assert sorted(p.name for p in out.iterdir()) == ["bench.db", "gpu-session.tar.gz"]
        assert ok_records(out / "bench.db") == 2
        with tarfile.open(out / "gpu-session.tar.gz") as archive:
            assert {"bench.db", "logs/cells.log"} <= set(archive.getnames())
            archive.extract("bench.db", tmp_path / "unpacked", filter="data")
        assert ok_records(tmp_path / "unpacked" / "bench.db") == 2
        # The next command (here with no time left for cells) first ends the job the cut one left running.
        assert jobs_under(work), "the cut command's job should outlive it"
        again = subprocess.run([*args, "--deadline", "1"], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert again.returncode == 124 and "ending jobs a cut command left running" in again.stdout, again.stdout
        time.sleep(1)
        assert not jobs_under(work)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(session.pid, signal.SIGKILL)
        for proc in jobs_under(work):  # whatever a failed assertion above left running
            with contextlib.suppress(psutil.Error):
                proc.kill()
