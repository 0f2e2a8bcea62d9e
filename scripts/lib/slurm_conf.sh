# The one slurm.conf writer, sourced by scripts/slurm_local.sh (one node, this machine) and scripts/slurm_cluster.sh
# (the emulated nodes of scripts/testcluster.sh). Both clusters run in a container: no cgroups, no accounting.

# This machine's node line from `slurmd -C` without its NodeName (CPUs, sockets, cores, threads, RealMemory), with
# 90 % of its memory (the rest is kept for the OS) shared equally among $1 nodes that all run on this machine.
slurm_node_resources() {
  local shares=$1 line mem
  line=$(slurmd -C | head -1)
  mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$line")
  sed "s/RealMemory=[0-9]*/RealMemory=$((mem * 9 / 10 / shares))/; s/^NodeName=[^ ]* //" <<<"$line"
}

# Prints a slurm.conf. Arguments are name=value words:
#   writer     the script that writes it, for the header line
#   about      what the cluster is, for the header line
#   cluster    ClusterName
#   controller SlurmctldHost
#   ports      "CTLD SLURMD": SlurmctldPort and SlurmdPort (optional; Slurm's defaults otherwise)
#   dir        where state, spool, pid and log files live
#   socket     munge's socket
#   slurmd     the name of slurmd's pid and log files under dir ("slurmd-%n" when several slurmd share dir)
#   tmpfs      TmpFS (optional; for nodes that share one /tmp)
#   nodes      the NodeName lines, one per line
#   partition  "NAME NODES": the one partition, the default
slurm_conf() {
  local writer about cluster controller ports="" dir socket slurmd=slurmd tmpfs="" nodes partition
  local "$@"
  echo "# Written by $writer: $about"
  echo "ClusterName=$cluster"
  echo "SlurmctldHost=$controller"
  if [ -n "$ports" ]; then
    echo "SlurmctldPort=${ports% *}"
    echo "SlurmdPort=${ports#* }"
  fi
  cat <<CONF
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/slurmd-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/$slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/$slurmd.log
CONF
  if [ -n "$tmpfs" ]; then
    cat <<CONF
# The nodes share one /tmp; the pmix plugin makes per-step directories under TmpFS with names that do not hold the
# node, so two nodes of one step would collide in /tmp. A directory per node instead (%n: the node's name).
TmpFS=$tmpfs
CONF
  fi
  cat <<CONF
# No cgroups in a container: track job processes through /proc, no task binding, no accounting.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
MpiDefault=none
ReturnToService=2
# Finished jobs stay visible to 'scontrol show job' for an hour (their state and exit code are read from there).
MinJobAge=3600
# Reject at submission a job the partition can never run (instead of leaving it pending for ever).
EnforcePartLimits=ALL
KillWait=5
SchedulerType=sched/backfill
$nodes
PartitionName=${partition% *} Nodes=${partition#* } Default=YES MaxTime=INFINITE State=UP
CONF
}

# Writes $2 (a conf from slurm_conf) to the file $1 when the file holds something else; true when it wrote, so the
# caller knows to restart the daemons that read the old one.
slurm_conf_update() {
  local file=$1 text=$2
  [ -f "$file" ] && [ "$(cat "$file")" = "$text" ] && return 1
  printf '%s\n' "$text" >"$file"
}
