"""An A/B session: prepare both sides, run them interleaved, and label each side run's records in the main store.

Each side run is a `bench run` into a scratch store; its run and records are then copied into the main store with
`plan_json.ab` = {session, side, pair, spec}, so `bench status`, `report` and `history` see them as ordinary runs and
anyone can tell which side a run was.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bench.ab import image_side
from bench.ab.cpuquota import make_group
from bench.ab.sides import (SOURCE_ROOT, ReadySide, check_git_ref, make_worktree, remove_worktree, resolve_python,
                            run_side_once)
from bench.ab.spec import SideSpec
from bench.analysis.paired import pair_order
from bench.core.source_revision import SourceRevision, of_checkout


@dataclass
class SideRun:
    pair: int
    side: str
    exit_code: int
    run_id: str | None  # None: the run recorded nothing
    seconds: float
    log: Path


def grouped(specs: list[SideSpec], cpu_weight: float | None) -> bool:
    """Whether the sides run in CPU groups: both do, or neither (cpuquota.py says why)."""
    return any(s.cpus for s in specs) or cpu_weight is not None


def check_sides(specs: list[SideSpec], cpu_weight: float | None = None) -> None:
    """Everything about the sides that can be checked before anything is made or run (BenchInputError)."""
    for spec in specs:
        if spec.image:
            image_side.check_image(spec.image, grouped(specs, cpu_weight))
        if spec.python:
            resolve_python(spec.python)
        if spec.git:
            check_git_ref(spec.git)


class Session:
    """Made sides (worktrees, CPU groups) for the session's lifetime; `with Session(...) as s:` removes them."""

    def __init__(self, specs: list[SideSpec], workdir: Path | None = None, cpu_weight: float | None = None):
        self.cpu_weight = cpu_weight
        self.id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"  # unique on this machine
        # Absolute: host side runs start in their own source tree (another cwd), and write their stores here.
        self.workdir = Path(workdir).resolve() if workdir else Path(tempfile.mkdtemp(prefix="bench-ab-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.sides: dict[str, ReadySide] = {}
        self._specs = specs

    def __enter__(self) -> "Session":
        try:
            in_groups = grouped(self._specs, self.cpu_weight)
            for spec in self._specs:
                python = resolve_python(spec.python) if spec.python else _this_python()
                side = ReadySide(spec, python, SOURCE_ROOT, label=f"bench-ab-{self.id}-{spec.name}")
                if spec.image:
                    side.engine = image_side.check_image(spec.image, in_groups)
                if spec.git:
                    side.worktree = make_worktree(check_git_ref(spec.git), self.workdir / f"tree-{spec.name}")
                    side.source = side.worktree
                if not spec.image:  # a git ref's bench may be too old to record its own source
                    side.revision = of_checkout(side.source)
                if in_groups:  # both sides in a group of their own (cpuquota.py says why)
                    side.group = make_group(f"bench-ab-{self.id}-{spec.name}", spec.cpus, self.cpu_weight or 1.0)
                self.sides[spec.name] = side
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> list[str]:
        problems = []
        for side in self.sides.values():
            if side.worktree:
                remove_worktree(side.worktree)
            if side.group:
                if side.spec.image:
                    image_side.remove_container_cgroups(side.group)
                try:
                    side.group.remove()
                except OSError as e:
                    problems.append(str(e))
        return problems

    def run_pair(self, pair: int, matrix: Path, store, *, timeout: float | None, limit_s: float,
                 say: Callable[[str], None]) -> list[SideRun]:
        """Pair `pair` (0-based): both sides' runs, in the order pair_order gives; each side run's records are in
        `store` (labelled) as soon as it ends. A side run that fails is reported and the session goes on (its pair
        is then incomplete)."""
        done: list[SideRun] = []
        for name, side in self.sides.items():
            if side.spec.image and side.folder is None:  # the container sees this folder only: matrix in, stores out
                side.folder = image_side.prepare_folder(self.workdir / f"image-{name}", matrix.resolve())
        for name in pair_order(pair):
            side = self.sides[name]
            scratch = (side.folder or self.workdir) / f"pair{pair}-{name}.db"
            log = self.workdir / f"pair{pair}-{name}.log"
            started = time.monotonic()
            code = run_side_once(side, matrix.resolve(), scratch, log, timeout, limit_s)
            run_id = copy_labelled(scratch, store, {"session": self.id, "side": name, "pair": pair,
                                                    "spec": side.spec.text,
                                                    "cpu_weight": self.cpu_weight}, side.revision)
            took = time.monotonic() - started
            done.append(SideRun(pair, name, code, run_id, took, log))
            say(f"ab pair {pair + 1} side {name}: " + (f"run {run_id}" if run_id else "recorded nothing")
                + f", exit {code}, {took:.0f} s" + ("" if code == 0 else f" (log: {log})"))
        return done


def copy_labelled(scratch: Path, store, label: dict, revision: SourceRevision | None = None) -> str | None:
    """The scratch store's run and records into `store`, the run's plan_json carrying `ab` = label, and its
    source_json the side's `revision` where the side's bench did not record one (a git ref before schema 11)."""
    from bench.store import Store, StoreError

    if not scratch.exists():
        return None
    try:
        with Store(scratch, read_only=True) as src:
            runs, records = src.runs(), src.records()
    except StoreError:
        return None
    if not runs:
        return None
    for run in runs:
        plan = json.loads(run["plan_json"] or "{}")
        run["plan_json"] = json.dumps({**plan, "ab": label})
        if revision is not None and not run.get("source_json"):
            run["source_json"] = revision.to_json()
    store.import_rows(runs, records)
    return runs[-1]["run_id"] if records else None


def _this_python() -> str:
    import sys

    return sys.executable


def remove_workdir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
