#!/usr/bin/env bash
# Builds (or reuses a cached build of) Horovod 0.28.1 for the venv's torch and TensorFlow, with Gloo and MPI
# controllers, and installs it into that venv.
#
# BENCH_MPI=openmpi (default) links Open MPI (libmpi.so.40, the mpicxx on PATH); BENCH_MPI=mpich links the MPICH ABI
# (libmpi.so.12) through the mpicxx that comes first on PATH — the MPICH wheel's in the MPICH-ABI venv — so Intel MPI's
# libmpi.so.12 can stand in at run time. HOROVOD_GPU_OPERATIONS (e.g. NCCL) passes through for GPU images.
#
# Why a source build: the only release (0.28.1) predates torch 2.1 and fails with
# "C++17 or later compatible compiler is required" — CMake forces C++14. Patching both CMakeLists to C++17 is the
# fix that compiles *and* links (patching only horovod/torch/CMakeLists.txt compiles, then fails to link with
# "multiple definition of gloo::rendezvous::Store::kDefaultTimeout"). TensorFlow >= 2.17 also needs the XLA ops
# dropped from the TF build (the TF wheel lacks the highwayhash/farmhash headers they include).
set -euo pipefail
HOROVOD_VERSION=0.28.1
py=$(cd "$(dirname "${PYTHON:?set PYTHON to the venv python}")" && pwd)/$(basename "$PYTHON")
cache=${BENCH_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/bench}/wheels
say() { printf '[horovod] %s\n' "$*" >&2; }
quiet_pip() { "$py" -m pip "$@" 2> >(grep -v "is ignored: it is neither" >&2); }

mpi=${BENCH_MPI:-openmpi}
case "$mpi" in
  openmpi) soname=libmpi.so.40 ;;
  mpich) soname=libmpi.so.12 ;;
  *) say "BENCH_MPI must be openmpi or mpich, got '$mpi'"; exit 2 ;;
esac
build_flags="HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_MXNET=1"
[ -n "${HOROVOD_GPU_OPERATIONS:-}" ] && build_flags="$build_flags HOROVOD_GPU_OPERATIONS=$HOROVOD_GPU_OPERATIONS"

# Importable is not enough: it must be this venv's own copy (an MPICH-ABI venv also sees the main venv's packages)
# and its MPI library must be the ABI asked for.
probe='import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import horovod, horovod.torch as hvd, horovod.tensorflow as hvd_tf
ok = horovod.__version__ == sys.argv[1] and all(m.gloo_built() and m.mpi_built() for m in (hvd, hvd_tf))
own = os.path.realpath(horovod.__file__).startswith(os.path.realpath(sys.prefix) + os.sep)
maps = open("/proc/self/maps").read()
sys.exit(0 if ok and own and sys.argv[2] in maps else 1)'
if "$py" -c "$probe" "$HOROVOD_VERSION" "$soname" 2>/dev/null; then
  say "horovod $HOROVOD_VERSION with Gloo+MPI ($mpi) already importable"
  exit 0
fi

# The cache key: everything the binary depends on.
torch_version=$("$py" -c 'import torch; print(torch.__version__)')
tf_version=$("$py" -c 'import importlib.metadata as m
for dist in ("tensorflow-cpu", "tensorflow"):  # GPU images carry the tensorflow distribution
    try:
        print(dist, m.version(dist)); break
    except m.PackageNotFoundError:
        pass')
py_version=$("$py" -c 'import sys; print(sys.version.split()[0])')
# The MPI identity, without install paths: the MPICH-ABI wheel is found at run time through LD_LIBRARY_PATH (set by
# bench for those cells), so one build serves every checkout.
if [ "$mpi" = mpich ]; then mpi_version="mpich $(mpichversion 2>&1 | head -1)"
else mpi_version="openmpi $(mpicxx -show 2>&1 | head -1) $(mpirun --version 2>&1 | head -1)"
fi
cxx_version=$(g++ --version | head -1)
key=$(printf '%s\n' "$HOROVOD_VERSION" "$torch_version" "$tf_version" "$py_version" "$mpi_version" "$cxx_version" "$build_flags" \
      "$(sha256sum "$0" | cut -d' ' -f1)" | sha256sum | cut -c1-16)
dest="$cache/horovod-$HOROVOD_VERSION-$key"

if ! ls "$dest"/horovod-*.whl >/dev/null 2>&1; then
  say "building horovod $HOROVOD_VERSION (torch $torch_version, tensorflow $tf_version, $mpi_version); takes ~4-8 min"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  quiet_pip download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$work"
  tar -xzf "$work"/horovod-"$HOROVOD_VERSION".tar.gz -C "$work"
  src="$work/horovod-$HOROVOD_VERSION"
  sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
  grep -q 'CMAKE_CXX_STANDARD 17' "$src/horovod/torch/CMakeLists.txt" || { say "C++17 patch did not apply"; exit 1; }
  sed -i '/xla_mpi_ops.cc/d' "$src/horovod/tensorflow/CMakeLists.txt"
  mkdir -p "$dest.partial"
  (cd "$src" && env $build_flags MAKEFLAGS=-j"$(nproc)" \
      "$py" -m pip wheel -q --no-build-isolation --no-deps -w "$dest.partial" . ) >"$work/build.log" 2>&1 || {
    say "build failed; last lines of the log:"; tail -30 "$work/build.log" >&2; exit 1; }
  rm -rf "$dest"; mv "$dest.partial" "$dest"
fi
say "installing $(ls "$dest"/horovod-*.whl)"
quiet_pip install -q --no-deps --force-reinstall "$dest"/horovod-*.whl
"$py" -c "$probe" "$HOROVOD_VERSION" "$soname" 2>/dev/null || {
  say "installed horovod lacks PyTorch/TensorFlow support, Gloo, or MPI linked to $soname:"
  "$py" -c "$probe" "$HOROVOD_VERSION" "$soname"; exit 1; }
