#!/usr/bin/env bash
# Horovod 0.28.1 with NCCL for the torch of the python in $PYTHON (a venv's), then the no-GPU checks of
# scripts/gpu_build_check.py. Shared by `make gpu-build` (scripts/gpu_build.sh, this machine) and the build phase of
# scripts/gpu_session.sh (an offline GPU machine).
#
# NCCL is the nvidia-nccl-cu13 wheel next to torch (the one torch loads); CMake's find_library wants libnccl.so and
# the wheel ships only libnccl.so.2, so a folder of links in the venv stands in (the binary records the soname,
# libnccl.so.2). Linked shared (HOROVOD_NCCL_LINK=SHARED): Horovod calls the NCCL torch loaded, not a second copy.
#
# Environment: PYTHON (required), CUDA_HOME (default /usr/local/cuda, else the toolkit of the nvcc on PATH),
# BENCH_CUDA_CC_LIST (default 80,90), BENCH_MPI (openmpi, mpich or none), and what scripts/build_horovod.sh takes
# (BENCH_CACHE_DIR, BENCH_HOROVOD_SDIST, BENCH_HOROVOD_BUILD_LOG).
#
# Architectures: CUDA 13 emits no code below sm_75 (Turing). 80,90 covers A100 (sm_80) and H100/H200 (sm_90; the
# highest listed also gets PTX, which later GPUs JIT-compile). V100 (sm_70) needs CUDA <= 12.x, K80 (sm_37) CUDA <= 11.8.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:?set PYTHON to the venv python}
cc_list=${BENCH_CUDA_CC_LIST:-80,90}
say() { printf '[gpu-horovod] %s\n' "$*" >&2; }

# The toolkit folder (bin/nvcc, include/, lib64/ with cudart), not just an nvcc: /usr/local/bin/nvcc may be a wrapper.
if [ -z "${CUDA_HOME:-}" ]; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then CUDA_HOME=$(readlink -f /usr/local/cuda)
  elif nvcc_path=$(command -v nvcc); then CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$nvcc_path")")")
  fi
fi
[ -x "${CUDA_HOME:-/nonexistent}/bin/nvcc" ] && [ -f "$CUDA_HOME/include/cuda_runtime.h" ] || {
  say "no CUDA toolkit found (CUDA_HOME='${CUDA_HOME:-}'): set CUDA_HOME to one with bin/nvcc and include/"; exit 2; }
[[ "$cc_list" =~ ^[0-9]+(,[0-9]+)*$ ]] || { say "BENCH_CUDA_CC_LIST must be like 80,90, got '$cc_list'"; exit 2; }
cuda_release=$("$CUDA_HOME/bin/nvcc" --version | grep -o 'release [0-9.]*' | cut -d' ' -f2)

# torch's CUDA and this nvcc must agree on the major release (Horovod's kernels and torch share a process).
torch_cuda=$("$py" -c 'import torch; print(torch.version.cuda or "")')
[ -n "$torch_cuda" ] || { say "$py's torch is a CPU build: Horovod's NCCL build needs a CUDA torch"; exit 1; }
[ "${torch_cuda%%.*}" = "${cuda_release%%.*}" ] || {
  say "torch is built for CUDA $torch_cuda but nvcc under $CUDA_HOME is $cuda_release: use a CUDA ${torch_cuda%%.*} toolkit"; exit 1; }

nccl_dir=$("$py" -c 'import importlib.util as u; s = u.find_spec("nvidia.nccl"); print(s.submodule_search_locations[0] if s else "")')
[ -f "$nccl_dir/include/nccl.h" ] && [ -f "$nccl_dir/lib/libnccl.so.2" ] || {
  say "no NCCL header/library from the nvidia-nccl-cu13 wheel (found '$nccl_dir')"; exit 1; }
links="$("$py" -c 'import sys; print(sys.prefix)')/opt/nccl"
mkdir -p "$links/lib"
ln -sfn "$nccl_dir/include" "$links/include"
ln -sf "$nccl_dir/lib/libnccl.so.2" "$links/lib/libnccl.so"

say "horovod with NCCL for torch $("$py" -c 'import torch; print(torch.__version__)'), CUDA $cuda_release, sm ${cc_list}"
start=$(date +%s)
# CMake 4 refuses Horovod's vendored Gloo ("Compatibility with CMake < 3.5 has been removed": its CMakeLists asks for
# 2.8.12); CMAKE_POLICY_VERSION_MINIMUM lets it configure, and older CMake ignores it. GCC 13 no longer pulls <string>
# and <stdexcept> in through other headers, and Horovod 0.28.1's group_table.h and common.h relied on that
# ("'string' is not a member of 'std'"): the C++ compiles force-include them. Both seen on the GPU machine (CMake 4.4.3,
# GCC 13.3.0).
PATH="$(dirname "$py"):$CUDA_HOME/bin:$PATH" CUDA_HOME="$CUDA_HOME" HOROVOD_CUDA_HOME="$CUDA_HOME" \
  CMAKE_POLICY_VERSION_MINIMUM=3.5 \
  CXXFLAGS="${CXXFLAGS:-} -include string -include stdexcept -include cstdint -include iterator" \
  HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_BUILD_CUDA_CC_LIST="$cc_list" CUDAARCHS="${cc_list//,/;}" \
  HOROVOD_NCCL_HOME="$links" HOROVOD_NCCL_INCLUDE="$links/include" HOROVOD_NCCL_LIB="$links/lib" \
  HOROVOD_NCCL_LINK=SHARED BENCH_HOROVOD_FRAMEWORKS=pytorch BENCH_MPI="${BENCH_MPI:-openmpi}" \
  PYTHON="$py" "$here/scripts/build_horovod.sh"
say "horovod step took $(( $(date +%s) - start )) s"

"$py" "$here/scripts/gpu_build_check.py"
