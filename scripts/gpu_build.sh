#!/usr/bin/env bash
# `make gpu-build`: Horovod 0.28.1 with NCCL, compiled here with no GPU, in its own venv (.venv-gpu).
#
# The venv gets PyPI's CUDA build of torch 2.13.0 (the same release as `make run`'s CPU torch, without the +cpu tag;
# it pulls the nvidia-* CUDA 13 runtime wheels, ~3 GB) and the NCCL wheel torch pins (nvidia-nccl-cu13). Horovod is
# built by scripts/build_horovod.sh for PyTorch alone (no TensorFlow here), Gloo + Open MPI controllers,
# HOROVOD_GPU_OPERATIONS=NCCL, with this machine's nvcc and NCCL from the wheel (linked shared: the libnccl.so.2
# torch loads is the one Horovod calls). The wheel is cached under ~/.cache/bench/wheels, keyed also by the nvcc
# release, the architecture list and NCCL's version. Then scripts/gpu_build_check.py proves what can be proven
# without a GPU: nccl_built() true, and ldd of the torch extension resolving libnccl.so.2 and libcudart.
#
# Architectures: CUDA 13 emits no code below sm_75 (Turing). The default 80,90 covers A100 (sm_80) and H100/H200
# (sm_90; the highest listed also gets PTX, which later GPUs JIT-compile). Older SKUs need an older toolkit: V100
# (sm_70) CUDA <= 12.x, K80 (sm_37) CUDA <= 11.8 (docs/gpu.md).
#
# Environment: BENCH_GPU_VENV (default .venv-gpu), PYTHON (the interpreter for a new venv, default python3),
# CUDA_HOME (default: /usr/local/cuda, else the toolkit of the nvcc on PATH), BENCH_CUDA_CC_LIST (default 80,90),
# BENCH_MPI (openmpi default, none for Gloo alone), BENCH_GPU_TORCH (the torch release, default 2.13.0; the device kit
# builds for the GPU machine's: scripts/device_kit.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
venv=${BENCH_GPU_VENV:-$here/.venv-gpu}
cc_list=${BENCH_CUDA_CC_LIST:-80,90}
say() { printf '[gpu-build] %s\n' "$*" >&2; }
quiet_pip() { "$venv/bin/python" -m pip "$@" 2> >(grep -v "is ignored: it is neither" >&2); }

# 1. The venv: torch exactly 2.13.0, or BENCH_GPU_TORCH (`===`: the +cpu build in a local wheel folder also satisfies `==`).
if [ ! -x "$venv/bin/python" ]; then
  say "creating $venv"
  "${PYTHON:-python3}" -m venv "$venv"
fi
want="torch===${BENCH_GPU_TORCH:-2.13.0} nvidia-nccl-cu13 setuptools==80.9.0 wheel==0.45.1 numpy==2.4.6 cloudpickle==3.1.2 psutil==7.2.2 PyYAML==6.0.3 packaging==26.3 cffi==2.1.1"
stamp="$venv/.bench-gpu-deps"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing CUDA torch and NCCL into $venv (several GB on a first run)"
  # shellcheck disable=SC2086  # $want is a list of requirements
  quiet_pip install -q $want
  echo "$want" > "$stamp"
fi

# 2. Horovod with NCCL and the no-GPU checks (scripts/gpu_horovod.sh: CUDA toolkit, NCCL wheel, build, ldd).
PYTHON="$venv/bin/python" BENCH_CUDA_CC_LIST="$cc_list" scripts/gpu_horovod.sh
