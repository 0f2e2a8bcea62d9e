#!/usr/bin/env bash
# `make gpu-rehearsal`: scripts/gpu_session.sh, every phase, here, before a GPU loan is spent on it - on a stand-in for
# the GPU machine's Python and without its GPU. The stand-in (.venv-gpu-standin, ignored) is a Python 3.12 venv with
# PyPI's torch 2.11.0 (the cu130 build the machines lent so far have, NCCL 2.28.9 with it) and the packages they have
# (docs/gpu.md, "On a GPU machine with no registry"), no pydantic and no Horovod. Then, with the kit of
# `make device-kit`:
#   install, build, doctor, data   as on the GPU machine (build takes the kit's Horovod wheel: it was built for this
#                                  torch and Python; data makes the ImageNet-like sample and runs
#                                  scripts/gpu_loader_check.py, here with torchvision's CPU decoder)
#   cells                          ci/matrix-gpu-session-rehearsal.yaml: the kit's Horovod (CUDA and NCCL inside)
#                                  running Gloo and mpirun cells, DDP and the Pillow loader on the sample, on the CPU;
#                                  then matrix-gpu.yaml, every cell of which this machine plans as skipped (no GPU)
#   report                         of the rehearsal's cells
# It fails on the first phase that fails, and on a cell that did not measure. What it cannot rehearse: the GPU
# itself, the GPU machine's own Python build (3.12.3 there) and Open MPI (4.1.6 there).
# Environment: BENCH_KIT_PYTHON (the Python 3.12 to make the stand-in from; default pyenv's, else python3.12),
# BENCH_STANDIN_VENV (default .venv-gpu-standin), BENCH_REHEARSAL_WORK (default .gpu-rehearsal; emptied first).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
say() { printf '[gpu-rehearsal] %s\n' "$*" >&2; }
standin=${BENCH_STANDIN_VENV:-$here/.venv-gpu-standin}
work=${BENCH_REHEARSAL_WORK:-$here/.gpu-rehearsal}
# What the GPU machine's /opt/torch/.venv was seen to hold (docs/gpu-results.md), at today's releases where its own
# were not recorded. Pillow comes with matplotlib.
STANDIN_PACKAGES="torch==2.11.0 numpy==2.5.5 pandas==3.1.1 matplotlib==3.11.2 Jinja2==3.1.6 rich==15.0.0
  psutil==7.2.2 PyYAML==6.0.4 nvidia-ml-py==13.615.71"

if [ ! -x "$standin/bin/python" ]; then
  py312=${BENCH_KIT_PYTHON:-$(ls /root/.pyenv/versions/3.12.*/bin/python3.12 2>/dev/null | tail -1)}
  py312=${py312:-$(command -v python3.12 || true)}
  [ -n "$py312" ] || { say "no Python 3.12 here to make the stand-in from (set BENCH_KIT_PYTHON)"; exit 1; }
  say "making the stand-in $standin ($py312, torch 2.11.0 and its CUDA wheels: several GB the first time)"
  "$py312" -m venv "$standin"
  # shellcheck disable=SC2086 - the list is words
  "$standin/bin/python" -m pip install -q $STANDIN_PACKAGES 2> >(grep -v "is ignored: it is neither" >&2)
fi
scripts/gpu_session.sh --check-kit >/dev/null || { say "the kit is incomplete: make device-kit first"; exit 1; }

rm -rf "$work"
session=(scripts/gpu_session.sh --python "$standin/bin/python" --work "$work" --out "$work/out")
for phase in install build doctor data; do "${session[@]}" --phase "$phase"; done
"${session[@]}" --phase cells --matrix ci/matrix-gpu-session-rehearsal.yaml
rehearsal_cells=$(cat "$work/done/cells")
"${session[@]}" --phase cells --force  # matrix-gpu.yaml: all skipped here, planned as the GPU machine would plan it
"${session[@]}" --phase report

# Every rehearsal cell complete: all its repeats ok, as resume counts it (the cells phase goes on past failed cells;
# the rehearsal does not).
"$work/venv/bin/python" - "$work/bench.db" ci/matrix-gpu-session-rehearsal.yaml <<'EOF'
import sys
from bench.planning.matrix import load_matrix
from bench.planning.plan import plan_cells
from bench.store import Store
wanted = {p.cell_id for p in plan_cells(load_matrix(sys.argv[2]).cells(), None) if p.runnable}
with Store(sys.argv[1], read_only=True) as store:
    ok = store.completed_cells()
missing = sorted(wanted - ok)
print(f"rehearsal cells complete: {len(wanted & ok)} of {len(wanted)}"
      + (f"; not: {', '.join(missing)}" if missing else ""))
sys.exit(1 if missing else 0)
EOF
for phase in install build doctor data cells report; do
  printf '  %-8s %s\n' "$phase" "$(cat "$work/done/$phase")"
  [ "$phase" = cells ] && printf '  %-8s %s (%s)\n' cells "$rehearsal_cells" ci/matrix-gpu-session-rehearsal.yaml
done
say "rehearsal passed: $work (logs/, report/, bench.db)"
