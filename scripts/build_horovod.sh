#!/usr/bin/env bash
# Builds (or reuses a cached build of) Horovod 0.28.1 for the venv's torch and TensorFlow, with Gloo and MPI
# controllers, and installs it into that venv.
#
# BENCH_HOROVOD_FRAMEWORKS="pytorch tensorflow" (default) or "pytorch": which bindings are built and probed (the GPU
# venv, scripts/gpu_build.sh, has no TensorFlow). With HOROVOD_GPU_OPERATIONS=NCCL the cache key also takes the nvcc
# release, HOROVOD_BUILD_CUDA_CC_LIST and the NCCL header's version, and the probe demands nccl_built(); the caller
# points HOROVOD_CUDA_HOME and HOROVOD_NCCL_HOME/_INCLUDE/_LIB at what to build against.
#
# BENCH_MPI=openmpi (default) links Open MPI (libmpi.so.40, the mpicxx on PATH); BENCH_MPI=mpich links the MPICH ABI
# (libmpi.so.12) through the mpicxx that comes first on PATH — the MPICH wheel's in the MPICH-ABI venv — so Intel MPI's
# libmpi.so.12 can stand in at run time; BENCH_MPI=none builds Gloo alone (a machine with no MPI compiler, e.g. the
# offline GPU machine of scripts/gpu_session.sh). HOROVOD_GPU_OPERATIONS (e.g. NCCL) passes through for GPU images.
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

# ccache in front of the compiler, where it is installed and BENCH_CCACHE is not 0: the environment (NAME=value, a
# line each) for a CMake build under the folder $1. The MPICH-ABI build after the Open MPI one (and a build after a
# pin change) then compiles again only what differs: ccache's preprocessor mode hashes the preprocessed source, not
# the -I paths, so a file that does not include mpi.h is one object for both ABIs; CCACHE_BASEDIR makes the build's
# temporary folder relative and CCACHE_NOHASHDIR keeps it out of the hash (a -g build would carry it). Measured on a 2-core VM
# (docs/install.md): the MPICH-ABI build 103 s after the Open MPI one against 138 s without ccache; the first build's
# misses cost nothing measurable (224 s with ccache, 241 s without).
ccache_env() {
  [ "${BENCH_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1 || return 0
  printf '%s\n' CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache "CCACHE_BASEDIR=$1" \
    CCACHE_NOHASHDIR=1 "CCACHE_DIR=${CCACHE_DIR:-$(dirname "$cache")/ccache}"
}
# BENCH_HOROVOD_PRINT_CCACHE=DIR: print that environment for a build under DIR, and stop (tests).
[ -n "${BENCH_HOROVOD_PRINT_CCACHE:-}" ] && { ccache_env "$BENCH_HOROVOD_PRINT_CCACHE"; exit 0; }

mpi=${BENCH_MPI:-openmpi}
case "$mpi" in
  openmpi) soname=libmpi.so.40 ;;
  mpich) soname=libmpi.so.12 ;;
  none) soname="" ;;
  *) say "BENCH_MPI must be openmpi, mpich or none, got '$mpi'"; exit 2 ;;
esac
frameworks=${BENCH_HOROVOD_FRAMEWORKS:-pytorch tensorflow}
case "$frameworks" in
  "pytorch tensorflow") tf_flag=HOROVOD_WITH_TENSORFLOW=1 ;;
  pytorch) tf_flag=HOROVOD_WITHOUT_TENSORFLOW=1 ;;
  *) say "BENCH_HOROVOD_FRAMEWORKS must be 'pytorch tensorflow' or 'pytorch', got '$frameworks'"; exit 2 ;;
esac
mpi_flag=$([ "$mpi" = none ] && echo HOROVOD_WITHOUT_MPI=1 || echo HOROVOD_WITH_MPI=1)
build_flags="HOROVOD_WITH_PYTORCH=1 $tf_flag HOROVOD_WITH_GLOO=1 $mpi_flag HOROVOD_WITHOUT_MXNET=1"
[ -n "${HOROVOD_GPU_OPERATIONS:-}" ] && build_flags="$build_flags HOROVOD_GPU_OPERATIONS=$HOROVOD_GPU_OPERATIONS"

# Importable is not enough: it must be this venv's own copy (an MPICH-ABI venv also sees the main venv's packages)
# and its MPI library must be the ABI asked for.
probe='import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import importlib, horovod
bindings = [importlib.import_module("horovod.torch" if f == "pytorch" else "horovod.tensorflow")
            for f in sys.argv[3].split()]
mpi = bool(sys.argv[2])  # the soname of the MPI asked for; empty: Gloo alone
ok = horovod.__version__ == sys.argv[1] and all(m.gloo_built() and m.mpi_built() == mpi for m in bindings)
ok = ok and (sys.argv[4] != "NCCL" or all(m.nccl_built() for m in bindings))
own = os.path.realpath(horovod.__file__).startswith(os.path.realpath(sys.prefix) + os.sep)
maps = open("/proc/self/maps").read()
sys.exit(0 if ok and own and sys.argv[2] in maps else 1)'
gpu_ops=${HOROVOD_GPU_OPERATIONS:-}
# What a passing probe rests on, read without importing anything heavy (~0.1 s where the probe's imports of torch,
# TensorFlow and Horovod take ~6 s): what is asked, the run-time library path, the versions of Horovod and of what it
# was built against, and each Horovod extension's path, size and time. A set-up that finds the same key in the venv's
# stamp skips the probe; any change (a reinstall, a new torch pin, another ABI asked for) probes again.
proved_key='import importlib.metadata as m, importlib.util, os, sys
print(sys.argv[1:], os.environ.get("LD_LIBRARY_PATH", ""))
for dist in ("horovod", "torch", "tensorflow-cpu", "tensorflow"):
    try:
        print(dist, m.version(dist))
    except m.PackageNotFoundError:
        pass
spec = importlib.util.find_spec("horovod")
root = os.path.dirname(spec.origin) if spec and spec.origin else ""
for here, _, files in sorted(os.walk(root)):
    for name in sorted(f for f in files if f.endswith(".so")):
        st = os.stat(os.path.join(here, name))
        print(os.path.join(here, name), st.st_size, st.st_mtime_ns)'
proved_stamp="$(dirname "$(dirname "$py")")/.bench-horovod-proved-$mpi"
proved() { "$py" -c "$proved_key" "$HOROVOD_VERSION" "$soname" "$frameworks" "$gpu_ops" 2>/dev/null | sha256sum | cut -c1-16; }
# BENCH_HOROVOD_PRINT_KEY=1: print the cache folder this venv's build belongs in, and stop (tests, image builds).
if [ -z "${BENCH_HOROVOD_PRINT_KEY:-}" ] && [ "$(cat "$proved_stamp" 2>/dev/null)" = "$(proved)" ]; then
  say "horovod $HOROVOD_VERSION with Gloo+MPI ($mpi)${gpu_ops:+ and $gpu_ops} already importable (as last proved)"
  exit 0
fi
if [ -z "${BENCH_HOROVOD_PRINT_KEY:-}" ] && "$py" -c "$probe" "$HOROVOD_VERSION" "$soname" "$frameworks" "$gpu_ops" 2>/dev/null; then
  say "horovod $HOROVOD_VERSION with Gloo+MPI ($mpi)${gpu_ops:+ and $gpu_ops} already importable"
  proved > "$proved_stamp"
  exit 0
fi
rm -f "$proved_stamp"

# The cache key: everything the binary depends on.
torch_version=$("$py" -c 'import torch; print(torch.__version__)')
tf_version=$([ "$frameworks" = pytorch ] && echo none || "$py" -c 'import importlib.metadata as m
for dist in ("tensorflow-cpu", "tensorflow"):  # GPU images carry the tensorflow distribution
    try:
        print(dist, m.version(dist)); break
    except m.PackageNotFoundError:
        pass')
# The interpreter's extension ABI (e.g. cpython-311-x86_64-linux-gnu), not its patch release: CPython keeps the C ABI
# across a minor release ("code compiled for Python 3.10.0 will work on 3.10.8 and vice versa": the C API docs,
# "C API Stability"), so one build serves every 3.11 built the same way.
# The host venv's Python (3.11.7) and the images' Debian 3.11.2 thus share a key, and `bench images build` can hand the
# host's build to an image (BENCH_HOROVOD_WHEEL_SEED, below) instead of compiling it again.
py_abi=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("SOABI"))')
# The MPI identity, without install paths: the MPICH-ABI wheel is found at run time through LD_LIBRARY_PATH (set by
# bench for those cells), so one build serves every checkout.
if [ "$mpi" = mpich ]; then mpi_version="mpich $(mpichversion 2>&1 | head -1)"
elif [ "$mpi" = none ]; then mpi_version=none
else mpi_version="openmpi $(mpicxx -show 2>&1 | head -1) $(mpirun --version 2>&1 | head -1)"
fi
cxx_version=$(g++ --version | head -1)
# A GPU build also depends on the CUDA compiler, the architectures it emits code for and the NCCL it links; a CPU
# build's key has no such lines.
gpu_key=()
if [ -n "$gpu_ops" ]; then
  nvcc=${HOROVOD_CUDA_HOME:?a GPU build needs HOROVOD_CUDA_HOME}/bin/nvcc
  nccl_h=${HOROVOD_NCCL_INCLUDE:-${HOROVOD_NCCL_HOME:?a GPU build needs HOROVOD_NCCL_HOME}/include}/nccl.h
  gpu_key=("cuda $("$nvcc" --version | grep -o 'release [0-9.]*')" "arch ${HOROVOD_BUILD_CUDA_CC_LIST:?a GPU build needs HOROVOD_BUILD_CUDA_CC_LIST}"
           "nccl $(grep -E '^#define NCCL_(MAJOR|MINOR|PATCH) ' "$nccl_h" | awk '{print $3}' | paste -sd.)")
fi
key=$(printf '%s\n' "$HOROVOD_VERSION" "$torch_version" "$tf_version" "$py_abi" "$mpi_version" "$cxx_version" "$build_flags" \
      "${gpu_key[@]}" "$(sha256sum "$0" | cut -d' ' -f1)" | sha256sum | cut -c1-16)
dest="$cache/horovod-$HOROVOD_VERSION-$key"
[ -n "${BENCH_HOROVOD_PRINT_KEY:-}" ] && { echo "$dest"; exit 0; }

# BENCH_HOROVOD_WHEEL_SEED: a read-only folder laid out like the cache (another machine's, or the host's, which
# `bench images build` mounts into podman builds): a build under the same key is copied from there, not compiled.
seed=${BENCH_HOROVOD_WHEEL_SEED:-}
seeded="$seed/$(basename "$dest")"
if ! ls "$dest"/horovod-*.whl >/dev/null 2>&1 && [ -n "$seed" ] && ls "$seeded"/horovod-*.whl >/dev/null 2>&1; then
  say "reusing the build of the same key from $seeded"
  rm -rf "$dest.partial"; mkdir -p "$dest.partial"
  cp "$seeded"/horovod-*.whl "$dest.partial"/
  rm -rf "$dest"; mv "$dest.partial" "$dest"
fi
if ! ls "$dest"/horovod-*.whl >/dev/null 2>&1; then
  say "building horovod $HOROVOD_VERSION (torch $torch_version, tensorflow $tf_version, $mpi_version${gpu_key:+, ${gpu_key[*]}}); takes ~4-8 min"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # The sdist: BENCH_HOROVOD_SDIST names one (a machine with no package index), else it is downloaded once.
  sdist=${BENCH_HOROVOD_SDIST:-$cache/horovod-$HOROVOD_VERSION.tar.gz}
  if [ ! -f "$sdist" ]; then
    mkdir -p "$cache"
    quiet_pip download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$work"
    mv "$work/horovod-$HOROVOD_VERSION.tar.gz" "$sdist"
  fi
  tar -xzf "$sdist" -C "$work"
  src="$work/horovod-$HOROVOD_VERSION"
  sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
  grep -q 'CMAKE_CXX_STANDARD 17' "$src/horovod/torch/CMakeLists.txt" || { say "C++17 patch did not apply"; exit 1; }
  sed -i '/xla_mpi_ops.cc/d' "$src/horovod/tensorflow/CMakeLists.txt"
  # Release instead of setup.py's RelWithDebInfo: the same flags less -g (-O3 -DNDEBUG either way: Horovod's CMakeLists
  # raises RelWithDebInfo's -O2 to -O3), and GCC's -g does not change the code it generates; the debug information of
  # the torch and TensorFlow headers is what made the build slow (docs/install.md has the times).
  sed -i "s/else 'RelWithDebInfo'/else 'Release'/" "$src/setup.py"
  grep -q "else 'Release'" "$src/setup.py" || { say "Release build patch did not apply"; exit 1; }
  mkdir -p "$dest.partial"
  mapfile -t launcher < <(ccache_env "$work")
  (cd "$src" && env $build_flags "${launcher[@]}" MAKEFLAGS=-j"$(nproc)" \
      "$py" -m pip wheel -q --no-build-isolation --no-deps -w "$dest.partial" . ) >"$work/build.log" 2>&1 || {
    [ -n "${BENCH_HOROVOD_BUILD_LOG:-}" ] && cp "$work/build.log" "$BENCH_HOROVOD_BUILD_LOG"
    say "build failed; last lines of the log:"; tail -30 "$work/build.log" >&2; exit 1; }
  # BENCH_HOROVOD_BUILD_LOG: where to keep the compiler's log (scripts/gpu_session.sh keeps it with its results).
  [ -n "${BENCH_HOROVOD_BUILD_LOG:-}" ] && cp "$work/build.log" "$BENCH_HOROVOD_BUILD_LOG"
  rm -rf "$dest"; mv "$dest.partial" "$dest"
fi
say "installing $(ls "$dest"/horovod-*.whl)"
quiet_pip install -q --no-deps --force-reinstall "$dest"/horovod-*.whl
"$py" -c "$probe" "$HOROVOD_VERSION" "$soname" "$frameworks" "$gpu_ops" 2>/dev/null || {
  say "installed horovod lacks support for $frameworks, Gloo, ${gpu_ops:+$gpu_ops, }or MPI linked to $soname:"
  "$py" -c "$probe" "$HOROVOD_VERSION" "$soname" "$frameworks" "$gpu_ops"; exit 1; }
proved > "$proved_stamp"
