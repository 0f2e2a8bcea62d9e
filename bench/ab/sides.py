"""Making a side runnable and running it once: a real `bench run MATRIX --rerun` of that side's bench, with its
Python, its environment variables and its CPU group, into a scratch store of its own (a git ref's bench may have an
older store schema; the scratch store is read back by this bench, which migrates it). An image side runs that
`bench run` in a container instead (bench/ab/image_side.py).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.ab import image_side
from bench.ab.cpuquota import CpuGroup
from bench.ab.spec import SideSpec
from bench.core.errors import BenchInputError
from bench.core.source_revision import SourceRevision
from bench.images.engines import Engine

# This checkout: the source a side runs when it names no git ref (PYTHONPATH points here, so this bench and its
# models/ run, whatever the Python's site-packages hold).
SOURCE_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ReadySide:
    spec: SideSpec
    python: str
    source: Path                 # the tree whose bench/ and models/ the side runs
    worktree: Path | None = None  # made here (removed at the end)
    group: CpuGroup | None = None
    engine: Engine | None = None  # image sides: the engine that runs the container
    folder: Path | None = None    # image sides: the folder mounted at /work (matrix, scratch stores)
    label: str = "bench-ab"       # names the side's containers: <label>-<scratch store>
    revision: SourceRevision | None = None  # the source a host side runs (None: an image side's, not known here)


def resolve_python(text: str) -> str:
    """python=PATH: a Python executable, or a venv directory (its bin/python)."""
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "bin" / "python"
    if not path.is_file() or not os.access(path, os.X_OK):
        raise BenchInputError(f"python={text}: not an executable Python (or a venv directory with bin/python)")
    return str(path.absolute())  # not resolved: a venv's python is a symlink whose location says which venv


def check_git_ref(ref: str) -> str:
    """The commit `ref` names in this repository; BenchInputError when it names none."""
    try:
        out = subprocess.run(["git", "-C", str(SOURCE_ROOT), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchInputError(f"git={ref}: cannot run git ({e})") from None
    if out.returncode != 0 or not out.stdout.strip():
        raise BenchInputError(f"git={ref}: not a commit of this repository ({SOURCE_ROOT})")
    return out.stdout.strip()


def make_worktree(commit: str, where: Path) -> Path:
    """A detached worktree of `commit` under `where` (removed by remove_worktree)."""
    subprocess.run(["git", "-C", str(SOURCE_ROOT), "worktree", "add", "--detach", "--quiet", str(where), commit],
                   check=True, capture_output=True, text=True, timeout=300)
    return where


def remove_worktree(path: Path) -> None:
    subprocess.run(["git", "-C", str(SOURCE_ROOT), "worktree", "remove", "--force", str(path)],
                   capture_output=True, text=True, timeout=120)
    shutil.rmtree(path, ignore_errors=True)


def side_command(side: ReadySide, matrix: Path, store: Path, timeout: float | None) -> tuple[list[str], dict[str, str]]:
    """argv and environment of one run of a side (an image side: of the engine that runs the container, which gets
    only the side's env.NAME= variables: the host's environment does not belong in the image)."""
    if side.spec.image:
        argv = image_side.container_argv(side.engine, side.spec.image, name=container_name(side, store),
                                         folder=side.folder, env=side.spec.env, group=side.group,
                                         command=image_side.bench_run_command(store.name, timeout))
        return argv, dict(os.environ)
    argv = [side.python, "-m", "bench", "run", str(matrix), "--store", str(store), "--rerun"]
    if timeout:
        argv += ["--timeout", f"{timeout:g}"]
    env = {**os.environ, **side.spec.env}
    env["PYTHONPATH"] = os.pathsep.join([str(side.source), *(p for p in [os.environ.get("PYTHONPATH")] if p)])
    return argv, env


def run_side_once(side: ReadySide, matrix: Path, store: Path, log: Path, timeout: float | None,
                  limit_s: float) -> int:
    """One `bench run` of the side; its output goes to `log`. Returns its exit code (124 past limit_s)."""
    argv, env = side_command(side, matrix, store, timeout)
    # An image side's container joins the group through --cgroup-parent; the engine's client stays outside it.
    preexec = side.group.add_self if side.group and not side.spec.image else None
    code = None
    try:
        code = _run_logged(argv, env, side.source, log, preexec, limit_s)
        return code
    finally:
        if side.spec.image and code != 0:
            image_side.remove_container(side.engine, container_name(side, store))  # one a stop left behind


def container_name(side: ReadySide, store: Path) -> str:
    return f"{side.label}-{store.stem}"


def _run_logged(argv, env, cwd: Path, log: Path, preexec, limit_s: float) -> int:
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(argv, env=env, cwd=str(cwd), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=preexec)
        try:
            return proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            proc.terminate()  # bench run stops and records its running cell on SIGTERM
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return 124
        except BaseException:
            proc.terminate()
            proc.wait()
            raise
