"""One side of an A/B comparison, parsed from its command-line text (pure: nothing checked on disk here).

    SPEC := ITEM[,ITEM...] | current
    ITEM := python=PATH          a Python (or a venv directory) to run bench and the workers with
          | git=REF              this repository at REF, checked out to a temporary worktree (run with PYTHONPATH)
          | cpus=FLOAT           a CPU quota for the side's whole process tree (cgroup cpu controller), in CPUs
          | env.NAME=VALUE       an environment variable set for the side (e.g. env.OMP_NUM_THREADS=2)
          | image=NAME           a built bench image (e.g. bench-pt-tf-openmpi:cpu): the side's `bench run` runs in a
                                 container of it, with the image's own bench and Python (bench/ab/image_side.py);
                                 combines with cpus= and env.NAME=, not with python= or git=
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from bench.core.errors import BenchInputError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_IMAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*\Z")  # [registry/]name[:tag][@digest]


@dataclass(frozen=True)
class SideSpec:
    name: str                      # "A" or "B"
    text: str                      # as given, for the record
    python: str | None = None
    git: str | None = None
    cpus: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None

    def describe(self) -> str:
        parts = [f"image {self.image}" if self.image else "",
                 f"python {self.python}" if self.python else "", f"git {self.git}" if self.git else "",
                 f"CPU quota {self.cpus:g}" if self.cpus else "",
                 *(f"{k}={v}" for k, v in sorted(self.env.items()))]
        return ", ".join(p for p in parts if p) or "this environment"


def parse_side(name: str, text: str) -> SideSpec:
    """`--a`/`--b`'s text → a SideSpec; anything malformed is one BenchInputError naming the option."""
    opt = f"--{name.lower()}"
    text = text.strip()
    if text in ("", "current"):
        return SideSpec(name, text or "current")
    python = git = image = None
    cpus = None
    env: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or not value and not key.startswith("env."):
            raise BenchInputError(f"{opt}: expected KEY=VALUE items (python=, git=, image=, cpus=, env.NAME=), "
                                  f"got '{item}'")
        if key == "python":
            python = value
        elif key == "git":
            git = value
        elif key == "cpus":
            try:
                cpus = float(value)
            except ValueError:
                raise BenchInputError(f"{opt}: cpus must be a number of CPUs, got '{value}'") from None
            if not 0.01 <= cpus <= 4096:
                raise BenchInputError(f"{opt}: cpus must be between 0.01 and 4096, got {value}")
        elif key.startswith("env."):
            var = key[4:]
            if not _ENV_NAME.match(var):
                raise BenchInputError(f"{opt}: '{var}' is not an environment variable name")
            env[var] = value
        elif key == "image":
            if not _IMAGE_NAME.match(value):
                raise BenchInputError(f"{opt}: '{value}' is not an image name (e.g. bench-pt-tf-openmpi:cpu)")
            image = value
        else:
            raise BenchInputError(f"{opt}: unknown item '{key}' (known: python, git, image, cpus, env.NAME)")
    if image and (python or git):
        raise BenchInputError(f"{opt}: image= runs the image's own bench and Python; it does not combine with "
                              f"python= or git=")
    return SideSpec(name, text, python, git, cpus, env, image)
