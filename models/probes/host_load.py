"""What else used this rank's node during a measured window: the CPU time of processes outside the cell (the top one
by name and pid), the hypervisor's steal time, the CPU clock and thermal throttling where Linux shows them.

A cell slowed by something beside it (another job on the same cores, a noisy neighbour on a VM, a throttled CPU) is
otherwise indistinguishable from a slow engine on its first run: the cell measures itself. Each rank reads /proc at
the window's start and end (outside the timed region: a few milliseconds for a few hundred processes) and reports the
difference. Linux only; where /proc cannot be read the window carries no `outside` field.

The cell's own processes are those whose environment carries this process's BENCH_CELL_TOKEN (the launcher puts it
on every process of a cell: the launcher, its daemons, every rank) or, with no token, those of this process's
session. A process whose environment cannot be read (another user's) is outside.

Imports nothing of bench (workers never do): the control plane reads the field (bench/analysis/outside.py).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

TOKEN_VAR = "BENCH_CELL_TOKEN"  # bench/backends/shared/process.py sets it; the same name, not imported
# Processes under this many CPU-s/s over the window are not looked at one by one (their environment is not read).
NOTICE_CPU_S_PER_S = 0.02
TOP_KEPT = 3  # outside processes kept per window, the busiest first


@dataclass
class Snapshot:
    t: float  # monotonic seconds
    ticks: dict[int, tuple[int, str, int]] = field(default_factory=dict)  # pid → (utime+stime ticks, name, start)
    busy: int | None = None  # the machine's busy ticks (all CPUs: user..steal, less idle and iowait)
    steal: int | None = None
    throttles: int | None = None  # thermal throttle events of this process's CPUs, summed


def _clock_ticks() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return 100


def _proc_stat(pid: int) -> tuple[int, str, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    # comm is parenthesised and may hold spaces or parentheses: split after the last ')'
    close = raw.rfind(")")
    name = raw[raw.find("(") + 1:close]
    rest = raw[close + 2:].split()
    try:  # fields 14, 15 (utime, stime) and 22 (starttime), counted from 1 with pid and comm as 1 and 2
        return int(rest[11]) + int(rest[12]), name, int(rest[19])
    except (IndexError, ValueError):
        return None


def _machine() -> tuple[int | None, int | None]:
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None, None
    steal = fields[7] if len(fields) > 7 else 0
    busy = sum(fields[:8]) - fields[3] - (fields[4] if len(fields) > 4 else 0)
    return busy, steal


def my_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _throttles(cpus: list[int]) -> int | None:
    total, seen = 0, False
    for c in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/thermal_throttle/core_throttle_count") as f:
                total += int(f.read().strip())
                seen = True
        except (OSError, ValueError):
            continue
    return total if seen else None


def snapshot() -> Snapshot | None:
    """Every process's CPU ticks and the machine's; None where /proc cannot be read."""
    if not os.path.isdir("/proc/self"):
        return None
    ticks = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for n in names:
        if n.isdigit():
            s = _proc_stat(int(n))
            if s is not None:
                ticks[int(n)] = s
    busy, steal = _machine()
    return Snapshot(time.monotonic(), ticks, busy, steal, _throttles(my_cpus()))


def _environ_token(pid: int) -> str | None | bool:
    """The process's cell token; None without one; False when its environment cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return False
    key = TOKEN_VAR.encode() + b"="
    for item in env.split(b"\0"):
        if item.startswith(key):
            return item[len(key):].decode("utf-8", "replace")
    return None


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _allowed_cpus(pid: int) -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(pid))
    except OSError:
        return None


def _mhz(cpus: list[int]) -> float | None:
    """The median clock of this process's CPUs now (cpufreq, else /proc/cpuinfo's 'cpu MHz')."""
    vals = []
    for c in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq") as f:
                vals.append(int(f.read().strip()) / 1000)
        except (OSError, ValueError):
            continue
    if not vals:
        try:
            with open("/proc/cpuinfo") as f:
                per = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
            vals = [per[c] for c in cpus if c < len(per)] or per
        except (OSError, ValueError, IndexError):
            return None
    if not vals:
        return None
    vals.sort()
    return vals[len(vals) // 2]


def outside(before: Snapshot | None, after: Snapshot | None, token: str | None = None,
            me: int | None = None) -> dict | None:
    """What processes outside the cell used between two snapshots, per second of wall time:
    {"cpu_s_per_s": all of them together (the machine's busy time less the cell's processes'),
     "top": [{"name", "pid", "cpu_s_per_s", "cpus"}...] the busiest, "cell_cpu_s_per_s": the cell's processes on
     this node, "steal_s_per_s", "mhz", "throttles", "cores", "rank_cpus", "machine" (its machine id: which ranks share
     a machine's cores, bench/analysis/layout_prediction.py)}; None with no snapshots."""
    if before is None or after is None or after.t <= before.t:
        return None
    hz, wall = _clock_ticks(), after.t - before.t
    token = token if token is not None else os.environ.get(TOKEN_VAR)
    me = os.getpid() if me is None else me
    my_sid = _session(me)
    cell_ticks, others = 0, []
    for pid, (t1, name, start) in after.ticks.items():
        t0, _, start0 = before.ticks.get(pid, (0, name, start))
        if start0 != start:  # the pid was reused: all of its time is new
            t0 = 0
        if pid not in before.ticks:  # started during the window: its whole time counts (it is all in the window)
            t0 = 0
        used = max(0, t1 - t0)
        if used == 0:
            continue
        rate = used / hz / wall
        if pid == me:
            cell_ticks += used
            continue
        if rate < NOTICE_CPU_S_PER_S:
            continue  # too small to name; still in the machine's busy total below
        theirs = _environ_token(pid)
        ours = (theirs == token) if token else (theirs is not False and _session(pid) == my_sid)
        if ours:
            cell_ticks += used
        else:
            others.append({"name": name, "pid": pid, "cpu_s_per_s": round(rate, 3), "cpus": _allowed_cpus(pid)})
    cores = len(my_cpus())
    out: dict = {"cores": cores, "cell_cpu_s_per_s": round(cell_ticks / hz / wall, 3)}
    if before.busy is not None and after.busy is not None:
        machine = (after.busy - before.busy) / hz / wall
        out["cpu_s_per_s"] = round(max(0.0, machine - cell_ticks / hz / wall), 3)
        out["machine_cores"] = os.cpu_count() or cores
    else:
        out["cpu_s_per_s"] = round(sum(o["cpu_s_per_s"] for o in others), 3)
    if before.steal is not None and after.steal is not None:
        out["steal_s_per_s"] = round((after.steal - before.steal) / hz / wall, 3)
    if before.throttles is not None and after.throttles is not None:
        out["throttles"] = after.throttles - before.throttles
    mhz = _mhz(my_cpus())
    if mhz is not None:
        out["mhz"] = round(mhz)
    out["top"] = sorted(others, key=lambda o: -o["cpu_s_per_s"])[:TOP_KEPT]
    out["rank_cpus"] = my_cpus()
    machine = machine_id()
    if machine is not None:
        out["machine"] = machine
    return out


def machine_id() -> str | None:
    """Which machine this rank runs on: systemd's machine id (/etc/machine-id), one per installation. Not the boot id,
    nor the boot time: the emulated cluster gives each node a boot id and a time namespace of its own, so that UCX
    and NCCL take them for separate machines, while its nodes share the kernel, /etc and the cores. None where the
    file is missing or empty (a container image may ship it so). `bench diagnose`'s probe reads the same file
    (models/probes/diag_probe.py, which runs as a script of its own)."""
    try:
        with open("/etc/machine-id") as f:
            return f.read().strip() or None
    except OSError:
        return None
