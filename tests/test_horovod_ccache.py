"""scripts/build_horovod.sh puts ccache in front of the compiler (ccache_env): the environment it prints, used on a
small CMake project built twice in two temporary folders against two different MPI include folders, as the Open MPI
and MPICH-ABI builds are. A source that does not include mpi.h comes from the cache the second time; one that does
is compiled again, because its preprocessed text differs."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "build_horovod.sh"

pytestmark = pytest.mark.slow

CMAKE = """cmake_minimum_required(VERSION 3.17)
project(side CXX)
add_library(side SHARED plain.cc uses_mpi.cc)
target_include_directories(side PRIVATE ${MPI_DIR})
"""


def _ccache_env(work: Path, cache: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHON": str(ROOT / ".venv" / "bin" / "python"), "BENCH_CACHE_DIR": str(cache),
           "BENCH_HOROVOD_PRINT_CCACHE": str(work), **extra}
    env.pop("CCACHE_DIR", None)
    out = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=True)
    return dict(line.split("=", 1) for line in out.stdout.splitlines())


def _build(work: Path, mpi_h: str, cache: Path) -> tuple[dict[str, str], dict[str, int]]:
    """The project under `work` with its own mpi.h: the ccache environment it was built with, and ccache's counts for
    the build alone (CMake's own compiler checks left out)."""
    src, mpi = work / "src", work / "mpi-include"
    src.mkdir(parents=True)
    mpi.mkdir()
    (src / "CMakeLists.txt").write_text(CMAKE)
    (src / "plain.cc").write_text("int plain(int x) { return 2 * x; }\n")
    (src / "uses_mpi.cc").write_text('#include "mpi.h"\nint uses_mpi() { return MPI_FLAVOUR; }\n')
    (mpi / "mpi.h").write_text(f"#define MPI_FLAVOUR {mpi_h}\n")
    launch = _ccache_env(work, cache)
    env = {**os.environ, **launch}
    subprocess.run(["cmake", "-S", str(src), "-B", str(work / "build"), f"-DMPI_DIR={mpi}"], env=env, check=True,
                   capture_output=True, timeout=120)
    subprocess.run(["ccache", "--zero-stats"], env=env, check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(work / "build")], env=env, check=True, capture_output=True, timeout=120)
    return launch, _stats(env)


def _stats(env: dict[str, str]) -> dict[str, int]:
    out = subprocess.run(["ccache", "--print-stats"], env=env, capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (re.split(r"\s+", line, maxsplit=1) for line in out.splitlines()) if v.isdigit()}


def test_the_second_abis_build_takes_what_does_not_include_mpi_h_from_the_cache(tmp_path):
    assert shutil.which("ccache"), "scripts/install.sh installs ccache"
    cache = tmp_path / "cache"
    launch, first = _build(tmp_path / "openmpi", "1", cache)
    assert launch["CMAKE_CXX_COMPILER_LAUNCHER"] == "ccache"
    assert launch["CCACHE_BASEDIR"] == str(tmp_path / "openmpi") and launch["CCACHE_DIR"] == str(cache / "ccache")
    hits = lambda s: s.get("direct_cache_hit", 0) + s.get("preprocessed_cache_hit", 0)  # noqa: E731
    assert (hits(first), first.get("cache_miss")) == (0, 2), first  # both compiled: the cache was empty
    _, second = _build(tmp_path / "mpich", "2", cache)
    assert (hits(second), second.get("cache_miss")) == (1, 1), second  # plain.cc reused, uses_mpi.cc compiled


def test_bench_ccache_0_leaves_the_compiler_alone(tmp_path):
    assert _ccache_env(tmp_path, tmp_path / "cache", BENCH_CCACHE="0") == {}
