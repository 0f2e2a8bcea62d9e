"""scripts/build_horovod.sh hands a build over instead of compiling it again: a venv whose key (Python ABI, torch,
TensorFlow, MPI, g++, flags) matches a build in BENCH_HOROVOD_WHEEL_SEED installs that wheel. This is how the podman
image builds reuse the host's Horovod (bench images build mounts the host's cache as the seed)."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from bench.images.build import host_wheel_cache

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "build_horovod.sh"
MAIN_PY = ROOT / ".venv" / "bin" / "python"

pytestmark = pytest.mark.slow


def _side_venv(tmp_path: Path) -> Path:
    """A venv that sees the main venv's packages (torch, TensorFlow) through a .pth line but has no Horovod of its
    own — the way scripts/install.sh makes the MPICH-ABI venv."""
    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "_bench_main_venv.pth").write_text(f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})\n")
    # pip comes from the main venv's packages (the .pth), which is all the script's pip calls need.
    return venv / "bin" / "python"


def _run(python: Path, cache: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": str(python), "BENCH_MPI": "openmpi", "BENCH_CACHE_DIR": str(cache), **extra}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)


def test_a_build_with_the_same_key_is_installed_from_the_seed_not_compiled(tmp_path):
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip("needs the main venv (make install-test), whose packages the side venv borrows")
    python = _side_venv(tmp_path)
    cache = tmp_path / "cache"
    key_dir = Path(_run(python, cache, BENCH_HOROVOD_PRINT_KEY="1").stdout.strip())
    # The key is the venv's build, not the venv's path: the main venv's build has the same one.
    main_key = _run(MAIN_PY, cache, BENCH_HOROVOD_PRINT_KEY="1").stdout.strip()
    assert key_dir.name == Path(main_key).name and key_dir.parent == cache / "wheels"
    seed = host_wheel_cache()
    if not list((seed / key_dir.name).glob("horovod-*.whl")):
        pytest.skip(f"no host build under this key in {seed} (a fresh `make install` makes one; this checkout's venv "
                    "predates the key)")
    done = _run(python, cache, BENCH_HOROVOD_WHEEL_SEED=str(seed))
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"reusing the build of the same key from {seed / key_dir.name}" in done.stderr
    assert "building horovod" not in done.stderr
    assert list(key_dir.glob("horovod-*.whl")), "the seeded wheel is kept in the venv's own cache"
    own = subprocess.run([str(python), "-c", "import horovod, horovod.torch as hvd, sys; "
                          "print(horovod.__file__, hvd.mpi_built(), hvd.gloo_built())"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert own[0].startswith(str(tmp_path)) and own[1:] == ["True", "True"]


def test_without_a_seed_the_key_is_printed_and_nothing_is_built(tmp_path):
    """BENCH_HOROVOD_PRINT_KEY prints the folder and stops, even where Horovod is already installed (the main venv)."""
    out = _run(MAIN_PY, tmp_path / "cache", BENCH_HOROVOD_PRINT_KEY="1")
    assert out.returncode == 0 and out.stdout.strip().startswith(str(tmp_path / "cache" / "wheels" / "horovod-0.28.1-"))
    assert not (tmp_path / "cache" / "wheels").exists()
