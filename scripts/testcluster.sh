#!/usr/bin/env bash
# An emulated cluster on one machine: N "nodes", each a network namespace with its own hostname, addresses, /etc/hosts
# and sshd, joined by veth links to a bridge, with optional tc shaping on the links. For the multi-node tests and for
# trying the multi-node launch lines by hand. Needs root and the Debian packages iproute2, openssh-server and
# openssh-client.
#
#   scripts/testcluster.sh up N [--rate R] [--delay D] [--slots S] [--prefix P] [--pin]
#                                                     (replaces a cluster of that prefix; --pin: node I runs on CPU
#                                                     (I-1) mod nproc only, a node a CPU of its own as on real
#                                                     machines, so one node's work never borrows another's core)
#   scripts/testcluster.sh down [--prefix P]          kill everything in the nodes, delete namespaces and the state dir
#   scripts/testcluster.sh status                     the nodes, and whether each sshd answers
#   scripts/testcluster.sh exec nodeK -- CMD...       run CMD on nodeK (its network, hostname and /etc/hosts)
#   scripts/testcluster.sh shape [--rate R] [--delay D] [--node nodeK]   (re)shape every link, or only what nodeK
#                                                     sends (--node); neither option removes the shaping
#   scripts/testcluster.sh link nodeK down|up         take nodeK's link down or bring it back
#   scripts/testcluster.sh sshd nodeK stop|start      stop nodeK's sshd (a node nobody can log in to) or start it again
#
# What `up` makes (P = prefix, default btc; i = 1..N):
#   namespace P-br       the bridge br0 and one port per node (named nodeI)
#   namespace P-nodeI    eth1 = 198.18.0.(10+i)/24 (the same interface name on every node: Open MPI's
#                        btl_tcp_if_include aborts when the names differ between nodes), lo up, tc on eth1's egress
#   per node             a PID namespace (its own pid 1 and /proc: ps on a node sees that node only), a UTS
#                        namespace (hostname nodeI), an IPC namespace, a time namespace (node i's monotonic clock
#                        reads i x 10^6 s ahead) and a mount namespace in which the
#                        state dir's hosts file is bind-mounted on /etc/hosts (node names resolve on every node, to
#                        eth1 addresses) and a boot id of its own on /proc/sys/kernel/random/boot_id (UCX and NCCL
#                        take equal boot ids for one machine and would use shared memory between nodes), and the
#                        state dir's node_bashrc on root's ~/.bashrc (a login on a node never runs the host's); sshd
#                        listens on 198.18.0.(10+i):22 only; everything started over ssh inherits all of these
#   with --pin           nodeI/cpus in the state dir names node I's CPU; its init, sshd and everything entered with
#                        `exec` run under `taskset -c` on it (children inherit the affinity)
#   state dir            $BENCH_CLUSTER_DIR (default /tmp/bench-testcluster): keys, ssh_config, hostfile, an `ssh`
#                        wrapper in bin/ that adds `-F ssh_config` (put bin/ first on PATH so every launcher's ssh
#                        finds the nodes), per node: sshd config and log, init.pid (the host's pid of the node's
#                        pid 1: `nsenter -t PID -n -u -m -i -p -T` enters the node)
# The root namespace gets no address and no interface: the control host (where mpirun, mpiexec, horovodrun or bench
# runs) is node1, entered with `exec node1 -- ...`. Addresses come from 198.18.0.0/24 (RFC 2544's benchmarking range)
# and exist only inside these namespaces; root may log in to the nodes with the generated key only.
set -euo pipefail

DIR=${BENCH_CLUSTER_DIR:-/tmp/bench-testcluster}
IFACE=eth1
NET=198.18.0
SSHD=/usr/sbin/sshd

die() { echo "testcluster: $*" >&2; exit 1; }
usage() { echo "testcluster: $*" >&2; exit 2; }

addr() { echo "$NET.$((10 + $1))"; }
ns() { echo "$PREFIX-node$1"; }
saved() { sed -n "s/^$1=//p" "$DIR/cluster.env" 2>/dev/null || true; }

need_root() {
  [ "$(id -u)" = 0 ] || die "must run as root (network namespaces, sshd)"
  for tool in ip tc unshare nsenter ssh ssh-keygen "$SSHD"; do
    command -v "$tool" >/dev/null || die "$tool not found; install the Debian packages iproute2 openssh-server openssh-client"
  done
}

check_rate() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?[kmgt]?bit$ ]] || usage "--rate '$1': expected a tc rate such as 1gbit or 100mbit"; }
check_delay() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] || usage "--delay '$1': expected a tc time such as 2ms or 100us"; }

# tbf's bucket must hold at least one timer tick of traffic; 4 ms worth (at least 64 KiB) keeps 1gbit+ at its rate.
burst_for() {
  awk -v r="$1" 'BEGIN { n = r + 0; u = substr(r, length(n "") + 1);
    m = (u ~ /^k/) ? 1e3 : (u ~ /^m/) ? 1e6 : (u ~ /^g/) ? 1e9 : (u ~ /^t/) ? 1e12 : 1;
    b = n * m / 8 / 250; if (b < 65536) b = 65536; printf "%d", b }'
}

# Shaping on each node's egress (eth1 inside the node): node A -> node B crosses A's egress once, so every direction
# of every pair sees the rate and the delay once.
shape_node() {
  local n=$1 rate=$2 delay=$3 netns
  netns=$(ns "$n")
  ip netns exec "$netns" tc qdisc del dev "$IFACE" root 2>/dev/null || true
  if [ -n "$delay" ] && [ -n "$rate" ]; then
    ip netns exec "$netns" tc qdisc add dev "$IFACE" root handle 1: netem delay "$delay" limit 100000
    ip netns exec "$netns" tc qdisc add dev "$IFACE" parent 1:1 handle 10: tbf rate "$rate" \
      burst "$(burst_for "$rate")" latency 100ms
  elif [ -n "$delay" ]; then
    ip netns exec "$netns" tc qdisc add dev "$IFACE" root netem delay "$delay" limit 100000
  elif [ -n "$rate" ]; then
    ip netns exec "$netns" tc qdisc add dev "$IFACE" root tbf rate "$rate" burst "$(burst_for "$rate")" latency 100ms
  fi
}

# The host's pid of node $1's pid 1 (its init, which holds the node's namespaces), if it is alive. Alive means in the
# node's network namespace, not only a live pid: init.pid outlives a machine's restart and its pid gets reused, and
# entering an unrelated process's namespaces would run the node's work on the host.
init_pid() {
  local pid net
  pid=$(cat "$DIR/node$1/init.pid" 2>/dev/null) && [ -n "$pid" ] || return 1
  net=$(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null) || return 1
  [ "$net" = "$(stat -L -c %i "/run/netns/$(ns "$1")" 2>/dev/null)" ] && echo "$pid"
}

# `taskset -c CPU` when node $1 is pinned (up --pin), else nothing: the prefix for anything started in the node.
pin() {
  local f=$DIR/node$1/cpus
  [ -s "$f" ] && printf 'taskset -c %s' "$(cat "$f")"
  return 0
}

# The host's pid of node $1's listening sshd (a child of the node's init), if there is one.
sshd_pid() {
  local init
  init=$(init_pid "$1") || return 1
  pgrep -P "$init" -x sshd
}

# Runs a command on node $1 (all its namespaces: network, hostname, IPC, mount, pid, time), in the caller's directory.
in_node() {
  local n=$1 pid; shift
  pid=$(init_pid "$n") || die "node$n is not up; run: $0 up N"
  # shellcheck disable=SC2046
  exec $(pin "$n") nsenter -t "$pid" -n -u -m -i -p -T --wd="$PWD" -- "$@"
}

cmd_down() {
  local prefix=$PREFIX netns pids
  if [ -f "$DIR/cluster.env" ]; then prefix=$(saved prefix); fi
  # Every namespace of this prefix (also ones a crashed `up` left before writing its state).
  for netns in $(ip netns list | awk '{print $1}' | grep -E "^$prefix-(br|node[0-9]+)$" || true); do
    pids=$(ip netns pids "$netns" 2>/dev/null || true)
    if [ -n "$pids" ]; then
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      for _ in 1 2 3 4 5 6 7 8 9 10; do
        pids=$(ip netns pids "$netns" 2>/dev/null || true)
        [ -z "$pids" ] && break
        sleep 0.2
      done
      # shellcheck disable=SC2086
      [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$netns" 2>/dev/null || true  # deleting a namespace deletes its veth ends, the bridge with P-br
  done
  # The state dir: only one this script made (its marker), never an arbitrary directory the variable points at.
  if [ -f "$DIR/cluster.env" ]; then rm -rf "$DIR"
  elif [ -d "$DIR" ]; then rmdir "$DIR" 2>/dev/null || true
  fi
}

write_ssh_files() {
  local nodes=$1 slots=$2 i
  mkdir -p "$DIR/ssh" "$DIR/bin"
  chmod 700 "$DIR/ssh"
  ssh-keygen -q -t ed25519 -N "" -C "bench-testcluster client" -f "$DIR/ssh/client_key"
  # Only from inside the cluster, with this key.
  echo "from=\"$NET.0/24\" $(cat "$DIR/ssh/client_key.pub")" >"$DIR/ssh/authorized_keys"
  {
    echo "# Written by scripts/testcluster.sh: use with ssh -F, or put $DIR/bin (an ssh that adds -F) first on PATH."
    for i in $(seq 1 "$nodes"); do printf 'Host node%s\n  HostName %s\n' "$i" "$(addr "$i")"; done
    printf 'Host node* %s.*\n' "$NET"
    printf '  Port 22\n  User root\n  IdentityFile %s\n  IdentitiesOnly yes\n' "$DIR/ssh/client_key"
    printf '  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n  BatchMode yes\n'
    printf '  ConnectTimeout 5\n'
  } >"$DIR/ssh_config"
  printf '#!/bin/sh\n# ssh to the emulated nodes (scripts/testcluster.sh).\nexec /usr/bin/ssh -F %s "$@"\n' \
    "$DIR/ssh_config" >"$DIR/bin/ssh"
  chmod 755 "$DIR/bin/ssh"
  : >"$DIR/hostfile"
  for i in $(seq 1 "$nodes"); do echo "node$i slots=$slots" >>"$DIR/hostfile"; done
  # The nodes' root .bashrc (bind-mounted on the host's in each node's mount namespace): a fresh node's, not the
  # host's. The host's may start tools that keep state in the shared home: pyenv's `init` rehashes its shims under a
  # lock file, and a login killed while holding it (a node taken down mid-login) leaves the lock behind, after which
  # every login on every node waits 60 s for it and the launchers' node checks time out. Commands sent to the nodes
  # carry the PATH they need (the hosts backend exports it), as they must on a real cluster.
  echo "# Written by scripts/testcluster.sh: root's .bashrc on the emulated nodes (the host's is not run there)." \
    >"$DIR/node_bashrc"
  printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' >"$DIR/hosts"
  for i in $(seq 1 "$nodes"); do echo "$(addr "$i") node$i" >>"$DIR/hosts"; done
}

start_node() {
  local i=$1 netns nd
  netns=$(ns "$i"); nd=$DIR/node$i
  mkdir -p "$nd"
  ssh-keygen -q -t ed25519 -N "" -C "node$i" -f "$nd/host_key"
  cat >"$nd/sshd_config" <<EOF
# Written by scripts/testcluster.sh for node$i.
ListenAddress $(addr "$i"):22
HostKey $nd/host_key
PidFile $nd/sshd.pid
# (the pid as the node sees it; from outside, the node is entered through init.pid)
AuthorizedKeysFile $DIR/ssh/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
# Launchers open one connection per node at once, sometimes several.
MaxStartups 64:30:128
MaxSessions 64
Subsystem sftp internal-sftp
EOF
  # A boot id of its own: UCX (and NCCL) tell "same machine" from the boot id and would otherwise reach a rank on
  # another node through shared memory (UCX picked sysv/cma between two nodes here), never crossing eth1.
  cat /proc/sys/kernel/random/uuid >"$nd/boot_id"
  if [ "$PIN" = 1 ]; then echo $(( (i - 1) % $(nproc) )) >"$nd/cpus"; fi
  start_init "$i"
  run_sshd "$i"
}

# Root's home directory, whose .bashrc every ssh login on a node runs (Debian's bash reads it for a command sent
# over ssh too).
root_home() { getent passwd root | cut -d: -f6; }

# The machine's cgroup mounts (dir, type, options), which the node mounts again: `ip netns exec` gives the node a sysfs
# of its own (its network devices), which hides them, and a container engine on the node (podman's runc) needs them
# to make a container's cgroup, as on a real machine. Mounting a hierarchy again joins the same one.
cgroup_mounts() {
  awk '$9 == "tmpfs" && $5 == "/sys/fs/cgroup" {print $5, "tmpfs", $NF}
       ($9 == "cgroup" || $9 == "cgroup2") && $5 ~ "^/sys/fs/cgroup" {print $5, $9, $NF}' /proc/self/mountinfo
}

# Node $1's own process world, inside its network namespace: pid 1 of a PID namespace of its own (its own /proc:
# ps and pgrep on a node see only that node's processes, as on a real machine), a UTS namespace (hostname nodeI), an
# IPC namespace (System V shared memory is per machine), a mount namespace (the hosts file on /etc/hosts, the boot id)
# and a time namespace: node I's monotonic and boot-time clocks read I x 10^6 s ahead of the host's, as if every
# node had booted at another time, so a timestamp of one node subtracted from another's shows. pid 1 is a shell that
# reaps orphans (a pid 1 gets no signal it has no handler for: TERM is trapped for `down`).
start_init() {
  local i=$1 netns nd launcher init="" child pinned mounts home ours
  netns=$(ns "$i"); nd=$DIR/node$i
  # Worked out here, not in the background command's arguments: a command substitution there is a short-lived child
  # of the launcher, and the loop below, looking for the launcher's child, took one for the node's init now and then
  # (`up` then failed with "its init exited": 2 of 12 tries on 2026-12-04).
  pinned=$(pin "$i"); mounts=$(cgroup_mounts); home=$(root_home)
  # shellcheck disable=SC2086
  ip netns exec "$netns" $pinned unshare --uts --ipc --mount --pid --fork --mount-proc --propagation slave \
    --time --monotonic "$((i * 1000000))" --boottime "$((i * 1000000))" -- sh -c \
    'hostname "$1" && mount --bind "$2" /etc/hosts && mount --bind "$3" /proc/sys/kernel/random/boot_id || exit 1
     if [ -f "$5/.bashrc" ]; then mount --bind "$6" "$5/.bashrc" || exit 1; fi
     printf "%s\n" "$4" | while read -r dir type opts; do
       [ -n "$dir" ] && { mkdir -p "$dir"; mount -t "$type" -o "$opts" "$type" "$dir"; } || true
     done
     trap "exit 0" TERM
     while :; do sleep 1 & wait; done' \
    sh "node$i" "$DIR/hosts" "$nd/boot_id" "$mounts" "$home" "$DIR/node_bashrc" \
    </dev/null >"$nd/init.log" 2>&1 &
  launcher=$!
  # The node's init: the launcher's child in a PID namespace other than ours (unshare's forked child).
  ours=$(stat -L -c %i /proc/$$/ns/pid)
  for _ in $(seq 1 50); do
    for child in $(pgrep -P "$launcher" || true); do
      [ "$(stat -L -c %i "/proc/$child/ns/pid" 2>/dev/null)" != "$ours" ] || continue
      init=$child
    done
    [ -n "$init" ] && break
    sleep 0.1
  done
  [ -n "$init" ] || die "node$i's namespaces did not start (see $nd/init.log)"
  echo "$init" >"$nd/init.pid"
}

# Starts node $1's sshd under its init (also after `sshd nodeK stop`); everything started over ssh on the node
# inherits the node's namespaces.
run_sshd() {
  local i=$1 nd pid
  nd=$DIR/node$i
  pid=$(init_pid "$i") || die "node$i is not up: its init exited ($(tail -n 3 "$nd/init.log" 2>/dev/null | tr '\n' ' '))"
  # shellcheck disable=SC2046
  $(pin "$i") nsenter -t "$pid" -n -u -m -i -p -T -- "$SSHD" -f "$nd/sshd_config" -E "$nd/sshd.log" \
    || die "sshd did not start on node$i (see $nd/sshd.log)"
}

cmd_up() {
  local nodes=$1 rate=$2 delay=$3 slots=$4 i netns br=$PREFIX-br
  cmd_down
  trap 'cmd_down' EXIT  # a failed `up` leaves nothing behind
  mkdir -p "$DIR"
  chmod 755 "$DIR"
  printf 'prefix=%s\nnodes=%s\nrate=%s\ndelay=%s\nslots=%s\npin=%s\n' "$PREFIX" "$nodes" "$rate" "$delay" "$slots" "$PIN" \
    >"$DIR/cluster.env"
  mkdir -p /run/sshd  # sshd's privilege-separation directory (its service unit normally makes it)
  write_ssh_files "$nodes" "$slots"
  ip netns add "$br"
  ip -n "$br" link set lo up
  ip -n "$br" link add br0 type bridge
  ip -n "$br" link set br0 up
  if [ -n "$delay" ] && ! ip netns exec "$br" tc qdisc add dev lo root netem delay 1ms 2>/dev/null; then
    die "--delay needs the kernel's netem qdisc (CONFIG_NET_SCH_NETEM), which this kernel lacks"
  fi
  ip netns exec "$br" tc qdisc del dev lo root 2>/dev/null || true
  for i in $(seq 1 "$nodes"); do
    netns=$(ns "$i")
    ip netns add "$netns"
    ip -n "$netns" link set lo up
    ip link add "$IFACE" netns "$netns" type veth peer name "node$i" netns "$br"
    ip -n "$br" link set "node$i" master br0 up
    ip -n "$netns" addr add "$(addr "$i")/24" dev "$IFACE"
    ip -n "$netns" link set "$IFACE" up
    shape_node "$i" "$rate" "$delay"
    start_node "$i"
  done
  # Ready when every sshd answers from node1 (the control host).
  for i in $(seq 1 "$nodes"); do
    for _ in $(seq 1 50); do
      probe 1 "$i" >/dev/null 2>&1 && continue 2
      sleep 0.1
    done
    die "node$i's sshd does not answer (see $DIR/node$i/sshd.log)"
  done
  trap - EXIT
  cmd_status
}

# ssh from node $1 to node $2; prints the hostname the session sees.
probe() {
  local pid
  pid=$(init_pid "$1") || return 1
  nsenter -t "$pid" -n -u -m -i -p -T -- /usr/bin/ssh -F "$DIR/ssh_config" "node$2" hostname
}

cmd_status() {
  [ -f "$DIR/cluster.env" ] || { echo "no cluster (state dir $DIR)"; return 0; }
  local nodes i answer qdisc
  nodes=$(saved nodes)
  echo "cluster: $nodes nodes, prefix $(saved prefix), rate $(saved rate), delay $(saved delay)," \
    "state $DIR, control host node1"
  echo "  ssh_config $DIR/ssh_config   hostfile $DIR/hostfile   ssh wrapper $DIR/bin/ssh"
  for i in $(seq 1 "$nodes"); do
    if answer=$(probe 1 "$i" 2>/dev/null); then answer="sshd answers (hostname $answer)"
    else answer="sshd does not answer"
    fi
    qdisc=$(ip -n "$(ns "$i")" -br link show "$IFACE" 2>/dev/null | awk '{print $2}')
    [ -s "$DIR/node$i/cpus" ] && answer="$answer, pinned to CPU $(cat "$DIR/node$i/cpus")"
    printf '  node%-3s %-16s %s %s %-5s %s\n' "$i" "$(addr "$i")" "$(ns "$i")" "$IFACE" "${qdisc:-absent}" "$answer"
  done
}

# --- command line -------------------------------------------------------------------------------------------------
[ $# -ge 1 ] || usage "expected a command: up N | down | status | exec nodeK -- CMD | shape | link nodeK down|up | sshd nodeK stop|start"
cmd=$1; shift
PREFIX=$(saved prefix); PREFIX=${PREFIX:-btc}
rate="" delay="" slots=1 nodes="" PIN=0 NODE=""
parse_opts() {
  while [ $# -gt 0 ]; do
    case $1 in
      --rate) [ $# -ge 2 ] || usage "--rate needs a value"; check_rate "$2"; rate=$2; shift 2 ;;
      --delay) [ $# -ge 2 ] || usage "--delay needs a value"; check_delay "$2"; delay=$2; shift 2 ;;
      --slots) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || usage "--slots '${2:-}': expected a positive integer"; slots=$2; shift 2 ;;
      --pin) PIN=1; shift ;;
      --node) [[ ${2:-} =~ ^node([1-9][0-9]*)$ ]] || usage "--node '${2:-}': expected a node name nodeK"
        NODE=${BASH_REMATCH[1]}; shift 2 ;;
      --prefix) [[ ${2:-} =~ ^[a-z][a-z0-9]{0,11}$ ]] || usage "--prefix '${2:-}': expected 1-12 of [a-z0-9], letter first"
        PREFIX=$2; shift 2 ;;
      *) usage "unknown option '$1'" ;;
    esac
  done
}
case $cmd in
  up)
    [[ ${1:-} =~ ^[1-9][0-9]*$ ]] && [ "$1" -le 200 ] || usage "up: expected a node count 1-200, got '${1:-}'"
    nodes=$1; shift; parse_opts "$@"; need_root; cmd_up "$nodes" "$rate" "$delay" "$slots" ;;
  down) parse_opts "$@"; need_root; cmd_down ;;
  status) [ $# -eq 0 ] || usage "status takes no arguments"; need_root; cmd_status ;;
  exec)
    [[ ${1:-} =~ ^node([1-9][0-9]*)$ ]] || usage "exec: expected a node name nodeK, got '${1:-}'"
    n=${BASH_REMATCH[1]}; shift
    [ "${1:-}" = -- ] && shift
    [ $# -ge 1 ] || usage "exec node$n: expected a command after --"
    need_root; in_node "$n" "$@" ;;
  shape)
    parse_opts "$@"; need_root
    [ -f "$DIR/cluster.env" ] || die "no cluster to shape (state dir $DIR)"
    if [ -n "$NODE" ]; then  # one node's egress only: every link of that node, in the direction it sends
      [ "$NODE" -le "$(saved nodes)" ] || usage "shape: node$NODE does not exist (the cluster has $(saved nodes) nodes)"
      shape_node "$NODE" "$rate" "$delay"
    else
      for i in $(seq 1 "$(saved nodes)"); do shape_node "$i" "$rate" "$delay"; done
      sed -i "s/^rate=.*/rate=$rate/; s/^delay=.*/delay=$delay/" "$DIR/cluster.env"
    fi ;;
  link)
    [[ ${1:-} =~ ^node([1-9][0-9]*)$ ]] && [[ ${2:-} =~ ^(up|down)$ ]] && [ $# -eq 2 ] \
      || usage "link: expected nodeK down|up"
    need_root
    [ -f "$DIR/cluster.env" ] || die "no cluster (state dir $DIR)"
    n=${1#node}
    [ "$n" -le "$(saved nodes)" ] || usage "link: node$n does not exist (the cluster has $(saved nodes) nodes)"
    ip -n "$(ns "$n")" link set "$IFACE" "$2" ;;
  sshd)
    [[ ${1:-} =~ ^node([1-9][0-9]*)$ ]] && [[ ${2:-} =~ ^(stop|start)$ ]] && [ $# -eq 2 ] \
      || usage "sshd: expected nodeK stop|start"
    need_root
    [ -f "$DIR/cluster.env" ] || die "no cluster (state dir $DIR)"
    n=${1#node}
    [ "$n" -le "$(saved nodes)" ] || usage "sshd: node$n does not exist (the cluster has $(saved nodes) nodes)"
    if [ "$2" = stop ]; then
      # The listening daemon only: sessions it started and the node's other processes live on.
      if pid=$(sshd_pid "$n"); then
        kill -TERM "$pid"
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then die "node$n's sshd (pid $pid) did not stop"; fi
      fi
    elif ! sshd_pid "$n" >/dev/null; then
      run_sshd "$n"
      for _ in $(seq 1 50); do probe 1 "$n" >/dev/null 2>&1 && exit 0; sleep 0.1; done
      die "node$n's sshd does not answer (see $DIR/node$n/sshd.log)"
    fi ;;
  *) usage "unknown command '$cmd': expected up, down, status, exec, shape, link or sshd" ;;
esac
