#!/usr/bin/env bash
# Idempotent set-up for `make run` (what the main job needs) and `make test` (plus test tools).
# Usage: scripts/install.sh run|test|images|build-tools
#   run: bench's own dependencies only; the extras that only tests and some verbs use (test, parquet, azureml,
#   kubernetes, lint) come with `test` (a verb that needs one says which when it is missing).
#   images: `make run`'s set plus the container engine and debootstrap; build-tools: only the system packages a
#   Horovod build needs (Open MPI, CMake, a compiler), for `make gpu-build`, which makes its own venv.
# A second call is fast: each step checks a stamp or probes what is already there.
set -euo pipefail
purpose=${1:-run}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
venv=${BENCH_VENV:-$here/.venv}
py=${PYTHON:-python3}

say() { printf '[install] %s\n' "$*" >&2; }
# Where the set-up's time goes, said at the end (a fresh machine's first `make run` pays all of it).
phase_start=$SECONDS phases=()
phase_done() { phases+=("$1 $((SECONDS - phase_start)) s"); phase_start=$SECONDS; }
say_phases() {
  [ ${#phases[@]} -gt 0 ] && say "set-up ($purpose) took $SECONDS s: $(IFS=,; echo "${phases[*]}" | sed 's/,/, /g')"
  true
}
trap say_phases EXIT
case "$purpose" in run|test|images|build-tools) ;;
  *) say "usage: scripts/install.sh run|test|images|build-tools, got '$purpose'"; exit 2 ;; esac
# This machine's pip config names local index folders that may not exist; pip warns once per package. Drop that noise.
quiet_pip() { "$venv/bin/python" -m pip "$@" 2> >(grep -v "is ignored: it is neither" >&2); }

# uv installs the same pinned set as pip in well under half the time (docs/install.md: 19 s against 52 s here, both
# compiling bytecode; `pip freeze` identical). It reads none of pip's configuration, so pip's sources and limits are
# handed to it (scripts/pip_config_for_uv.py), and it picks a version across indexes as pip does. pip installs instead
# with BENCH_INSTALLER=pip, in an image build (BENCH_MPI set: its own pip settings), or where uv fails.
UV_VERSION=0.13.9
uv_pip() {
  local lines=() vars=() args=()
  mapfile -t lines < <("$venv/bin/python" "$here/scripts/pip_config_for_uv.py")
  for l in "${lines[@]}"; do if [[ "$l" == [A-Z_]*=* ]]; then vars+=("$l"); else args+=("$l"); fi; done
  # --compile-bytecode, as pip does by default: where PYTHONDONTWRITEBYTECODE=1 (this machine sets it) a venv without
  # .pyc files compiles torch and TensorFlow again in every process, and the first `make run` without it took 21 min
  # 45 s, every cell's launch longer (the tiny transformer's 1-worker cell 16 s against 6 s)
  env "${vars[@]}" UV_CACHE_DIR="${UV_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uv}" "$venv/bin/uv" pip install -q \
    --compile-bytecode --python "$venv/bin/python" --index-strategy unsafe-best-match "${args[@]}" "$@"
}
pins_install() {
  if [ "${BENCH_INSTALLER:-uv}" = uv ] && [ -z "$image_mpi" ] && quiet_pip install -q "uv==$UV_VERSION" \
     && uv_pip "$@"; then
    return 0
  fi
  [ "${BENCH_INSTALLER:-uv}" = uv ] && [ -z "$image_mpi" ] && say "uv could not install them: pip instead"
  quiet_pip install -q "$@"
}

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

# BENCH_MPI set (container images, one MPI ABI each): the main venv gets that ABI's Horovod and no second venv is
# made. Unset (this machine): the main venv is Open MPI's and .venv-mpich serves MPICH and Intel MPI cells.
image_mpi=${BENCH_MPI:-}
case "$image_mpi" in ""|openmpi|mpich) ;; *) say "BENCH_MPI must be openmpi or mpich, got '$image_mpi'"; exit 2 ;; esac

# 1. System packages: Open MPI (runtime + compiler wrappers Horovod builds against); cmake/g++ for the build.
# (MPICH and Intel MPI come as wheels, into a venv: step 4.)
# ccache on this machine (not in images, which compile once): the MPICH-ABI build reuses the Open MPI one's objects
# that do not include mpi.h (scripts/build_horovod.sh, ccache_env). One apt_install call: one `apt-get update`.
case "$image_mpi" in
  mpich) apt_install cmake g++ make ;;
  openmpi) apt_install openmpi-bin libopenmpi-dev cmake g++ make ;;
  *) apt_install openmpi-bin libopenmpi-dev cmake g++ make ccache ;;
esac
phase_done "system packages"
[ "$purpose" = build-tools ] && exit 0
if [ "$purpose" = images ]; then
  # `make images`: podman (with runc: podman's default crun cannot run on this machine's hybrid cgroups,
  # bench/images/engines.py) and debootstrap, which scripts/debian_base.sh makes the base image with.
  apt_install podman runc debootstrap
fi
if [ "$purpose" = test ]; then
  # Headless browser for the report test; a real single-node Slurm (munge for its authentication) for the Slurm
  # backend's tests.
  # The emulated cluster of the multi-node tests (scripts/testcluster.sh): namespaces, tc, an sshd per node.
  apt_install chromium slurm-wlm munge iproute2 openssh-server openssh-client
  phase_done "test system packages"
fi

# 2. The virtual environment with the pinned Python dependencies.
if [ ! -x "$venv/bin/python" ]; then
  say "creating $venv"
  "$py" -m venv "$venv"
fi
# The stamp: the pins' hash and the extras installed with them. A `test` set-up after a `run` one adds its extras; a
# `run` after a `test` finds what it needs already there.
stamp="$venv/.bench-deps"
pins=$(cat setup.cfg pyproject.toml | sha256sum | cut -c1-16)
case "$purpose" in test) extras="test,parquet,azureml,kubernetes,lint" ;; *) extras="" ;; esac
have=$(cat "$stamp" 2>/dev/null || true)
have_pins=${have%% *} have_extras=$([ "${have#* }" != "$have" ] && echo "${have#* }" || true)
missing_extra=$(for e in ${extras//,/ }; do [[ ",$have_extras," == *",$e,"* ]] || echo "$e"; done)
if [ "$have_pins" != "$pins" ] || [ -n "$missing_extra" ]; then
  [ "$have_pins" = "$pins" ] || have_extras=""  # new pins: the extras are installed again with them
  all=$(printf '%s\n' ${have_extras//,/ } ${extras//,/ } | sort -u | paste -sd, -)
  say "installing pinned dependencies${all:+ (with $all)} into $venv"
  pins_install --upgrade setuptools==80.9.0 wheel==0.45.1
  pins_install -e ".${all:+[$all]}"
  pins_install --no-deps tf-keras==2.21.0
  if [ -n "${BENCH_TF_DIST:-}" ]; then
    # GPU images: TensorFlow's GPU distribution (e.g. tensorflow[and-cuda]) at setup.cfg's tensorflow-cpu version.
    tf=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("tensorflow-cpu"))')
    quiet_pip uninstall -q -y tensorflow-cpu
    quiet_pip install -q "${BENCH_TF_DIST}==$tf"
  fi
  echo "$pins $all" > "$stamp"
fi
phase_done "Python packages"

# The MPICH-ABI runtime in a venv: the MPICH wheel (libmpi.so.12, mpicxx, hydra) in the venv itself, and Intel MPI's
# runtime wheel in a prefix of its own (same soname: the local backend and the intelmpi image put it first on
# LD_LIBRARY_PATH for intelmpi cells); then Horovod built against the MPICH wheel's mpicxx.
mpich_abi() {
  local v=$1
  local stamp="$v/.bench-mpi" want="mpich==5.0.2 impi_rt==2021.18.1"  # impi_rt 2021.19 needs a newer libfabric
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "installing the MPICH and Intel MPI runtimes into $v"
    "$v/bin/python" -m pip install -q --no-deps mpich==5.0.2 2> >(grep -v "is ignored: it is neither" >&2)
    "$v/bin/python" -m pip install -q --no-deps --prefix "$v/opt/impi" impi_rt==2021.18.1 \
      2> >(grep -v "is ignored: it is neither" >&2)
    echo "$want" > "$stamp"
  fi
  # LD_LIBRARY_PATH: a cached build's RUNPATH names the venv it was built in; this venv's libmpi.so.12 comes first.
  PATH="$v/bin:$PATH" LD_LIBRARY_PATH="$v/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" BENCH_MPI=mpich \
    BENCH_HOROVOD_FRAMEWORKS="${2:-pytorch tensorflow}" PYTHON="$v/bin/python" scripts/build_horovod.sh
}

# 3. Horovod 0.28.1, built from source with the C++17 fix, cached by what it was built against.
if [ "$image_mpi" = mpich ]; then
  mpich_abi "$venv"
  phase_done "Horovod (MPICH ABI)"
  exit 0
fi
BENCH_MPI=openmpi PYTHON="$venv/bin/python" scripts/build_horovod.sh
phase_done "Horovod (Open MPI)"
[ -n "$image_mpi" ] && exit 0

# 4. The MPICH-ABI environment for `mpi: mpich` and `mpi: intelmpi` cells. Horovod links one MPI ABI, so these cells
# need a Horovod of their own: a venv that sees the main venv's packages (a .pth line, so torch/TF are not installed
# twice) but has its own Horovod and MPI runtimes.
mpich_venv=${BENCH_MPICH_VENV:-$here/.venv-mpich}
if [ ! -x "$mpich_venv/bin/python" ]; then
  say "creating $mpich_venv (MPICH ABI: MPICH and Intel MPI cells)"
  "$py" -m venv "$mpich_venv"
fi
mpich_site=$("$mpich_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
main_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo "import site; site.addsitedir('$main_site')" > "$mpich_site/_bench_main_venv.pth"
# Both bindings, as in .venv: the matrix accepts TensorFlow and Keras under MPICH and Intel MPI, and a default install
# must run what it accepts (docs/install.md has what the TensorFlow binding adds to the build).
# BENCH_MPICH_FRAMEWORKS=pytorch builds PyTorch's alone; the plan then skips those cells, naming the fix.
mpich_abi "$mpich_venv" "${BENCH_MPICH_FRAMEWORKS:-pytorch tensorflow}"
phase_done "Horovod (MPICH ABI)"
