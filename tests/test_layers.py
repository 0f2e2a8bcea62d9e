"""The layer contract: every import in bench/ goes to the importer's own layer or a lower one.

The layers are data in docs/architecture.md ("## Layers"): a table of layers, lowest first, each with the module
patterns it holds, and a table of allowed exceptions with their reasons. This test reads both, places every module
(the longest matching pattern wins), and checks every import statement, lazy ones included (`if TYPE_CHECKING:`
bodies excepted: they never run). An import is resolved as tests/test_import_cycles.py resolves it; the packages
above a target are not counted here (their __init__ runs first, but what a layer may *name* is the question).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_import_cycles import _absolute, _imports, module_name

DOC = ROOT / "docs" / "architecture.md"


@dataclass(frozen=True)
class Layers:
    patterns: dict[str, int]  # module pattern → layer number
    names: dict[int, str]  # layer number → its name
    exceptions: frozenset[tuple[str, str]]  # (importer, imported) allowed upward

    def layer_of(self, module: str) -> int | None:
        best, found = -1, None
        for pattern, layer in self.patterns.items():
            if pattern.endswith(".*"):
                base = pattern[:-2]
                hit = module == base or module.startswith(base + ".")
            else:
                hit = module == pattern
            if hit and len(pattern) > best:
                best, found = len(pattern), layer
        return found


def _table(text: str, heading_row: str) -> list[list[str]]:
    """The rows of the markdown table whose header row starts with `heading_row`, as lists of cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading_row))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def parse_layers(text: str) -> Layers:
    patterns: dict[str, int] = {}
    names: dict[int, str] = {}
    for number, name, modules, _ in _table(text, "| # | layer | modules |"):
        names[int(number)] = name
        for pattern in re.findall(r"`([^`]+)`", modules):
            assert pattern not in patterns, f"{pattern} is in two layers"
            patterns[pattern] = int(number)
    exceptions = set()
    for importer, imported, why in _table(text, "| importer | imported | why |"):
        if importer.strip("`") in ("—", "-"):
            continue
        assert why and why not in ("—", "-"), f"the exception {importer} → {imported} gives no reason"
        exceptions.add((importer.strip("`"), imported.strip("`")))
    return Layers(patterns, names, frozenset(exceptions))


def bench_imports(path: Path, root: Path):
    """(line, imported module) for every import of a module of `root`'s package in the file at `path`."""
    module = module_name(path, root)
    files = {module_name(p, root) for p in root.rglob("*.py")}
    is_package = path.name == "__init__.py"
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            source = _absolute(node, module, is_package)
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in files else source for a in node.names]
        for target in targets:
            if target == root.name or target.startswith(root.name + "."):
                yield node.lineno, target


def upward_imports(root: Path, layers: Layers) -> tuple[list[str], list[str]]:
    """(the imports that go to a higher layer, the modules no layer holds), each as a line for people."""
    offences, unplaced = [], []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        mine = layers.layer_of(module)
        if mine is None:
            unplaced.append(module)
            continue
        for line, target in bench_imports(path, root):
            theirs = layers.layer_of(target)
            if theirs is None or theirs <= mine or (module, target) in layers.exceptions:
                continue
            where = path.relative_to(root.parent)
            offences.append(f"{where}:{line}: {module} ({layers.names[mine]}) imports {target} "
                            f"({layers.names[theirs]}): "
                            f"{path.read_text(encoding='utf-8').splitlines()[line - 1].strip()}")
    return offences, unplaced


def test_every_import_goes_down_or_across():
    layers = parse_layers(DOC.read_text(encoding="utf-8"))
    assert len(layers.names) >= 5 and layers.layer_of("bench.analysis.stats") == layers.layer_of("bench.analysis")
    offences, unplaced = upward_imports(ROOT / "bench", layers)
    assert not unplaced, "modules docs/architecture.md's layer table does not place:\n" + "\n".join(unplaced)
    assert not offences, "imports that go up a layer:\n" + "\n".join(offences)


def test_every_exception_is_still_needed():
    """An exception nothing uses any more is stale: drop it from the table."""
    layers = parse_layers(DOC.read_text(encoding="utf-8"))
    used = set()
    for path in (ROOT / "bench").rglob("*.py"):
        module = module_name(path, ROOT / "bench")
        used |= {(module, target) for _, target in bench_imports(path, ROOT / "bench")}
    assert layers.exceptions <= used, f"stale exceptions: {sorted(layers.exceptions - used)}"


# The entry points: the only modules the table may place by name; every other module is placed by its package.
ENTRY_POINTS = {"bench", "bench.cli", "bench.__main__", "bench.images.__main__"}


def test_the_folders_tell_the_layer():
    """A newcomer reads a module's layer off its path: the table names packages, the tree has no loose modules
    beside the entry points, and each package sits in one layer."""
    layers = parse_layers(DOC.read_text(encoding="utf-8"))
    by_name = {p for p in layers.patterns if not p.endswith(".*")}
    assert by_name <= ENTRY_POINTS, f"modules placed by name, not by their folder: {sorted(by_name - ENTRY_POINTS)}"
    loose = sorted(p.name for p in (ROOT / "bench").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "cli.py"], f"loose modules in bench/: {loose}"
    for package in sorted(p.parent for p in (ROOT / "bench").glob("*/__init__.py")):
        name = f"bench.{package.name}"
        assert f"{name}.*" in layers.patterns, f"{name}: no row of the layer table names it"


# The rule on a package of its own: a layered table, files, and the offences it must print.
TABLE = """
| # | layer | modules | what |
|---|---|---|---|
| 0 | low | `pkg`, `pkg.low.*` | x |
| 1 | high | `pkg.high.*`, `pkg.low.entry` | y |

| importer | imported | why |
|---|---|---|
| `pkg.low.allowed` | `pkg.high.b` | a reason |
"""

CASES = {
    "a lower module importing a higher one, lazily": (
        {"low/a.py": "def f():\n    from pkg.high import b\n", "high/b.py": ""},
        ["pkg/low/a.py:2: pkg.low.a (low) imports pkg.high.b (high): from pkg.high import b"]),
    "down and across are fine": (
        {"low/a.py": "import pkg.low.c\n", "low/c.py": "", "high/b.py": "from pkg.low import a\nimport pkg.high.d\n",
         "high/d.py": ""}, []),
    "the longest pattern places a module": (
        {"low/entry.py": "from pkg.high.b import X\n", "high/b.py": "X = 1\n"}, []),
    "a listed exception is allowed": (
        {"low/allowed.py": "from pkg.high import b\n", "high/b.py": ""}, []),
    "a TYPE_CHECKING import is not counted": (
        {"low/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.high import b\n",
         "high/b.py": ""}, []),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_rule(case, tmp_path):
    files, expected = CASES[case]
    for name, text in {"__init__.py": "", "low/__init__.py": "", "high/__init__.py": "", **files}.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    offences, unplaced = upward_imports(tmp_path / "pkg", parse_layers(TABLE))
    assert (offences, unplaced) == (expected, [])


def test_a_module_outside_every_layer_is_reported(tmp_path):
    (tmp_path / "pkg" / "stray").mkdir(parents=True)
    for name in ("__init__.py", "stray/__init__.py", "stray/x.py"):
        (tmp_path / "pkg" / name).write_text("", encoding="utf-8")
    assert upward_imports(tmp_path / "pkg", parse_layers(TABLE))[1] == ["pkg.stray", "pkg.stray.x"]
