#!/usr/bin/env bash
# A real single-node Slurm on this machine, for the slurm backend's tests and for trying the backend by hand.
# Idempotent: a second call with everything up returns at once. Silent on success; one line on stderr and a non-zero
# exit when it cannot. Needs root, slurm-wlm and munge (Debian packages). No systemd, no cgroups: it runs in a
# container. Everything lives under $BENCH_SLURM_DIR (default /var/lib/bench-slurm), with its own munge socket and
# ports, so it does not fight with another Slurm or munge on the machine.
#
# Clients find this cluster through SLURM_CONF=$BENCH_SLURM_DIR/slurm.conf (also linked to /etc/slurm/slurm.conf
# when that file does not exist yet).
set -euo pipefail

DIR=${BENCH_SLURM_DIR:-/var/lib/bench-slurm}
CTLD_PORT=${BENCH_SLURM_CTLD_PORT:-6917}
SLURMD_PORT=${BENCH_SLURM_SLURMD_PORT:-6918}
PARTITION=${BENCH_SLURM_PARTITION:-bench}
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF
# shellcheck source=lib/slurm_conf.sh
. "$(cd "$(dirname "$0")" && pwd)/lib/slurm_conf.sh"

die() { echo "slurm_local: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (slurmd starts jobs as their users)"
for tool in munged munge slurmctld slurmd sinfo scontrol sbatch; do
  command -v "$tool" >/dev/null || die "$tool not found; install the Debian packages slurm-wlm and munge"
done

# A pid file ($1) names a live $2 (munged, slurmctld, slurmd). The name is checked, not only the pid: pid files
# outlive a machine's restart and their pids get reused (in one CI run slurmd.pid named an unrelated live process,
# slurmd was not started and the node stayed 'unknown*').
alive() { [ -s "$1" ] && [ "$(cat "/proc/$(cat "$1")/comm" 2>/dev/null)" = "$2" ]; }

mkdir -p "$DIR"/{munge,state,spool,log}
chmod 755 "$DIR"
chmod 700 "$DIR/munge"

# --- munge: our own key and socket -----------------------------------------------------------------------------
SOCKET=$DIR/munge/munge.socket
if [ ! -s "$DIR/munge/munge.key" ]; then
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1 count=1024 status=none
  chmod 400 "$DIR/munge/munge.key"
fi
if ! alive "$DIR/munge/munged.pid" munged; then
  rm -f "$SOCKET" "$SOCKET.lock"
  munged --force --socket="$SOCKET" --key-file="$DIR/munge/munge.key" --pid-file="$DIR/munge/munged.pid" \
    --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" \
    || die "munged did not start (see $DIR/log/munged.log)"
fi
munge -n -S "$SOCKET" | unmunge -S "$SOCKET" >/dev/null 2>&1 || die "munge does not answer on $SOCKET"

# --- slurm.conf from what slurmd sees on this machine ------------------------------------------------------------
HOST=$(hostname -s)
NEW=$(slurm_conf writer=scripts/slurm_local.sh about="a single-node cluster for bench's slurm backend." \
  cluster=bench controller="$HOST" ports="$CTLD_PORT $SLURMD_PORT" dir="$DIR" socket="$SOCKET" \
  nodes="NodeName=$HOST $(slurm_node_resources 1) State=UNKNOWN" partition="$PARTITION $HOST")
CHANGED=0
if slurm_conf_update "$CONF" "$NEW"; then CHANGED=1; fi
[ -e /etc/slurm/slurm.conf ] || { mkdir -p /etc/slurm; ln -s "$CONF" /etc/slurm/slurm.conf; }

# --- daemons ------------------------------------------------------------------------------------------------------
stop() {
  alive "$1" "$2" || return 0
  kill "$(cat "$1")"
  for _ in $(seq 50); do alive "$1" "$2" || break; sleep 0.1; done
}
if [ "$CHANGED" = 1 ]; then
  stop "$DIR/slurmd.pid" slurmd
  stop "$DIR/slurmctld.pid" slurmctld
fi
if ! alive "$DIR/slurmctld.pid" slurmctld; then
  slurmctld -f "$CONF" >>"$DIR/log/slurmctld.out" 2>&1 || die "slurmctld did not start (see $DIR/log/slurmctld.log)"
fi
if ! alive "$DIR/slurmd.pid" slurmd; then
  slurmd -f "$CONF" >>"$DIR/log/slurmd.out" 2>&1 || die "slurmd did not start (see $DIR/log/slurmd.log)"
fi

# --- wait for the node to be usable -------------------------------------------------------------------------------
for _ in $(seq 300); do
  state=$(sinfo -h -n "$HOST" -o %T 2>/dev/null | head -1 || true)
  case "$state" in
    idle|mixed|allocated|completing) exit 0 ;;
    down*|drain*|drained*) scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
  esac
  sleep 0.1
done
die "node $HOST is not idle after 30 s (sinfo says '${state:-nothing}'; see $DIR/log/)"
