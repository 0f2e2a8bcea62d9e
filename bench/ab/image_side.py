"""image=NAME sides: the side's `bench run` inside a container of a built bench image, run the way
bench/images/check.py runs one (the image's unprivileged `bench` user, uid 10001, the store written to a host folder
mounted at /work), with the engine options of bench/images/engines.py (runc + cgroupfs on hybrid cgroups, ulimits).

A CPU group (cpus=, --cpu-weight) reaches the container through `--cgroup-parent /<group>`: with podman's cgroupfs
manager the container then lives in <group>/libpod-<id> in every hierarchy and conmon in <group>/conmon, so the
group's quota and weight apply to all its processes. Running podman itself inside the group would not do: with
cgroupfs, podman puts containers under /libpod_parent whatever cgroup its client is in. Measured on the development
VM (Debian 12, podman 4.3.1, runc, hybrid v1, 2026-11-25): /proc/self/cgroup in the container read
`1:cpu:/bench-ab-probe/libpod-94b7…` for `--cgroup-parent /bench-ab-probe`. With the systemd manager (pure cgroup
v2 hosts without runc) a parent must be a systemd slice, so that combination is refused rather than half-working.
"""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from bench.ab.cpuquota import CpuGroup, proc_mounts
from bench.core.errors import BenchInputError
from bench.images.check import IN_IMAGE, hand_to_image_user, user_container_argv
from bench.images.engines import Engine, find_engine

MATRIX_NAME = "matrix.yaml"   # the matrix, copied into that folder (the host path is not visible inside)


def image_exists(engine: Engine, image: str) -> bool:
    sub = ("image", "exists", image) if engine.name == "podman" else ("image", "inspect", image)
    try:
        return subprocess.run(engine.command(*sub), capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def check_image(image: str, grouped: bool) -> Engine:
    """The engine that runs `image`; BenchInputError when there is none, the image is not built, or a CPU group
    cannot be given to the container."""
    try:
        engine = find_engine()
    except BenchInputError as e:
        raise BenchInputError(f"image={image}: {e}") from None
    if grouped and not (engine.name == "podman" and "cgroupfs" in engine.global_args()):
        raise BenchInputError(f"image={image} with cpus= or --cpu-weight needs podman with the cgroupfs cgroup "
                              f"manager (runc on a hybrid or v1 host); here it is {engine.name} "
                              f"{' '.join(engine.global_args()) or '(default manager)'}")
    if not image_exists(engine, image):
        raise BenchInputError(f"image={image}: no such image in {engine.name}'s store (`make images` builds the "
                              f"bench images; `bench images list` names them)")
    return engine


def prepare_folder(where: Path, matrix: Path) -> Path:
    """The side's folder, mounted at /work: the matrix copied in, owned by the image's user (who writes the store)."""
    where = where.resolve()  # a relative path would be read as a named volume by the engine
    where.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(matrix, where / MATRIX_NAME)
    hand_to_image_user(where, where / MATRIX_NAME)
    return where


def cgroup_parent(group: CpuGroup | None) -> list[str]:
    # make_group makes groups at the top of the hierarchy, so the parent is /<name> in every hierarchy.
    return [] if group is None else ["--cgroup-parent", "/" + group.path.name]


def container_argv(engine: Engine, image: str, *, name: str, folder: Path, env: dict[str, str],
                   group: CpuGroup | None, command: list[str]) -> list[str]:
    """`<engine> run` of `command` in `image` as its bench user, `folder` at /work, `env` set, in `group`."""
    options = ["--name", name, "--workdir", IN_IMAGE, *cgroup_parent(group)]
    for key, value in sorted(env.items()):
        options += ["--env", f"{key}={value}"]
    return user_container_argv(engine, image, folder, command, *options)


def bench_run_command(store_name: str, timeout: float | None) -> list[str]:
    """The side run inside the image: its own Python and bench, the copied matrix, the store in /work."""
    argv = ["python", "-m", "bench", "run", f"{IN_IMAGE}/{MATRIX_NAME}", "--store", f"{IN_IMAGE}/{store_name}",
            "--rerun"]
    return argv + (["--timeout", f"{timeout:g}"] if timeout else [])


def remove_container(engine: Engine, name: str) -> None:
    """A container left by a side run that was stopped (normally --rm removes it)."""
    subprocess.run(engine.command("rm", "-f", "--ignore", name) if engine.name == "podman" else
                   engine.command("rm", "-f", name), capture_output=True, timeout=120)


def remove_container_cgroups(group: CpuGroup, wait_s: float = 15.0) -> None:
    """The empty cgroups podman's cgroupfs manager made for `--cgroup-parent /<group>`: <group>/conmon and
    <group> in every hierarchy (the cpu group itself is left to CpuGroup.remove). conmon outlives `podman run` by a
    moment, so a busy one is retried for up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        busy = _remove_once(group)
        if not busy or time.monotonic() > deadline:
            return
        time.sleep(0.2)


def _remove_once(group: CpuGroup) -> bool:
    """One pass, deepest first; True if some directory was still busy."""
    busy = False
    for where, fstype, _ in proc_mounts():
        top = Path(where) / group.path.name
        if fstype not in ("cgroup", "cgroup2") or not top.is_dir():
            continue
        subs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for sub in subs + ([top] if top != group.path else []):
            try:
                sub.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                busy = True
    return busy
