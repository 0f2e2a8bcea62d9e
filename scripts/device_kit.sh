#!/usr/bin/env bash
# `make device-kit`: fills device-kit/ (ignored by git) with what an offline GPU machine lacks, so that the working
# tree plus the kit (<= 64 MiB) is all scripts/gpu_session.sh needs there:
#   wheels/               cp312 manylinux x86_64 wheels of scripts/device_kit_requirements.txt (pydantic and its
#                         needs, Horovod's build and run-time needs, pip itself)
#   requirements.txt      that list, as installed
#   horovod-0.28.1.tar.gz Horovod's sdist (built there against that machine's torch, with NCCL)
#   imagenet-sample/      a small ImageNet-style JPEG tree (bench/datasets.py; 10 classes x 64 images: one batch of
#                         256 per rank fits in it), for matrix-gpu.yaml's real-data cell
# Then it checks the kit as the GPU session's dry run does, measures the tree and the kit, and prints what to take.
# Environment: BENCH_KIT_DIR (default device-kit), BENCH_KIT_PYTHON_VERSION (default 3.12).
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

sdist="$kit/horovod-0.28.1.tar.gz"
if [ ! -f "$sdist" ]; then
  cached=${BENCH_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/bench}/wheels/horovod-0.28.1.tar.gz
  if [ -f "$cached" ]; then cp "$cached" "$sdist"
  else quiet_pip download -q --no-deps --no-binary :all: horovod==0.28.1 -d "$kit"
  fi
fi

sample="$kit/imagenet-sample"
if [ ! -d "$sample/train" ]; then
  say "generating the JPEG sample in $sample"
  PYTHONPATH="$here" "$py" -c 'import sys
from bench.datasets import make_imagenet_sample
made = make_imagenet_sample(sys.argv[1], classes=10, per_class=64, tfrecord=False)
print("[device-kit]", made["images"], "images,", made["classes"], "classes", file=sys.stderr)' "$sample"
fi

# The same completeness check as the GPU session's dry run (it exits non-zero naming what is missing).
scripts/gpu_session.sh --check-kit --kit "$kit"

tree_bytes=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1 | cut -f1)
kit_bytes=$(du -sb "$kit" | cut -f1)
total=$((tree_bytes + kit_bytes))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
say "working tree $(mib "$tree_bytes") + kit $(mib "$kit_bytes") = $(mib "$total") (limit 64 MiB)"
[ "$total" -le "$limit" ] || { say "over the 64 MiB a device command may carry"; exit 1; }
echo "take along: the working tree and $(realpath --relative-to="$here" "$kit")/ (device tool: carry [\"$(realpath --relative-to="$here" "$kit")\"]); on the GPU machine: scripts/gpu_session.sh --phase all (docs/gpu.md)"
