"""The backend registry is the only list of backend names, and each backend is a plug-in of its own: its class, its
config section in the matrix, no reaching into another backend's module."""
import ast
import inspect
from pathlib import Path

import pytest

from bench.backend_settings.section import BackendSettings
from bench.backends import BACKENDS, load
from bench.core.errors import BenchInputError
from bench.planning.matrix import load_matrix_text

BACKEND_DIR = Path(__file__).resolve().parent.parent / "bench" / "backends"
INTERFACE = ("from_settings", "reach_reason", "prepare", "render", "describe", "submit", "poll", "collect", "cancel")


@pytest.mark.parametrize("name", list(BACKENDS))
def test_every_registered_backend_is_complete_and_named_as_registered(name):
    entry = BACKENDS[name]
    cls = load(entry.impl)
    assert cls.name == name
    missing = [m for m in INTERFACE if not callable(getattr(cls, m, None))]
    assert not missing, f"backend {name} lacks {missing}"
    if entry.config:
        schema = load(entry.config)
        assert BackendSettings.model_fields[name].annotation is schema
        # A light module of its own: loading the matrix must not import the backend (or its optional SDK).
        assert inspect.getmodule(schema).__name__ != inspect.getmodule(cls).__name__


def test_the_matrix_name_vocabulary_is_the_registry():
    assert set(BackendSettings.model_fields["name"].annotation.__args__) == set(BACKENDS)
    sections = {k for k in BackendSettings.model_fields if k in BACKENDS}
    assert sections == {k for k, e in BACKENDS.items() if e.config}
    for name in BACKENDS:
        assert load_matrix_text(f"name: t\naxes: {{gpu: [cpu]}}\nbackend: {{name: {name}}}\n").spec.backend.name == name


def test_a_bare_backend_name_is_shorthand_for_its_section():
    short = load_matrix_text("name: t\naxes: {gpu: [cpu]}\nbackend: slurm\n").spec.backend
    full = load_matrix_text("name: t\naxes: {gpu: [cpu]}\nbackend: {name: slurm}\n").spec.backend
    assert short == full and short.name == "slurm"
    with pytest.raises(BenchInputError, match=r"<string>:3: backend.name: must be 'local'"):
        load_matrix_text("name: t\naxes: {gpu: [cpu]}\nbackend: nomad\n")


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []


def _backend_of(module: str) -> str | None:
    """The backend a bench.backends module belongs to (its package or its module), None for shared code."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in BACKENDS else None


def test_no_backend_imports_another_backend_or_a_private_helper():
    """Shared code lives in bench/backends/shared/ (cell_launch, outcome, launcher_job, ...); a backend's package
    or module is its own, and the shared code imports no backend."""
    assert {_backend_of(e.impl.split(":")[0]) for e in BACKENDS.values()} == set(BACKENDS)
    for path in sorted(BACKEND_DIR.rglob("*.py")):
        me = ".".join(("bench", "backends", *path.relative_to(BACKEND_DIR).with_suffix("").parts))
        mine = _backend_of(me)
        for module, names in _imports(path):
            if module.startswith("bench.backends"):
                theirs = _backend_of(module)
                assert theirs in (None, mine), f"{path.relative_to(BACKEND_DIR)} imports backend module {module}"
                private = [n for n in names if n.startswith("_")]
                assert not private, f"{path.relative_to(BACKEND_DIR)} imports private {private} from {module}"


def test_the_shared_package_holds_no_backend_and_every_backend_package_is_one():
    """No flat prefix families: a backend of more than one module is a package named after it."""
    flat = sorted(p.stem for p in BACKEND_DIR.glob("*.py") if p.stem not in ("__init__", "base") + tuple(BACKENDS))
    assert not flat, f"modules in bench/backends/ that are neither a backend nor base.py: {flat} (shared/ or a package)"
    for name in BACKENDS:
        package, module = BACKEND_DIR / name, BACKEND_DIR / f"{name}.py"
        assert package.is_dir() != module.is_file(), f"backend {name}: one package or one module, not both or none"


def _calls(path: Path, name: str) -> int:
    return sum(1 for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name)


@pytest.mark.parametrize("name", list(BACKENDS))
def test_every_backend_turns_a_job_into_an_outcome_through_the_one_ladder(name):
    path = BACKEND_DIR.parent.parent / f"{BACKENDS[name].impl.split(':')[0].replace('.', '/')}.py"
    assert _calls(path, "classify") >= 1, f"{path.name} does not use outcome.classify"
    assert _calls(path, "Outcome") == 0, f"{path.name} builds an Outcome itself instead of classify"


def test_only_the_launch_module_asks_for_a_runtime_or_a_cells_env():
    """One place renders a cell's launch: the backends say where it goes (Placement), cell_launch says what it is."""
    users = sorted(p.name for p in BACKEND_DIR.rglob("*.py")
                   if any(m in ("bench.launch.runtimes", "bench.launch.cellenv") for m, _ in _imports(p)))
    assert users == ["cell_launch.py"]


def test_the_guard_module_names_itself_as_python_m_runs_it():
    from bench.backends.shared import guard

    assert guard.MODULE == guard.__name__
    assert guard.remote_command("py", "--sweep", "t")[2:] == ["py", "-m", guard.__name__, "--sweep", "t"]
