"""The CPU a worker may really use: its affinity (os.sched_getaffinity) and the CPU quota of its cgroup (v1
cpu.cfs_quota_us / cpu.cfs_period_us, or v2 cpu.max), the tightest over the cgroup and its ancestors. os.cpu_count()
shows neither: a container or a CI job limited to 0.9 CPUs reports every core of the machine.

/proc/self/cgroup names the process's cgroup per hierarchy ("ID:CONTROLLERS:PATH"; "0::PATH" is v2); the files are
under the hierarchy's mount point (from /proc/self/mounts) joined with PATH. A hybrid layout (v1 controllers and a
v2 tree beside them, as on the Debian 12 development VM) has both; the v1 cpu controller, when present, is the one
that enforces a quota there.
"""
from __future__ import annotations

import os
from pathlib import Path


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _mounts() -> list[tuple[str, str, list[str]]]:
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            return [(p[1], p[2], p[3].split(",")) for p in (line.split() for line in f) if len(p) >= 4]
    except OSError:
        return []


def _cgroups() -> dict[str, str]:
    """Controller (or "" for v2) → the process's cgroup path."""
    out = {}
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            for line in f:
                hid, controllers, path = line.rstrip("\n").split(":", 2)
                if hid == "0":
                    out[""] = path
                for c in controllers.split(","):
                    if c:
                        out[c] = path
    except (OSError, ValueError):
        pass
    return out


def _ancestors(root: Path, path: str) -> list[Path]:
    parts = [p for p in path.split("/") if p]
    return [root.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def quota_v1(root: Path, path: str) -> float | None:
    best = None
    for d in _ancestors(root, path):
        quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
        if quota and period and quota.lstrip("-").isdigit() and int(quota) > 0 and int(period) > 0:
            cpus = int(quota) / int(period)
            best = cpus if best is None else min(best, cpus)
    return best


def quota_v2(root: Path, path: str) -> float | None:
    best = None
    for d in _ancestors(root, path):
        text = _read(d / "cpu.max")
        if not text:
            continue
        quota, _, period = text.partition(" ")
        if quota != "max" and quota.isdigit() and period.isdigit() and int(period) > 0:
            cpus = int(quota) / int(period)
            best = cpus if best is None else min(best, cpus)
    return best


def cpu_quota() -> dict:
    """{"cpus": the quota in CPUs or None (no quota found), "source": which file decided, e.g. "v1:/bench-ab-x"}."""
    groups = _cgroups()
    mounts = _mounts()
    if "cpu" in groups:
        for where, fstype, options in mounts:
            if fstype == "cgroup" and "cpu" in options:
                cpus = quota_v1(Path(where), groups["cpu"])
                return {"cpus": cpus, "source": f"v1:{groups['cpu']}"}
    if "" in groups:
        for where, fstype, _ in mounts:
            if fstype == "cgroup2":
                cpus = quota_v2(Path(where), groups[""])
                if cpus is not None or (Path(where) / "cpu.max").exists() or where == "/sys/fs/cgroup":
                    return {"cpus": cpus, "source": f"v2:{groups['']}"}
    return {"cpus": None, "source": None}


def compact_cpus(cpus: set[int] | list[int]) -> str:
    """{0, 1, 2, 5} → "0-2,5" (the kernel's cpulist format)."""
    ids = sorted(cpus)
    parts, start = [], None
    for i, c in enumerate(ids):
        if start is None:
            start = c
        if i + 1 == len(ids) or ids[i + 1] != c + 1:
            parts.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(parts)


def cpu_affinity() -> str | None:
    try:
        return compact_cpus(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
