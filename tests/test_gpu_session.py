"""scripts/gpu_session.sh's dry run, as it runs on a machine with no GPU: a complete kit lists every phase's commands
and exits 0 having run and written nothing; a kit missing a wheel exits non-zero naming it; bad options are one
line and exit 2."""
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "gpu_session.sh"
PINS = [line.split("#")[0].strip() for line in (ROOT / "scripts" / "device_kit_requirements.txt").read_text().splitlines()]
PINS = [p for p in PINS if p]


@pytest.fixture
def kit(tmp_path):
    """A kit with every file `make device-kit` puts there (small stand-ins: the dry run checks presence, not content)."""
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
    assert "-m bench doctor" in out
    assert "NCCL_DEBUG=INFO" in out and "-m bench run matrix-gpu.yaml --store" in out
    assert "-m bench report" in out
    assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists()


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
    parts = [float(m) for m in re.findall(r"\s(\d+) s$", plan, re.M)]
    assert abs(sum(parts) - total) <= len(parts)  # the total is the sum of what is listed (each rounded)
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


@pytest.mark.parametrize("args,says", [(["--phase", "train"], "--phase must be one of"),
                                       (["--arch", "sm90"], "--arch must be like"),
                                       (["--bogus"], "unknown argument")])
def test_bad_options_are_one_line_and_exit_2(tmp_path, kit, args, says):
    done = dry_run(tmp_path, kit, *args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and says in done.stderr
    assert done.stdout == ""


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
