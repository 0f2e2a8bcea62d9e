#!/usr/bin/env bash
# Builds (or reuses a cached build of) Horovod 0.28.1 for the venv's torch and TensorFlow, with Gloo and MPI
# controllers, and installs it into that venv.
#
# Why a source build: the only release (0.28.1) predates torch 2.1 and fails with
# "C++17 or later compatible compiler is required" — CMake forces C++14. Patching both CMakeLists to C++17 is the
# fix that compiles *and* links (see shared FACTS.md). TensorFlow >= 2.17 also needs the XLA ops dropped from the
# TF build (the TF wheel lacks the highwayhash/farmhash headers they include).
set -euo pipefail
HOROVOD_VERSION=0.28.1
py=$(cd "$(dirname "${PYTHON:?set PYTHON to the venv python}")" && pwd)/$(basename "$PYTHON")
cache=${BENCH_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/bench}/wheels
say() { printf '[horovod] %s\n' "$*" >&2; }
quiet_pip() { "$py" -m pip "$@" 2> >(grep -v "is ignored: it is neither" >&2); }

build_flags="HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_MXNET=1"

probe='import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import horovod, horovod.torch as hvd, horovod.tensorflow as hvd_tf
ok = horovod.__version__ == sys.argv[1] and all(m.gloo_built() and m.mpi_built() for m in (hvd, hvd_tf))
sys.exit(0 if ok else 1)'
if "$py" -c "$probe" "$HOROVOD_VERSION" 2>/dev/null; then
  say "horovod $HOROVOD_VERSION with Gloo+MPI already importable"
  exit 0
fi

# The cache key: everything the binary depends on.
torch_version=$("$py" -c 'import torch; print(torch.__version__)')
tf_version=$("$py" -c 'import importlib.metadata as m; print(m.version("tensorflow-cpu"))')
py_version=$("$py" -c 'import sys; print(sys.version.split()[0])')
mpi_version=$(mpirun --version 2>&1 | head -1)
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
"$py" -c "$probe" "$HOROVOD_VERSION" 2>/dev/null || {
  say "installed horovod lacks PyTorch/TensorFlow support, Gloo or MPI:"; "$py" -c "$probe" "$HOROVOD_VERSION"; exit 1; }
