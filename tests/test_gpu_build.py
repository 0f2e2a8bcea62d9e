"""The GPU build, checked where CUDA's compiler is (no GPU needed): Horovod's CUDA kernels compile with this nvcc for
the architectures scripts/gpu_build.sh asks (sm_80, sm_90), with the flags Horovod's own build computes; and, where
`make gpu-build` has made .venv-gpu, its Horovod has NCCL built in and links the NCCL and CUDA runtime it was built
against (scripts/gpu_build_check.py)."""
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.gpu_build

HOROVOD = "horovod-0.28.1"
ARCHS = (80, 90)  # scripts/gpu_build.sh's default BENCH_CUDA_CC_LIST
EM_CUDA = 190  # ELF e_machine of a CUDA cubin


def cuda_home() -> Path | None:
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").exists():
            return Path(home).resolve()
    nvcc = shutil.which("nvcc")
    return Path(nvcc).resolve().parent.parent if nvcc else None


CUDA = cuda_home()
needs_nvcc = pytest.mark.skipif(CUDA is None, reason="no nvcc (CUDA toolkit) on this machine: the GPU build cannot "
                                                     "be checked here")


def horovod_sdist() -> Path:
    """The sdist scripts/build_horovod.sh caches (or the device kit's); downloaded into that cache when neither."""
    cache = Path(os.environ.get("BENCH_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                 / "bench") / "wheels"
    for candidate in (cache / f"{HOROVOD}.tar.gz", ROOT / "device-kit" / f"{HOROVOD}.tar.gz"):
        if candidate.exists():
            return candidate
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    "horovod==0.28.1", "-d", str(cache)], check=True, capture_output=True, timeout=300)
    return cache / f"{HOROVOD}.tar.gz"


def cubin_archs(blob: bytes) -> list[int]:
    """The SM of every CUDA cubin embedded in an object file's fatbinary (ELF e_flags bits 8-15 since CUDA 12)."""
    archs, at = [], blob.find(b"\x7fELF", 1)
    while at >= 0:
        if struct.unpack_from("<H", blob, at + 18)[0] == EM_CUDA:
            archs.append((struct.unpack_from("<I", blob, at + 48)[0] >> 8) & 0xFF)
        at = blob.find(b"\x7fELF", at + 4)
    return sorted(archs)


@needs_nvcc
def test_horovods_cuda_kernels_compile_for_sm80_and_sm90(tmp_path):
    with tarfile.open(horovod_sdist()) as tar:
        tar.extractall(tmp_path, members=[m for m in tar.getmembers()
                                          if m.name.startswith((f"{HOROVOD}/horovod/common/", f"{HOROVOD}/cmake/"))],
                       filter="data")
    src = tmp_path / HOROVOD
    env = {**os.environ, "HOROVOD_CUDA_HOME": str(CUDA), "HOROVOD_BUILD_CUDA_CC_LIST": ",".join(map(str, ARCHS)),
           "PATH": f"{CUDA / 'bin'}:{os.environ['PATH']}"}
    # The flags Horovod's CMake passes to nvcc (its cmake/build_utils.py), for our architecture list.
    flags = subprocess.run([sys.executable, "-c",
                            "import build_utils; print('\\n'.join(build_utils.get_nvcc_flags()))"],
                           cwd=src / "cmake", env=env, capture_output=True, text=True, check=True).stdout.split("\n")
    # code=\"sm_90,compute_90\" is quoted for CMake's shell; as one argv item nvcc takes the list in brackets
    flags = [re.sub(r'code="([^"]*)"', r"code=[\1]", f.replace('\\"', '"')) for f in flags if f]
    kernels = src / "horovod" / "common" / "ops" / "cuda"
    obj = tmp_path / "cuda_kernels.o"
    done = subprocess.run([str(CUDA / "bin" / "nvcc"), "-c", "-std=c++11", *flags, "-D_GLIBCXX_USE_CXX11_ABI=1",
                           "-I", str(kernels), str(kernels / "cuda_kernels.cu"), "-o", str(obj)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert cubin_archs(obj.read_bytes()) == list(ARCHS)


@needs_nvcc
def test_cuda_13_has_no_machine_code_below_turing():
    """Why the architecture list is explicit (docs/gpu.md): V100 (sm_70) and K80 (sm_37) need an older toolkit."""
    codes = subprocess.run([str(CUDA / "bin" / "nvcc"), "--list-gpu-code"], capture_output=True, text=True,
                           check=True).stdout.split()
    release = subprocess.run([str(CUDA / "bin" / "nvcc"), "--version"], capture_output=True, text=True).stdout
    assert {"sm_80", "sm_90"} <= set(codes)
    if "release 13." in release:
        assert min(int(c.removeprefix("sm_")) for c in codes) == 75


GPU_VENV = ROOT / ".venv-gpu" / "bin" / "python"


@needs_nvcc
@pytest.mark.skipif(not GPU_VENV.exists(), reason="no .venv-gpu: `make gpu-build` makes it (not part of make test)")
def test_the_gpu_venvs_horovod_has_nccl_and_links_the_wheels_nccl_and_cudart():
    done = subprocess.run([str(GPU_VENV), str(ROOT / "scripts" / "gpu_build_check.py")], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "ok   hvd.nccl_built() = True" in done.stdout
