#!/usr/bin/env bash
# What ran beside a GPU worker, measured (issue 48, docs/diagnose.md "On a GPU host"): matrix-gpu-beside.yaml's
# one-GPU cells on a quiet machine, then again in a new store (their first run there) beside one busy process per
# core, each bounded by `timeout`; `bench status` of both stores, the stores and nvidia-smi's clocks go to --out.
# Needs the GPU machine's venv from scripts/gpu_session.sh's install phase (run first here unless --no-install),
# which needs only the kit's wheels: `make device-kit-wheels`, then carry device-kit.
#
# Usage: scripts/gpu_beside.sh [--out DIR] [--hog-seconds S] [--no-install]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
out=${OUT:-$here/.gpu-beside} hog_s=240 install=1
die() { printf 'gpu_beside: %s\n' "$*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift ;;
    --hog-seconds) hog_s=${2:?--hog-seconds needs seconds}; shift ;;
    --no-install) install=0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help lists them)" ;;
  esac
  shift
done
[[ "$hog_s" =~ ^[1-9][0-9]*$ ]] || die "--hog-seconds must be a positive number of seconds, got '$hog_s'"
command -v nvidia-smi >/dev/null || die "no nvidia-smi: this is for a GPU machine"
mkdir -p "$out"
matrix=matrix-gpu-beside.yaml work=$here/.gpu-session
[ "$install" = 0 ] || scripts/gpu_session.sh --phase install --skip build,data --matrix "$matrix" --out "$out/session"
vpy=$work/venv/bin/python
[ -x "$vpy" ] || die "no venv at $work/venv: run without --no-install"
export PATH="$work/venv/bin:$PATH"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,power.limit --format=csv > "$out/gpu.csv"
lscpu > "$out/lscpu.txt" 2>&1 || true
date -u +%FT%TZ > "$out/started.txt"

echo "== quiet"
"$vpy" -m bench run "$matrix" --store "$out/quiet/bench.db" 2>&1 | tee "$out/quiet.log"
"$vpy" -m bench status --store "$out/quiet/bench.db" > "$out/quiet-status.txt" 2>&1 || true

echo "== beside one busy process per core ($(nproc)), each ended after ${hog_s} s"
hogs=()
for _ in $(seq "$(nproc)"); do
  timeout "$hog_s" "$(command -v python3 || echo "$vpy")" -c 'while True: pass' &
  hogs+=($!)
done
trap 'kill "${hogs[@]}" 2>/dev/null || true' EXIT
sleep 2
"$vpy" -m bench run "$matrix" --store "$out/beside/bench.db" 2>&1 | tee "$out/beside.log" || true
kill "${hogs[@]}" 2>/dev/null || true
wait 2>/dev/null || true
"$vpy" -m bench status --store "$out/beside/bench.db" > "$out/beside-status.txt" 2>&1 || true
date -u +%FT%TZ > "$out/ended.txt"
cat "$out/quiet-status.txt" "$out/beside-status.txt"
