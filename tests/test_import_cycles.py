"""The import graphs of `bench` and of `models` have no cycle.

How the graph is built (from the source, with `ast`; nothing is imported):
- A node is a module under bench/: `bench.x.y` for bench/x/y.py, `bench.x` for a package's bench/x/__init__.py.
- Every `import` and `from ... import` statement counts wherever it sits, inside a function too: a lazy import only
  moves the cycle to run time. Statements under `if TYPE_CHECKING:` do not count (they never run).
- Relative imports are made absolute first. `import P.Q` and `from P.Q import name` give an edge to `P.Q`;
  `from P import Q` gives an edge to `P.Q` where Q is a submodule of P, and to `P` where Q is a name P's __init__
  defines.
- Importing `P.Q.R` first runs the __init__ of each package above it, so the importer also gets an edge to each of
  those packages, except the packages the importer itself sits in: Python imported those before the importer ran,
  so they are not something it waits for. This keeps the usual shape legal: a package's __init__ importing its
  submodules, and those importing each other by full name (bench.launch and bench.launch.spec). A submodule that
  takes a *name* from its own package's __init__ (`from bench.launch import flavour_named` inside bench/launch/)
  does get an edge to that __init__: a cycle if the __init__ imports that submodule back, directly or not.
- Imports by string (`importlib.import_module`, the backend and command registries) are not edges: they are resolved
  when a backend or verb is chosen, after every module involved has finished importing.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every import statement in the tree, skipping the bodies of `if TYPE_CHECKING:` (their `else` still counts)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        todo.extend(ast.iter_child_nodes(node))


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same top package it imports (see the module docstring for the rule)."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    top = root.name
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        own_packages = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + (2 if is_package else 1))}
        targets: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
                continue
            source = _absolute(node, module, is_package)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.add(sub if sub in files else source)
        edges: set[str] = set()
        for target in targets:
            if target != top and not target.startswith(top + "."):
                continue
            if target in files:
                edges.add(target)
            parts = target.split(".")
            for i in range(1, len(parts)):  # the packages above it, whose __init__ runs first
                name = ".".join(parts[:i])
                if name in files and name not in own_packages:
                    edges.add(name)
        edges.discard(module)
        graph[module] = edges
    return graph


def groups(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of modules that import each other, directly or not (strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a list of modules, first == last) for each group of modules that import each other."""
    return [_one_cycle(graph, group) for group in groups(graph)]


def _one_cycle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """The shortest cycle through the group's first module (breadth-first inside the group)."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & group):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    raise AssertionError(f"no cycle through {start} in {sorted(group)}")


# (package, a module of it, a module the first must import): proof the graph really read that package.
PACKAGES = [("bench", "bench.execution.doctor", "bench.launch"),
            ("models", "models.measure.faults", "models.measure.fail")]


@pytest.mark.parametrize("package,importer,imported", PACKAGES, ids=[p[0] for p in PACKAGES])
def test_no_import_cycle(package, importer, imported):
    """bench, and the worker code too: a worker node imports it piecemeal, and a lazy import that dodges a circle is
    still a circle."""
    graph = import_graph(ROOT / package)
    assert len(graph) > 15 and imported in graph[importer]  # it really read the package
    found = groups(graph)
    assert not found, f"import cycles in {package}:\n" + "\n".join(
        f"{' -> '.join(_one_cycle(graph, g))}  (the group: {', '.join(sorted(g))})" for g in found)


def _graph(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    """The graph of a package `pkg` made of `files` (path under pkg/ -> source)."""
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return import_graph(tmp_path / "pkg")


# The rule, each part on a package of its own: (its files besides an empty pkg/__init__.py, the cycles it has).
RULE = {
    "a lazy import closes a cycle": (
        {"a.py": "import pkg.b\n", "b.py": "def f():\n    from pkg import a\n"}, [["pkg.a", "pkg.b", "pkg.a"]]),
    "relative imports are edges too": (
        {"sub/__init__.py": "", "sub/one.py": "from . import two\n", "sub/two.py": "from .one import X\n"},
        [["pkg.sub.one", "pkg.sub.two", "pkg.sub.one"]]),
    "a TYPE_CHECKING import is no edge": (
        {"a.py": "import pkg.b\n",
         "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"}, []),
    "a package's __init__ may import its submodules, and they each other by full name": (
        {"sub/__init__.py": "from pkg.sub import one, two\n", "sub/one.py": "from pkg.sub.two import X\n",
         "sub/two.py": "X = 1\n", "user.py": "from pkg.sub.one import X\n"}, []),
    "a name from the own package's __init__ is an edge to it": (
        {"sub/__init__.py": "from pkg.sub import one\nREG = {}\n",
         "sub/one.py": "def f():\n    from pkg.sub import REG\n"},
        [["pkg.sub", "pkg.sub.one", "pkg.sub"]]),
    "an import from outside a package waits for its __init__": (
        {"sub/__init__.py": "from pkg.sub import one\n", "sub/one.py": "import pkg.user\n",
         "user.py": "from pkg.sub.two import X\n", "sub/two.py": "X = 1\n"},
        [["pkg.sub", "pkg.sub.one", "pkg.user", "pkg.sub"]]),
}


@pytest.mark.parametrize("part", list(RULE))
def test_the_rule(part, tmp_path):
    files, expected = RULE[part]
    assert cycles(_graph(tmp_path, {"__init__.py": "", **files})) == expected


def test_the_edges_of_a_package():
    graph = import_graph(ROOT / "bench")
    assert {"bench.launch.gloo", "bench.launch.flavour"} <= graph["bench.launch"]  # the __init__ imports them
    assert "bench.launch" not in graph["bench.launch.gloo"]  # its own package's __init__ ran before it
    assert "bench.launch" in graph["bench.launch.evidence"]  # it takes names from that __init__
    # importing bench.launch.evidence runs bench.launch's __init__
    assert "bench.launch" in graph["bench.execution.runner"]
