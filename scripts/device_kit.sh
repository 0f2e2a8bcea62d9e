#!/usr/bin/env bash
# `make device-kit`: fills device-kit/ (ignored by git) with what an offline GPU machine lacks, so that the working
# tree plus the kit (<= 64 MiB) is all scripts/gpu_session.sh needs there:
#   wheels/               cp312 manylinux x86_64 wheels of scripts/device_kit_requirements.txt (pydantic and its
#                         needs, Horovod's build and run-time needs, pip itself)
#   requirements.txt      that list, as installed
#   horovod-0.28.1.tar.gz Horovod's sdist (the fallback: built there against that machine's torch, with NCCL)
#   gpu/                  built for the GPU machine's torch (BENCH_KIT_TORCH, 2.11.0+cu130 on the machines lent so
#                         far: docs/gpu-results.md): torchvision's wheel (PyPI's 0.26.0 is the cu130 build, nvJPEG
#                         inside, ~7.5 MB) and a Horovod wheel with NCCL compiled here (scripts/gpu_build.sh in
#                         .venv-gpu-kit, a Python 3.12 venv with PyPI's torch 2.11.0: several GB of CUDA wheels and a
#                         ~10 min compile the first time, cached after), and built-for.txt saying for what
# The JPEG sample is not in the kit (no room within 64 MiB): the GPU session makes it there (its `data` phase).
# Then it checks the kit as the GPU session's dry run does, measures the tree and the kit, and prints what to take.
# --wheels-only: stop after wheels/ (make device-kit-wheels).
# Environment: BENCH_KIT_DIR (default device-kit), BENCH_KIT_PYTHON_VERSION (default 3.12), BENCH_KIT_TORCH (default
# 2.11.0), BENCH_KIT_TORCHVISION (default 0.26.0, the release that pairs with it), BENCH_KIT_PYTHON (the 3.12
# interpreter for .venv-gpu-kit; default: pyenv's, else python3.12 on PATH).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
kit=${BENCH_KIT_DIR:-$here/device-kit}
pyver=${BENCH_KIT_PYTHON_VERSION:-3.12}
abi="cp${pyver/./}"
py=$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)
limit=$((64 * 1024 * 1024))
say() { printf '[device-kit] %s\n' "$*" >&2; }
quiet_pip() { "$py" -m pip "$@" 2> >(grep -v "is ignored: it is neither" >&2); }

mkdir -p "$kit/wheels"
say "wheels for Python $pyver (manylinux x86_64) into $kit/wheels"
quiet_pip download -q --only-binary=:all: --python-version "$pyver" --implementation cp --abi "$abi" \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$kit/wheels" -r scripts/device_kit_requirements.txt
cp scripts/device_kit_requirements.txt "$kit/requirements.txt"
if [ "${1:-}" = --wheels-only ]; then
  # `make device-kit-wheels`: enough for a session with --skip build,data (matrix-gpu-transformer.yaml: DDP and FSDP2,
  # no Horovod, no JPEG) - no sdist, no GPU build, seconds instead of minutes.
  say "wheels only: $(du -sh "$kit" | cut -f1) in $kit (for scripts/gpu_session.sh --skip build,data)"
  exit 0
fi

sdist="$kit/horovod-0.28.1.tar.gz"
if [ ! -f "$sdist" ]; then
  cached=${BENCH_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/bench}/wheels/horovod-0.28.1.tar.gz
  if [ -f "$cached" ]; then cp "$cached" "$sdist"
  else quiet_pip download -q --no-deps --no-binary :all: horovod==0.28.1 -d "$kit"
  fi
fi

torch_release=${BENCH_KIT_TORCH:-2.11.0}
vision_release=${BENCH_KIT_TORCHVISION:-0.26.0}
mkdir -p "$kit/gpu"
gpu_venv=$here/.venv-gpu-kit  # Python 3.12 + the GPU machine's torch: builds the Horovod wheel, checks torchvision
if ! ls "$kit/gpu"/torchvision-"$vision_release"-*.whl >/dev/null 2>&1; then
  say "torchvision $vision_release for Python $pyver (the build for torch $torch_release) into $kit/gpu"
  quiet_pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp --abi "$abi" \
    --platform manylinux_2_28_x86_64 "torchvision==$vision_release" -d "$kit/gpu"
fi
if ! ls "$kit/gpu"/horovod-0.28.1-"$abi"-*.whl >/dev/null 2>&1; then
  py_kit=${BENCH_KIT_PYTHON:-$(ls /root/.pyenv/versions/"$pyver".*/bin/python"$pyver" 2>/dev/null | tail -1)}
  py_kit=${py_kit:-$(command -v "python$pyver" || true)}
  [ -n "$py_kit" ] || { say "no Python $pyver here to build the Horovod wheel for (set BENCH_KIT_PYTHON)"; exit 1; }
  say "Horovod with NCCL for torch $torch_release on Python $pyver (.venv-gpu-kit; cached after the first build)"
  PYTHON="$py_kit" BENCH_GPU_VENV="$gpu_venv" BENCH_GPU_TORCH="$torch_release" scripts/gpu_build.sh
  built=$(BENCH_HOROVOD_PRINT_KEY=1 PYTHON="$gpu_venv/bin/python" scripts/gpu_horovod.sh 2>/dev/null |
          grep -m1 '/horovod-0.28.1-' || true)
  ls "$built"/horovod-*.whl >/dev/null 2>&1 || { say "no Horovod wheel in the build cache ($built)"; exit 1; }
  cp "$built"/horovod-*.whl "$kit/gpu/"
  printf 'python=%s\ntorch=%s\n' "$pyver" "$("$gpu_venv/bin/python" -c 'import torch; print(torch.__version__)')" \
    > "$kit/gpu/built-for.txt"
fi

# The same completeness check as the GPU session's dry run (it exits non-zero naming what is missing).
scripts/gpu_session.sh --check-kit --kit "$kit"

# The kit's torchvision beside the torch it was built for, proven on this CPU: the nvjpeg loader's code with the
# real decode_jpeg (torchvision's CPU decoder) against Pillow on ImageNet-like JPEGs (scripts/gpu_loader_check.py;
# the GPU session's data phase runs the same check with nvJPEG). Pillow as the main venv pins it. DALI too (not in
# the kit: its 200 MB wheel does not fit), whose pipeline the check runs on DALI's CPU operators.
if [ -x "$gpu_venv/bin/python" ]; then
  say "the kit's torchvision on this CPU (and DALI): the nvjpeg and dali loaders against Pillow"
  kit_pip() { "$gpu_venv/bin/python" -m pip "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
  kit_pip install -q --no-deps "$(ls "$kit/gpu"/torchvision-*.whl | head -1)"
  kit_pip install -q "pillow==$("$py" -c 'import PIL; print(PIL.__version__)')" nvidia-dali-cuda130==2.4.0
  sample=$(mktemp -d)
  trap 'rm -rf "$sample"' EXIT
  "$py" -m bench data make-imagenet-sample "$sample" --classes 4 --per-class 20 --profile imagenet \
    --layouts jpeg >/dev/null
  "$gpu_venv/bin/python" scripts/gpu_loader_check.py --sample "$sample" --device cpu
else
  say "no $gpu_venv (the GPU wheels came from elsewhere): the kit's torchvision is not checked here"
fi

tree_bytes=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1 | cut -f1)
kit_bytes=$(du -sb "$kit" | cut -f1)
total=$((tree_bytes + kit_bytes))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
say "working tree $(mib "$tree_bytes") + kit $(mib "$kit_bytes") = $(mib "$total") (limit 64 MiB)"
[ "$total" -le "$limit" ] || { say "over the 64 MiB a device command may carry"; exit 1; }
echo "take along: the working tree and $(realpath --relative-to="$here" "$kit")/ (device tool: carry [\"$(realpath --relative-to="$here" "$kit")\"]); on the GPU machine: scripts/gpu_session.sh --phase all --deadline 540 (docs/gpu.md)"
