#!/usr/bin/env bash
# A real Slurm across the emulated cluster of scripts/testcluster.sh: slurmctld and munged on node1, one slurmd on
# every node (each inside its node's network, UTS and mount namespaces, so a job's tasks see that node's hostname and
# address). For the slurm backend's multi-node tests and for trying it by hand. Needs root, slurm-wlm and munge
# (Debian packages), and a cluster that is up (`scripts/testcluster.sh up N`).
#
#   scripts/slurm_cluster.sh up      start (idempotent: with everything up it returns at once); silent on success
#   scripts/slurm_cluster.sh down    cancel every job, stop the daemons, end what the jobs left, delete the state
#
# State lives in $BENCH_CLUSTER_DIR/slurm (the cluster's state dir, so `testcluster.sh down` removes it too, and ends
# every daemon: they all run inside the nodes' namespaces). Clients must run on a node, where slurmctld is reachable:
#   SLURM_CONF=$BENCH_CLUSTER_DIR/slurm/slurm.conf scripts/testcluster.sh exec node1 -- sinfo
set -euo pipefail

CLUSTER=${BENCH_CLUSTER_DIR:-/tmp/bench-testcluster}
DIR=$CLUSTER/slurm
CONF=$DIR/slurm.conf
SOCKET=$DIR/munge/munge.socket
PARTITION=bench
HERE=$(cd "$(dirname "$0")" && pwd)
export SLURM_CONF=$CONF BENCH_CLUSTER_DIR=$CLUSTER
# shellcheck source=lib/slurm_conf.sh
. "$HERE/lib/slurm_conf.sh"

die() { echo "slurm_cluster: $*" >&2; exit 1; }
usage() { echo "slurm_cluster: $*" >&2; exit 2; }

saved() { sed -n "s/^$1=//p" "$CLUSTER/cluster.env" 2>/dev/null || true; }
on() { local node=$1; shift; "$HERE/testcluster.sh" exec "$node" -- "$@"; }
# Pid files hold the pid as the node sees it (each node has its own pid namespace), so they are read and signalled
# inside the node. A node that is gone has nothing alive. The process's name must be the daemon's the file is named
# for (munged.pid, slurmctld.pid, slurmd-nodeI.pid): a fresh node numbers its processes from 1 again, so a pid file
# left from an earlier cluster can name some other live process.
pid_in() {
  local node=$1 pid daemon
  daemon=$(basename "$2" .pid); daemon=${daemon%%-node*}
  pid=$(cat "$2" 2>/dev/null) && [ -n "$pid" ] \
    && [ "$(on "$node" cat "/proc/$pid/comm" 2>/dev/null)" = "$daemon" ] && echo "$pid"
}
alive() { pid_in "$1" "$2" >/dev/null; }
stop() {
  local node=$1 pid
  pid=$(pid_in "$node" "$2") || return 0
  on "$node" kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do on "$node" kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  on "$node" kill -KILL "$pid" 2>/dev/null || true
}

need() {
  [ "$(id -u)" = 0 ] || die "must run as root (slurmd starts jobs as their users)"
  for tool in munged munge unmunge slurmctld slurmd sinfo scontrol squeue scancel; do
    command -v "$tool" >/dev/null || die "$tool not found; install the Debian packages slurm-wlm and munge"
  done
  [ -f "$CLUSTER/cluster.env" ] || die "no emulated cluster in $CLUSTER; run: scripts/testcluster.sh up 2"
  NODES=$(saved nodes); PREFIX=$(saved prefix)
}

# Every emulated node shares this machine, so each gets its CPUs and an equal share of its memory.
write_conf() {
  local i nodes="" resources
  resources=$(slurm_node_resources "$NODES")
  for i in $(seq 1 "$NODES"); do
    nodes+="${nodes:+$'\n'}NodeName=node$i NodeAddr=198.18.0.$((10 + i)) $resources State=UNKNOWN"
  done
  slurm_conf writer=scripts/slurm_cluster.sh \
    about="a $NODES-node cluster on the emulated nodes of scripts/testcluster.sh." cluster=benchnodes \
    controller="node1(198.18.0.11)" dir="$DIR" socket="$SOCKET" slurmd="slurmd-%n" tmpfs="$DIR/tmp/%n" \
    nodes="$nodes" partition="$PARTITION node[1-$NODES]"
}

# slurmd 22.05 will not start without a cgroup file system (even with proctrack/linuxproc and task/none), and a node's
# mount namespace has the /sys of its network namespace, without the host's /sys/fs/cgroup. The node gets the same
# mounts (a tmpfs, and each hierarchy mounted again with the host's options: the same hierarchies, not new ones).
cgroups_on() {
  local node=$1 mounts
  # "<target> <fstype> <super options>" for the host's /sys/fs/cgroup and what is mounted under it.
  mounts=$(awk '$5 ~ "^/sys/fs/cgroup(/|$)" { for (i = 7; $i != "-"; i++); print $5, $(i + 1), $(i + 3) }' \
    /proc/self/mountinfo)
  [ -n "$mounts" ] || die "the host has nothing mounted on /sys/fs/cgroup, which slurmd needs"
  on "$node" sh -c 'mountpoint -q /sys/fs/cgroup && exit 0
    printf "%s\n" "$1" | while read -r target type opts; do
      case $type in
        tmpfs) mount -t tmpfs -o mode=755 tmpfs "$target" ;;
        cgroup) mkdir -p "$target" && mount -t cgroup -o "${opts#rw,}" cgroup "$target" ;;
        cgroup2) mkdir -p "$target" && mount -t cgroup2 cgroup2 "$target" ;;
      esac || exit 1
    done' sh "$mounts" || die "could not mount the cgroup file systems on $node"
}

cmd_up() {
  local i new state
  mkdir -p "$DIR"/{munge,state,spool,log}
  for i in $(seq 1 "$NODES"); do mkdir -p "$DIR/spool/slurmd-node$i" "$DIR/tmp/node$i"; done
  chmod 755 "$DIR"
  chmod 700 "$DIR/munge"
  # munge: one daemon (on node1) and one key for every node. Its socket is a file on the shared filesystem, reachable
  # from every node's namespaces (a path socket, unlike an abstract one, does not belong to a network namespace).
  if [ ! -s "$DIR/munge/munge.key" ]; then
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1 count=1024 status=none
    chmod 400 "$DIR/munge/munge.key"
  fi
  if ! alive node1 "$DIR/munge/munged.pid"; then
    rm -f "$SOCKET" "$SOCKET.lock"
    on node1 munged --force --socket="$SOCKET" --key-file="$DIR/munge/munge.key" \
      --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" \
      || die "munged did not start (see $DIR/log/munged.log)"
  fi
  for i in $(seq 1 "$NODES"); do
    on "node$i" sh -c 'munge -n -S "$1" | unmunge -S "$1"' sh "$SOCKET" >/dev/null 2>&1 \
      || die "munge does not answer on $SOCKET from node$i"
  done

  new=$(write_conf)
  if slurm_conf_update "$CONF" "$new"; then
    for i in $(seq 1 "$NODES"); do stop "node$i" "$DIR/slurmd-node$i.pid"; done
    stop node1 "$DIR/slurmctld.pid"
  fi
  if ! alive node1 "$DIR/slurmctld.pid"; then
    on node1 slurmctld -f "$CONF" >>"$DIR/log/slurmctld.out" 2>&1 \
      || die "slurmctld did not start on node1 (see $DIR/log/slurmctld.log)"
  fi
  for i in $(seq 1 "$NODES"); do
    cgroups_on "node$i"
    if ! alive "node$i" "$DIR/slurmd-node$i.pid"; then
      on "node$i" slurmd -f "$CONF" >>"$DIR/log/slurmd-node$i.out" 2>&1 \
        || die "slurmd did not start on node$i (see $DIR/log/slurmd-node$i.log)"
    fi
  done

  # Usable when every node is idle (or busy with jobs), as slurmctld sees it from node1.
  for _ in $(seq 300); do
    state=$(on node1 sinfo -h -N -o '%N %T' 2>/dev/null || true)
    if [ "$(grep -cE ' (idle|mixed|allocated|completing)$' <<<"$state")" = "$NODES" ]; then return 0; fi
    for i in $(grep -E ' (down|drain)' <<<"$state" | awk '{print $1}'); do
      on node1 scontrol update NodeName="$i" State=RESUME >/dev/null 2>&1 || true
    done
    sleep 0.1
  done
  die "not every node is idle after 30 s (sinfo says: $(tr '\n' ';' <<<"${state:-nothing}"); see $DIR/log/)"
}

# Ends what jobs left on the nodes: slurmstepd outlives a stopped slurmd, and so would its tasks.
sweep_jobs() {
  local i pid pids
  for i in $(seq 1 "$NODES"); do
    pids=$(ip netns pids "$PREFIX-node$i" 2>/dev/null || true)
    for pid in $pids; do
      if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmstepd ] ||
         tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'SLURM_CLUSTER_NAME=benchnodes'; then
        kill -KILL "$pid" 2>/dev/null || true
      fi
    done
  done
}

cmd_down() {
  local i
  [ -d "$DIR" ] || return 0
  if alive node1 "$DIR/slurmctld.pid"; then
    on node1 scancel --quiet --user=root >/dev/null 2>&1 || true
    for _ in $(seq 100); do
      [ -z "$(on node1 squeue -h -o %i 2>/dev/null || true)" ] && break
      sleep 0.1
    done
  fi
  for i in $(seq 1 "$NODES"); do stop "node$i" "$DIR/slurmd-node$i.pid"; done
  stop node1 "$DIR/slurmctld.pid"
  stop node1 "$DIR/munge/munged.pid"
  sweep_jobs
  rm -rf "$DIR"
}

[ $# -eq 1 ] || usage "expected one command: up | down"
case $1 in
  up) need; cmd_up ;;
  # No cluster: nothing of this Slurm can be left (its daemons lived in the nodes' namespaces, its state in the
  # cluster's state dir, and `testcluster.sh down` removed both).
  down) [ -f "$CLUSTER/cluster.env" ] || exit 0; need; cmd_down ;;
  *) usage "unknown command '$1': expected up or down" ;;
esac
