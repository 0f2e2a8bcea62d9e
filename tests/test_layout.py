"""models/ is what a cluster node gets: it must not import the control plane."""
import ast
from pathlib import Path

from tests.conftest import ROOT


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_workloads_import_nothing_from_bench():
    offenders = {p.name: sorted(m for m in imported_modules(p) if m == "bench" or m.startswith("bench."))
                 for p in (ROOT / "models").rglob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}
    assert len(offenders) >= 5  # the check really looked at the workload files
