"""A CPU quota for a process tree through the cgroup `cpu` controller (needs root, or a delegated cgroup).

cgroup v1 (a `cpu` hierarchy with cpu.cfs_quota_us, e.g. /sys/fs/cgroup/cpu on a hybrid layout) is preferred where
mounted; otherwise cgroup v2 (cpu.max in a child of the unified hierarchy whose root delegates `cpu`). On the
development VM (Debian 12, 2026-11-25) /proc/self/cgroup shows a hybrid layout: v1 controllers (cpu, cpuacct,
cpuset, memory, ...) each mounted under /sys/fs/cgroup/<name>, and a cgroup2 at /sys/fs/cgroup/unified that holds no
cpu controller (cgroup.controllers: hugetlb only); so v1's cpu controller is what works there.

A group gets a quota of `cpus` CPUs per 100 ms period (cfs_quota_us = cpus x 100000), or none (-1 / "max"): the
side without a quota is still put in a group of its own, so both sides compete with other tenants as one
scheduling entity each (in v1 a group weighs as much as a single task of the parent). `--cpu-weight W` gives both
groups W times the default weight (v1 cpu.shares, v2 cpu.weight): under CFS the benchmark then gets the CPU it asks
for ahead of other tenants' tasks of default weight, which takes most of their load out of the measurement (the same
for both sides, so the comparison stays fair; it does not raise a quota).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bench.core.errors import BenchInputError

PERIOD_US = 100_000


@dataclass(frozen=True)
class CpuGroup:
    path: Path
    version: int  # 1 or 2

    def add_self(self) -> None:
        """Moves the calling process into the group (a child's preexec hook: everything it starts follows)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        """Removes the (empty) group; a group that still holds a process is left and said to be so."""
        try:
            self.path.rmdir()
        except OSError as e:
            raise OSError(f"cgroup {self.path} not removed ({e.strerror}); remove it once its processes are gone") \
                from None


def proc_mounts() -> list[tuple[str, str, str]]:
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            return [(p[1], p[2], p[3]) for p in (line.split() for line in f) if len(p) >= 4]
    except OSError:
        return []


def cpu_controller_root() -> tuple[Path, int] | None:
    """Where a cpu-controlled group can be made: (directory, cgroup version), or None."""
    mounts = proc_mounts()
    for where, fstype, options in mounts:
        if fstype == "cgroup" and "cpu" in options.split(",") and Path(where, "cpu.cfs_quota_us").exists():
            return Path(where), 1
    for where, fstype, _ in mounts:
        if fstype == "cgroup2":
            root = Path(where)
            try:
                delegated = (root / "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            if "cpu" in delegated:
                return root, 2
    return None


def make_group(name: str, cpus: float | None, weight: float = 1.0) -> CpuGroup:
    """A new group `name` with the quota (None: no quota) and `weight` times the default CPU weight (v1
    cpu.shares 1024, v2 cpu.weight 100); BenchInputError when no cpu controller can be used."""
    found = cpu_controller_root()
    if found is None:
        raise BenchInputError("cpus=: no cgroup cpu controller is available here (cgroup v1 'cpu' or a cgroup v2 "
                              "root delegating 'cpu')")
    root, version = found
    path = root / name
    try:
        path.mkdir()
        quota = int(cpus * PERIOD_US) if cpus else None
        if version == 1:
            (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (path / "cpu.cfs_quota_us").write_text(str(quota if quota else -1))
            (path / "cpu.shares").write_text(str(max(2, min(262144, round(1024 * weight)))))
        else:
            (path / "cpu.max").write_text(f"{quota if quota else 'max'} {PERIOD_US}")
            (path / "cpu.weight").write_text(str(max(1, min(10000, round(100 * weight)))))
    except OSError as e:
        try:
            path.rmdir()
        except OSError:
            pass
        raise BenchInputError(f"cpus=: cannot make cgroup {path}: {e.strerror} (root or a delegated cgroup is "
                              f"needed)") from None
    return CpuGroup(path, version)
