#!/usr/bin/env bash
# The whole GPU pipeline on one GPU machine with no package index, from the working tree plus `make device-kit`'s
# kit, in phases that resume across commands (each well under 10 minutes):
#   install  a venv over the machine's CUDA torch (a .pth line: its packages stay visible), the kit's wheels into it,
#            and the kit's torchvision (nvJPEG) when it was built for the machine's torch
#   build    Horovod 0.28.1 with NCCL: the kit's prebuilt wheel when it was built for the machine's torch and Python
#            and passes nccl_built() and the ldd checks; else from the kit's sdist (scripts/gpu_horovod.sh, + MPI
#            where an mpicxx exists), the compiler's log kept, and the same checks
#   doctor   nvidia-smi, torch's view of the GPU, `bench doctor`, `bench plan` of the matrix
#   data     the ImageNet-like JPEG sample the matrix's real-data cells read, made there by `bench data
#            make-imagenet-sample` into .gpu-session/imagenet-sample (the kit has no room for it), then
#            scripts/gpu_loader_check.py: nvJPEG decodes it as Pillow does (its failure is logged, not fatal)
#   cells    `bench run matrix-gpu.yaml` on the local backend (resumes past cells already in the store, and past
#            cells that failed in an earlier command; rerun the phase if its time ran out), with NCCL_DEBUG=INFO,
#            power sampled and the CUDA-event cross-check; the store and archive synced to --out every GPU_SESSION_SYNC_S seconds (20) meanwhile, for a command killed
#            mid-phase; a job a killed command left running is ended first
#   report   `bench report`, then the time plan beside what each phase and cell took (gpu_time_plan.py --against)
# State (venv, build cache, store, job logs, phase markers) lives in --work, which a machine that keeps the tree
# between commands keeps; after every phase the store, the job logs (NCCL's included), the phase logs and the
# report are packed into --out/gpu-session.tar.gz (default --out: $OUT when set), with the store beside it, so each
# command brings back everything so far.
#
# Usage: scripts/gpu_session.sh [--phase install|build|doctor|data|cells|report|all] [--out DIR] [--work DIR]
#          [--kit DIR] [--python PY] [--matrix FILE] [--arch 80,90] [--cells-budget SECONDS] [--deadline SECONDS]
#          [--skip build,data] [--force] [--dry-run | --check-kit]
# --skip: phases this matrix does not need, left out of --phase all and of the kit check: `build` for a matrix with
# no Horovod cell (matrix-gpu-transformer.yaml: DDP and FSDP2 under torchrun), `data` for one with no JPEG cell. The
# kit then needs only its wheels (no sdist, no GPU wheels): `make device-kit-wheels`.
# --deadline: the cells phase ends by then, counted from this script's start (its budget shrinks to fit; under 30 s
# left, it does not start), so one command of a tool with a time limit runs every phase and the cells in what is
# left: `--phase all --deadline 540` in a 600 s command. Run the same command again to resume where it stopped.
# --dry-run checks the kit, prints every phase's commands and the loan's time plan (scripts/gpu_time_plan.py: each
# phase's and cell's expected seconds, the machine's start included), running nothing (works on any machine);
# --check-kit only checks the kit. Both exit 1 naming what the kit lacks (or, for --dry-run, a plan over 720 s).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
PHASES=(install build doctor data cells report)
HOROVOD_SDIST=horovod-0.28.1.tar.gz
# The kit's GPU part (scripts/device_kit.sh): torchvision and a Horovod wheel built for the GPU machine's torch, and
# what they were built for (one `key=value` a line: python, torch).
GPU_DIR=gpu
SAMPLE=.gpu-session/imagenet-sample  # matrix-gpu.yaml's backend.imagenet_dir
SAMPLE_CLASSES=100 SAMPLE_PER_CLASS=64

phase=all out=${OUT:-} work=$here/.gpu-session kit=$here/device-kit matrix=matrix-gpu.yaml arch=80,90
python=$([ -x /opt/torch/.venv/bin/python ] && echo /opt/torch/.venv/bin/python || command -v python3)
budget=540 deadline= force=0 dry=0 check_only=0 skip=
started=$(date +%s)
die() { printf 'gpu_session: %s\n' "$*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --phase) phase=${2:?--phase needs a value}; shift ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    --work) work=${2:?--work needs a folder}; shift ;;
    --kit) kit=${2:?--kit needs a folder}; shift ;;
    --python) python=${2:?--python needs an interpreter}; shift ;;
    --matrix) matrix=${2:?--matrix needs a file}; shift ;;
    --arch) arch=${2:?--arch needs a list like 80,90}; shift ;;
    --cells-budget) budget=${2:?--cells-budget needs seconds}; shift ;;
    --deadline) deadline=${2:?--deadline needs seconds}; shift ;;
    --skip) skip=${2:?--skip needs phases like build,data}; shift ;;
    --force) force=1 ;;
    --dry-run) dry=1 ;;
    --check-kit) check_only=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help lists them)" ;;
  esac
  shift
done
case " all ${PHASES[*]} " in *" $phase "*) ;; *) die "--phase must be one of: all ${PHASES[*]}; got '$phase'" ;; esac
for p in ${skip//,/ }; do
  case " build data " in *" $p "*) ;; *) die "--skip takes build and data, got '$p'" ;; esac
done
skipped() { case ",$skip," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
[[ "$arch" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--arch must be like 80,90, got '$arch'"
[[ "$budget" =~ ^[1-9][0-9]*$ ]] || die "--cells-budget must be a positive number of seconds, got '$budget'"
[ -z "$deadline" ] || [[ "$deadline" =~ ^[1-9][0-9]*$ ]] || die "--deadline must be a positive number of seconds, got '$deadline'"
abs() { case "$1" in /*) echo "$1" ;; *) echo "$here/$1" ;; esac; }
work=$(abs "$work") kit=$(abs "$kit")
out=$(abs "${out:-$work/out}")
venv=$work/venv
vpy=$venv/bin/python
# The venv's tools (horovodrun), then the machine's Python's, first on PATH for every phase.
export PATH="$venv/bin:$(dirname "$python"):$PATH"

# --- the kit --------------------------------------------------------------------------------------------------------
kit_missing() {
  # Prints one line per thing the kit lacks: every pinned wheel, the sdist, the JPEG sample; and the matrix.
  [ -d "$kit" ] || { echo "the kit folder $kit (make device-kit)"; return; }
  [ -f "$kit/requirements.txt" ] || echo "$kit/requirements.txt"
  local line name version wheel
  while IFS= read -r line; do
    line=${line%%#*}; line=${line//[[:space:]]/}
    [ -n "$line" ] || continue
    name=${line%%==*} version=${line#*==}
    wheel=$(find "$kit/wheels" -maxdepth 1 -iname "${name//-/_}-${version}-*.whl" -size +0 2>/dev/null | head -1)
    [ -n "$wheel" ] || echo "wheel $name==$version in $kit/wheels"
  done < scripts/device_kit_requirements.txt
  if ! skipped build; then
    [ -s "$kit/$HOROVOD_SDIST" ] || echo "Horovod's sdist $kit/$HOROVOD_SDIST"
    gpu_wheel horovod >/dev/null || echo "the prebuilt Horovod wheel in $kit/$GPU_DIR"
  fi
  if ! skipped build || ! skipped data; then
    [ -s "$kit/$GPU_DIR/built-for.txt" ] || echo "what the GPU wheels were built for, $kit/$GPU_DIR/built-for.txt"
  fi
  skipped data || gpu_wheel torchvision >/dev/null || echo "torchvision's wheel in $kit/$GPU_DIR"
  [ -f "$matrix" ] || echo "the matrix $matrix"
}

gpu_wheel() { find "$kit/$GPU_DIR" -maxdepth 1 -name "$1-*.whl" -size +0 2>/dev/null | head -1 | grep .; }
built_for() { sed -n "s/^$1=//p" "$kit/$GPU_DIR/built-for.txt" 2>/dev/null; }

check_kit() {
  local missing
  missing=$(kit_missing)
  if [ -n "$missing" ]; then
    printf 'kit incomplete: missing %s\n' "$missing" | sed '2,$ s/^/kit incomplete: missing /' >&2
    return 1
  fi
  if [ -n "$skip" ] && ! [ -s "$kit/$GPU_DIR/built-for.txt" ]; then
    echo "kit complete for this matrix: $kit ($(ls "$kit/wheels" | wc -l) wheels; phases skipped: $skip)"
  else
    echo "kit complete: $kit ($(ls "$kit/wheels" | wc -l) wheels, $HOROVOD_SDIST, torchvision and Horovod built for torch $(built_for torch) on Python $(built_for python))"
  fi
}

if [ "$check_only" = 1 ]; then check_kit; exit; fi

# --- running or printing a step -----------------------------------------------------------------------------------
log=/dev/null
last_rc=0
step() {  # step [--may-fail] CMD...: run CMD, its output to the terminal and the phase's log (or print it: --dry-run)
  local may_fail=0
  [ "$1" = --may-fail ] && { may_fail=1; shift; }
  if [ "$dry" = 1 ]; then printf '  $'; printf ' %q' "$@"; printf '\n'; return 0; fi
  printf '$' >>"$log"; printf ' %q' "$@" >>"$log"; printf '\n' >>"$log"
  local rc=0
  "$@" 2>&1 | tee -a "$log" || rc=$?
  last_rc=$rc
  [ "$rc" = 0 ] || [ "$may_fail" = 1 ] || { echo "gpu_session: step failed (exit $rc): $*" | tee -a "$log" >&2; return "$rc"; }
  [ "$rc" = 0 ] || echo "(exit $rc, kept going)" | tee -a "$log"
}

mpi_for_build() { command -v mpicxx >/dev/null 2>&1 && echo openmpi || echo none; }

phase_install() {
  [ -x "$vpy" ] || step "$python" -m venv --without-pip "$venv"
  # The machine's packages (torch, numpy, pandas, ...) stay visible from the venv, after its own.
  step "$python" -c 'import pathlib, sys, sysconfig
site = next(pathlib.Path(sys.argv[1]).glob("lib/python3*/site-packages"))
dirs = dict.fromkeys((sysconfig.get_path("purelib"), sysconfig.get_path("platlib")))
site.joinpath("_bench_base.pth").write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in dirs))' "$venv"
  local pip_wheel
  pip_wheel=$(find "$kit/wheels" -maxdepth 1 -name 'pip-*.whl' 2>/dev/null | head -1 || true)
  step "$vpy" "${pip_wheel:-$kit/wheels/pip.whl}/pip" install --no-index --find-links "$kit/wheels" \
    -r "$kit/requirements.txt"
  # torchvision (nvJPEG inside) only over the torch it was built for: another one would not import beside it.
  if skipped data && ! gpu_wheel torchvision >/dev/null; then
    echo "no torchvision in the kit (phase data skipped): the JPEG loaders are not installed" | tee -a "$log"
  elif [ "$dry" = 1 ] || [ "$(machine_torch)" = "$(built_for torch)" ]; then
    step "$vpy" -m pip install --no-index --no-deps "$(gpu_wheel torchvision || echo "$kit/$GPU_DIR/torchvision.whl")"
  else
    echo "the kit's torchvision is for torch $(built_for torch), this machine has $(machine_torch): not installed" | tee -a "$log"
  fi
  step "$vpy" -c 'import pydantic, yaml, pandas, matplotlib, jinja2, rich, psutil, torch
print("pydantic", pydantic.VERSION, "torch", torch.__version__, "CUDA", torch.version.cuda,
      "GPUs", torch.cuda.device_count())'
}

machine_torch() { "$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none; }
machine_python() { "$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null || echo none; }

phase_build() {
  # The kit's wheel when it was built for this torch and Python and passes the checks; the sdist otherwise.
  if [ "$dry" = 1 ] || { [ "$(machine_torch)" = "$(built_for torch)" ] && [ "$(machine_python)" = "$(built_for python)" ]; }; then
    step --may-fail "$vpy" -m pip install --no-index --no-deps --force-reinstall \
      "$(gpu_wheel horovod || echo "$kit/$GPU_DIR/horovod.whl")"
    if [ "$last_rc" = 0 ]; then
      step --may-fail "$vpy" scripts/gpu_build_check.py
      [ "$dry" = 1 ] || [ "$last_rc" != 0 ] || return 0
    fi
    [ "$dry" = 1 ] || echo "the kit's Horovod wheel did not pass: building from the sdist" | tee -a "$log"
  else
    echo "the kit's wheels are for torch $(built_for torch) on Python $(built_for python); this machine has" \
      "$(machine_torch) on $(machine_python): building Horovod from the sdist" | tee -a "$log"
  fi
  step env PYTHON="$vpy" BENCH_MPI="$(mpi_for_build)" BENCH_CUDA_CC_LIST="$arch" BENCH_CACHE_DIR="$work/cache" \
    BENCH_HOROVOD_SDIST="$kit/$HOROVOD_SDIST" BENCH_HOROVOD_BUILD_LOG="$work/logs/horovod-build.log" \
    scripts/gpu_horovod.sh
}

phase_doctor() {
  step --may-fail nvidia-smi
  step --may-fail nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  step "$vpy" -c 'import torch
print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(),
      "NCCL", torch.cuda.nccl.version() if torch.cuda.is_available() else None)
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(i, p.name, f"sm_{p.major}{p.minor}", round(p.total_memory / 2**30, 1), "GiB", "bf16",
          torch.cuda.is_bf16_supported())'
  step --may-fail "$vpy" -m bench doctor
  step "$vpy" -m bench plan "$matrix" --all
}

phase_data() {
  # Large enough that a window (50 steps x 256 images) reads thousands of files, not a handful again and again.
  if [ "$dry" = 0 ] && find "$SAMPLE/train" -name '*.JPEG' -print -quit 2>/dev/null | grep -q .; then
    echo "the sample is there: $SAMPLE" | tee -a "$log"
  else
    # ImageNet-like pixel and file sizes (~400x350 px, ~110 KB a JPEG), so decoding costs what ImageNet's does.
    step "$vpy" -m bench data make-imagenet-sample "$SAMPLE" --classes "$SAMPLE_CLASSES" \
      --per-class "$SAMPLE_PER_CLASS" --profile imagenet --layouts jpeg --workers "$(nproc)"
  fi
  # Pre-flight of the nvjpeg cells, seconds long: nvJPEG decodes the sample as Pillow does (the log says what failed;
  # the session goes on, and the Pillow cells do not need it).
  step --may-fail "$vpy" scripts/gpu_loader_check.py --sample "$SAMPLE" --device auto
}

cells_budget() {  # --cells-budget, or what is left before --deadline when that is less
  local left
  [ -n "$deadline" ] || { echo "$budget"; return; }
  left=$((deadline - ($(date +%s) - started)))
  echo $((left < budget ? left : budget))
}

phase_cells() {
  # bench run resumes past the cells the store already has: a phase cut short by its budget is rerun, not redone.
  # Exit 1 (some cells failed: their reasons are in the store) ends the phase; only a cut-short run (124) does not.
  # A command cut at the device tool's limit leaves its running job behind (the local backend starts each job in a
  # session of its own): on a machine still warm it would share the GPU with these cells' windows. End it first:
  # this session's jobs only, known by their output under $work/runs.
  if [ "$dry" = 0 ] && pgrep -f "$work/runs/" >/dev/null; then
    echo "ending jobs a cut command left running: $(pgrep -f "$work/runs/" | tr '\n' ' ')" | tee -a "$log"
    pkill -KILL -f "$work/runs/" || true
    sleep 2  # the GPU's memory is freed as they exit
  fi
  cells_seconds=$(cells_budget)  # global: the message after a cut-short phase names it
  if [ "$dry" = 0 ] && [ "$cells_seconds" -lt 30 ]; then
    echo "no time left for cells before the ${deadline} s deadline (${cells_seconds} s): run the command again" |
      tee -a "$log"
    return 124
  fi
  # A cell that failed or timed out in an earlier command is not tried again (--skip-failed): one hung to its
  # timeout would spend it twice out of a 15-minute loan. GPU_SESSION_RETRY_FAILED=1 tries them again (say, after
  # a fix between commands).
  local retry=(--skip-failed)
  [ "${GPU_SESSION_RETRY_FAILED:-0}" = 1 ] && retry=()
  # --no-probe: the compute and engine probes are for co-located CPU cells only (a GPU cell is never probed), so on
  # the GPU machine it changes nothing; on `make gpu-rehearsal`'s CPU stand-in it keeps the rehearsal to what the GPU
  # will run rather than probing its CPU cells.
  syncing start
  step --may-fail env NCCL_DEBUG=INFO timeout --signal=INT --kill-after=30 "$cells_seconds" \
    "$vpy" -m bench run "$matrix" --store "$work/bench.db" --no-probe "${retry[@]}"
  syncing stop
  case "$last_rc" in 0|1) return 0 ;; *) return "$last_rc" ;; esac
}

records_in() {  # how many records a store holds (0 when there is no store), read as bench reads one
  [ -f "$1" ] || { echo 0; return; }
  "$vpy" -c 'import sys
from bench.store import Store
with Store(sys.argv[1], read_only=True) as store:
    print(len(store.records()))' "$1"
}

phase_report() {
  # A machine whose GPU no cell names plans them all as skipped, which writes no record: say so (cells.log lists
  # each cell's reason) rather than fail on `bench report`'s "no records yet".
  if [ "$dry" = 0 ] && [ "$(records_in "$work/bench.db")" = 0 ]; then
    echo "no records in $work/bench.db: no cell ran here (logs/cells.log says why), so no report" | tee -a "$log"
  else
    step "$vpy" -m bench report --store "$work/bench.db" --out "$work/report"
  fi
  # The loan's time plan beside what this session took, row by row, for the next loan's plan (not a failure here).
  step --may-fail "$vpy" scripts/gpu_time_plan.py --matrix "$matrix" --skip "$skip" --against "$work"
}

# What each command brings back: everything but the venv and the build cache, as one archive plus the store. One
# archive because a tool that returns a command's files may cap their number (this project's device tool returns at
# most 8 files, none more than 2 folders down), and the job logs alone are one file per cell. The store goes in as a
# snapshot (SQLite's backup API: one consistent file while `bench run` writes), and each file is renamed into place,
# so a command killed at any moment leaves the last whole archive and store.
sync_out() {
  [ "$out" = "$work" ] && return 0
  mkdir -p "$out"
  local snap=$work/.snapshot item items=()
  rm -rf "$snap" && mkdir -p "$snap"
  if [ -e "$work/bench.db" ]; then
    "$python" -c 'import sqlite3, sys
src, dst = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
src.backup(dst)
dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, not a WAL-mode store wanting its -wal
dst.close()' "$work/bench.db" "$snap/bench.db" 2>/dev/null || rm -f "$snap/bench.db"
  fi
  for item in runs logs report done; do
    [ -e "$work/$item" ] && items+=(-C "$work" "$item")
  done
  [ -e "$snap/bench.db" ] && items+=(-C "$snap" bench.db)
  if [ "${#items[@]}" -gt 0 ]; then
    tar -czf "$out/.gpu-session.tar.gz.tmp" "${items[@]}" && mv -f "$out/.gpu-session.tar.gz.tmp" "$out/gpu-session.tar.gz"
  fi
  if [ -e "$snap/bench.db" ]; then
    cp -f "$snap/bench.db" "$out/.bench.db.tmp" && mv -f "$out/.bench.db.tmp" "$out/bench.db"
  fi
  rm -rf "$snap"
  return 0
}

# While the cells run, sync_out every SYNC_EVERY_S seconds: a command the device tool cuts at its limit (its budget
# may be less than the 600 s asked for) still brings back every cell finished by the last sync.
SYNC_EVERY_S=${GPU_SESSION_SYNC_S:-20}
syncing() {  # syncing start | stop
  if [ "$1" = start ]; then
    [ "$dry" = 1 ] && return 0
    # Ends when stopped (after a sync under way finishes: no torn file) or when this script is gone ($$ is its pid).
    ( nap=; trap 'kill $nap 2>/dev/null; exit 0' TERM
      while kill -0 $$ 2>/dev/null; do sleep "$SYNC_EVERY_S" & nap=$!; wait "$nap"; sync_out; done ) &
    syncer=$!
  elif [ -n "${syncer:-}" ]; then
    kill "$syncer" 2>/dev/null || true
    wait "$syncer" 2>/dev/null || true
    syncer=
  fi
}

if [ "$dry" = 1 ]; then
  echo "gpu_session dry run: kit $kit, work $work, out $out, python $python, matrix $matrix, arch $arch"
  status=0
  check_kit || status=1
  for p in "${PHASES[@]}"; do
    skipped "$p" && { echo "phase $p: skipped (--skip)"; continue; }
    echo "phase $p:"
    "phase_$p"
  done
  plan_py=$([ -x "$here/.venv/bin/python" ] && echo "$here/.venv/bin/python" || echo "$python")
  prebuilt=$(gpu_wheel horovod >/dev/null && echo yes || echo no)
  "$plan_py" scripts/gpu_time_plan.py --matrix "$matrix" --prebuilt "$prebuilt" --skip "$skip" || status=1
  exit "$status"
fi

check_kit >&2 || exit 1
trap 'syncing stop' EXIT
mkdir -p "$work/logs" "$work/done"
[ "$phase" = all ] && todo=("${PHASES[@]}") || todo=("$phase")
for p in "${todo[@]}"; do
  if [ "$phase" = all ] && skipped "$p"; then
    echo "== phase $p: skipped (--skip $skip)"
    continue
  fi
  if [ -f "$work/done/$p" ] && [ "$force" = 0 ] && [ "$phase" = all ]; then
    echo "== phase $p: done earlier ($(cat "$work/done/$p")); --force --phase $p to redo"
    continue
  fi
  log=$work/logs/$p.log
  echo "== phase $p ($(date -u +%FT%TZ))" | tee -a "$log"
  start=$(date +%s)
  rc=0
  "phase_$p" || rc=$?
  took=$(( $(date +%s) - start ))
  if [ "$rc" = 0 ]; then
    echo "$(date -u +%FT%TZ) in ${took} s" > "$work/done/$p"
    echo "== phase $p done in ${took} s" | tee -a "$log"
  else
    sync_out
    [ "$p" = cells ] && [ "$rc" = 124 ] &&
      echo "== phase cells: its ${cells_seconds} s budget ran out; run the command again to resume" | tee -a "$log"
    echo "== phase $p failed (exit $rc) after ${took} s; log: $log; results so far: $out" | tee -a "$log" >&2
    exit "$rc"
  fi
  sync_out
done
echo "results: $out"
