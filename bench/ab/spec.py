"""One side of an A/B comparison, parsed from its command-line text (pure: nothing checked on disk here).

    SPEC := ITEM[,ITEM...] | current
    ITEM := python=PATH          a Python (or a venv directory) to run bench and the workers with
          | git=REF              this repository at REF, checked out to a temporary worktree (run with PYTHONPATH)
          | cpus=FLOAT           a CPU quota for the side's whole process tree (cgroup cpu controller), in CPUs
          | env.NAME=VALUE       an environment variable set for the side (e.g. env.OMP_NUM_THREADS=2)
          | image=NAME           a container image (not supported yet: needs the images work of issue 23)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from bench.errors import BenchInputError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class SideSpec:
    name: str                      # "A" or "B"
    text: str                      # as given, for the record
    python: str | None = None
    git: str | None = None
    cpus: float | None = None
    env: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"python {self.python}" if self.python else "", f"git {self.git}" if self.git else "",
                 f"CPU quota {self.cpus:g}" if self.cpus else "",
                 *(f"{k}={v}" for k, v in sorted(self.env.items()))]
        return ", ".join(p for p in parts if p) or "this environment"


def parse_side(name: str, text: str) -> SideSpec:
    """`--a`/`--b`'s text → a SideSpec; anything malformed is one BenchInputError naming the option."""
    opt = f"--{name.lower()}"
    text = text.strip()
    if text in ("", "current"):
        return SideSpec(name, text or "current")
    python = git = None
    cpus = None
    env: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or not value and not key.startswith("env."):
            raise BenchInputError(f"{opt}: expected KEY=VALUE items (python=, git=, cpus=, env.NAME=), got '{item}'")
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
            raise BenchInputError(f"{opt}: image sides are not supported yet (they need the container images work; "
                                  f"use python= or git=)")
        else:
            raise BenchInputError(f"{opt}: unknown item '{key}' (known: python, git, cpus, env.NAME)")
    return SideSpec(name, text, python, git, cpus, env)
