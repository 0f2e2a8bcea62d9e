#!/usr/bin/env bash
# Idempotent set-up for `make run` (what the main job needs) and `make test` (plus test tools).
# Usage: scripts/install.sh run|test
# A second call is fast: each step checks a stamp or probes what is already there.
set -euo pipefail
purpose=${1:-run}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
venv=${BENCH_VENV:-$here/.venv}
py=${PYTHON:-python3}

say() { printf '[install] %s\n' "$*" >&2; }
# This machine's pip config names local index folders that may not exist; pip warns once per package. Drop that noise.
quiet_pip() { "$venv/bin/python" -m pip "$@" 2> >(grep -v "is ignored: it is neither" >&2); }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else say "need root to run: $*"; exit 1
  fi
}

apt_install() {
  # Only touches apt when a package is actually missing.
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "apt-get install ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# 1. System packages: Open MPI (runtime + compiler wrappers Horovod builds against); cmake/g++ for the build.
apt_install openmpi-bin libopenmpi-dev cmake g++ make
if [ "$purpose" = test ]; then
  # Headless browser for the report test; a real single-node Slurm (munge for its authentication) for the Slurm
  # backend's tests.
  apt_install chromium slurm-wlm munge
fi

# 2. The virtual environment with the pinned Python dependencies.
if [ ! -x "$venv/bin/python" ]; then
  say "creating $venv"
  "$py" -m venv "$venv"
fi
stamp="$venv/.bench-deps"
want=$(cat setup.cfg pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing pinned dependencies into $venv"
  quiet_pip install -q --upgrade setuptools==80.9.0 wheel==0.45.1
  quiet_pip install -q -e ".[test,parquet,azureml,lint]"
  quiet_pip install -q --no-deps tf-keras==2.21.0
  echo "$want" > "$stamp"
fi

# 3. Horovod 0.28.1, built from source with the C++17 fix, cached by what it was built against.
PYTHON="$venv/bin/python" scripts/build_horovod.sh
