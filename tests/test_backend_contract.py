"""The backend interface is declared in one place (bench/backends/base.py): every name the runner and `bench run`
use of a backend is declared there with its default, every registered backend is one, and nobody asks `hasattr`."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bench.backends import BACKENDS, load
from bench.backends.base import Backend
from tests.conftest import ROOT

# The modules that drive a backend through a run: each takes it as `backend`.
CALLERS = (ROOT / "bench" / "execution" / "runner.py", ROOT / "bench" / "commands" / "run.py")


def backend_uses(source: str) -> tuple[set[str], list[str]]:
    """(the attributes read, called or set on a name `backend`, the getattr/hasattr probes of it as text)."""
    used, probes = set(), []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "backend":
            used.add(node.attr)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr", "setattr") \
                and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "backend":
            probes.append(ast.unparse(node))
    return used, probes


def declared() -> set[str]:
    return {name for name in vars(Backend) if not name.startswith("_")} | set(Backend.__annotations__)


@pytest.mark.parametrize("caller", CALLERS, ids=lambda p: p.name)
def test_the_callers_use_only_declared_hooks_and_never_probe_for_one(caller):
    used, probes = backend_uses(caller.read_text(encoding="utf-8"))
    assert used, f"{caller.name}: no backend use found (the test reads nothing)"
    assert not used - declared(), f"{caller.name} uses what base.Backend does not declare: {sorted(used - declared())}"
    assert not probes, f"{caller.name} probes the backend instead of calling a declared hook: {probes}"


def test_an_undeclared_hook_is_caught():
    used, probes = backend_uses("def f(backend):\n    backend.warm_up()\n    if hasattr(backend, 'x'):\n        pass\n")
    assert used - declared() == {"warm_up"} and probes == ["hasattr(backend, 'x')"]


@pytest.mark.parametrize("name", list(BACKENDS))
def test_every_backend_is_a_backend_and_its_overrides_keep_the_signatures(name):
    import inspect

    cls = load(BACKENDS[name].impl)
    assert issubclass(cls, Backend), f"backend {name}: {cls.__name__} does not subclass bench.backends.base.Backend"
    for hook in declared():
        mine, base = inspect.getattr_static(cls, hook, None), inspect.getattr_static(Backend, hook, None)
        if callable(mine) and callable(base) and mine is not base:
            got = list(inspect.signature(getattr(cls, hook)).parameters)
            want = list(inspect.signature(getattr(Backend, hook)).parameters)
            assert got[:len(want)] == want, f"backend {name}: {hook}{tuple(got)} does not take {tuple(want)}"


def test_the_defaults_are_the_runners_old_absent_hooks(tmp_path: Path):
    """A backend that declares nothing optional: no probe, nothing swept, nothing kept after a cell."""

    class Minimal(Backend):
        name = "minimal"

    b = Minimal()
    assert b.probe_compute is False and b.sweep("token") == 0 and b.before_cell(None) is None
    assert b.check([]) is None and b.prepare([]) is None and b.after_cell(None, "run", []) is None
    assert b.reach_reason({}, 1) is None
    with pytest.raises(NotImplementedError, match="minimal: no submit"):
        b.submit(None, "run")
