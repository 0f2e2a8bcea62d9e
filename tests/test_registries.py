"""Registries are the only lists of names, and every consumer covers every entry: each MPI flavour, backend, workload
and GPU of the catalogue is walked through everything that must know it. A missing piece fails with a message naming
the entry and the piece; the dummy flavour below proves the check can fail."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.backends import BACKENDS
from bench.facts.catalog import catalog
from bench.images import recipes
from bench.launch import LAUNCHERS, Flavour, LaunchSpec, Rendered, Ssh, runtimes
from bench.launch.flavour import ImageRecipe
from bench.planning.feasibility import build_reason
from bench.planning.matrix import load_matrix_text
from bench.records import transport
from models.registry.workloads import WORKLOADS

LOGS = Path(__file__).parent / "data" / "transport"
PROGRAM = ("python", "worker.py")
ONE_HOST = LaunchSpec(workers=2, hosts=(("localhost", 2),), program=PROGRAM)
TWO_HOSTS = LaunchSpec(workers=4, hosts=(("node1", 2), ("node2", 2)), program=PROGRAM, iface="eth1",
                       ssh=Ssh(port=2222, identity_file="/keys/id"))


def _real_logs(name: str) -> list[str]:
    """A flavour's recorded logs are named after it (mpich5_ofi_tcp.log is MPICH's); only real runs count here, each
    without its provenance header (which names transports itself)."""
    logs = []
    for path in sorted(LOGS.glob(f"{name}*.log")):
        lines = path.read_text().splitlines()
        if any(ln.startswith("# ") and "Real run" in ln for ln in lines):
            logs.append("\n".join(ln for ln in lines if not ln.startswith("# ")))
    return logs


def flavour_gaps(f: Flavour) -> list[str]:
    """Every piece bench needs from a flavour, each as 'flavour <name>: <what is missing>'."""
    name = getattr(f, "name", "?")
    gaps: list[str] = []

    def need(what: str, check) -> None:
        try:
            problem = check()
        except Exception as e:  # a piece that raises is a missing piece
            problem = f"{type(e).__name__}: {e}"
        if problem:
            gaps.append(f"flavour {name}: {what} ({problem})" if isinstance(problem, str)
                        else f"flavour {name}: {what}")

    need("a title and a launcher tool", lambda: not (getattr(f, "title", None) and getattr(f, "tool", None)))

    def rendering():
        for spec in (ONE_HOST, TWO_HOSTS):
            r = f.render(spec, "/opt/launcher")
            if not isinstance(r, Rendered) or r.argv[0] != "/opt/launcher" or r.argv[-len(PROGRAM):] != PROGRAM:
                return f"{len(spec.hosts)}-host render is not launcher ... program"
        return None
    need("argv rendering for one host and for several", rendering)
    need("fabric env for ib true and false", lambda: not all(
        isinstance(f.fabric_env(LaunchSpec(2, (("localhost", 2),), PROGRAM, ib=ib)), dict) for ib in (True, False)))
    need("a launcher env for launch lines bench does not write (Azure ML)",
         lambda: not isinstance(f.launcher_env(LaunchSpec(1, (), (), iface="eth0")), dict))

    def debug():
        env = transport.debug_env_for(f, False)
        unknown = set(f.layers) - set(transport.SHARED_DEBUG_ENV)
        return f"unknown shared layers {sorted(unknown)}" if unknown else (not f.debug or not env)
    need("debug switches that make its transport visible", debug)

    def parser():
        logs = _real_logs(name)
        if not logs:
            return f"no real log named {name}*.log in tests/data/transport"
        decided = [transport.parse_log(log, f, False, 1) for log in logs]
        if not any(t.effective != "unknown" and t.layer in (name, *f.layers) for t in decided):
            return "its parser decides none of its recorded logs"
        return None
    need("a log parser with a recorded real log", parser)

    def runtime():
        if getattr(f, "abi", None) not in runtimes.ABIS:
            return f"abi {getattr(f, 'abi', None)!r} is none of {runtimes.ABIS}"
        rt = runtimes.runtime_for(name, "/opt/venv/bin/python")
        return None if rt.bin_dirs and rt.python else "no runtime"
    need("a runtime (ABI and environment)", runtime)

    def image():
        recipe = getattr(f, "image", None)
        if not isinstance(recipe, ImageRecipe):
            return "no ImageRecipe"
        if recipe.runs_on:
            return None if recipe.runs_on in recipes.image_flavours() else f"runs_on {recipe.runs_on!r} has no image"
        if not (recipe.apt or recipe.wheel):
            return "installs nothing (no apt packages, no wheel)"
        for gen in recipes.GENERATIONS:
            text = recipes.render(recipes.Variant("pt-tf", name, gen))
            if f"BENCH_MPI={f.abi}" not in text:
                return f"the {gen} image does not build against {f.abi}"
        return None
    need("an image recipe", image)
    # bench doctor's probe (bench/execution/doctor.py) renders a 2-rank launch with it and checks the controller it
    # reports.
    need("a Horovod controller for bench doctor's probe", lambda: f.controller not in ("mpi", "gloo")
         and f"controller {f.controller!r} is neither mpi nor gloo")
    need("the expected value's facts (progress_threads naming its title, an int stand_in_rank)",
         lambda: not (f.title in str(getattr(f, "progress_threads", "")) and isinstance(getattr(f, "stand_in_rank",
                                                                                          None), int)))
    # The MPI operator's CRD (bench/data/kubernetes/) enumerates spec.mpiImplementation.
    need("the clusters' facts (mpi_operator_implementation, srun_starts_ranks)",
         lambda: getattr(f, "mpi_operator_implementation", None) not in ("OpenMPI", "Intel", "MPICH")
         or not isinstance(f.srun_starts_ranks, bool))
    need("planning answers (native engine, Azure ML launch)",
         lambda: f.native not in (None, "torchrun", "launcher") or f.azureml_launch not in ("mpi", "own"))

    def matrix():
        cells = load_matrix_text(f"name: t\naxes: {{gpu: [cpu], mpi: [{name}]}}\n").cells()
        return build_reason(cells[0]) or None
    need("a matrix value that plans", matrix)
    return gaps


@pytest.mark.parametrize("name", list(LAUNCHERS))
def test_every_flavour_has_every_piece(name):
    assert flavour_gaps(LAUNCHERS[name]) == []


class _HalfDone(Flavour):
    """A flavour someone started: a name, a launcher and an ABI, nothing else."""
    name = "halfdone"
    title = "Half Done MPI"
    tool = "halfrun"
    abi = "openmpi"


def test_an_incomplete_flavour_is_named_with_what_it_lacks(monkeypatch):
    monkeypatch.setitem(LAUNCHERS, "halfdone", _HalfDone())
    gaps = flavour_gaps(LAUNCHERS["halfdone"])
    for piece in ("argv rendering", "debug switches", "log parser", "image recipe", "a matrix value",
                  "expected value's facts", "clusters' facts"):
        assert any(g.startswith("flavour halfdone: ") and piece in g for g in gaps), (piece, gaps)
    # ... and the pieces it does have are not reported
    assert not any("runtime" in g or "fabric env" in g for g in gaps), gaps


def test_matrix_names_come_from_the_registries():
    from typing import get_args

    from bench.planning.matrix import Backend, Framework, MpiFlavour

    assert get_args(MpiFlavour) == tuple(LAUNCHERS)
    assert get_args(Framework) == tuple(WORKLOADS)
    assert get_args(Backend.model_fields["name"].annotation) == tuple(BACKENDS)


def _one_of(names) -> str:
    quoted = [f"'{n}'" for n in names]
    return ", ".join(quoted[:-1]) + " or " + quoted[-1]


def test_a_registered_flavour_is_a_matrix_value(monkeypatch):
    # The Literal is built from the registry when bench.planning.matrix is imported: a name outside it is rejected with
    # the file and line, naming every registered value, so feasibility never sees an unknown flavour.
    import re

    from bench.core.errors import BenchInputError

    with pytest.raises(BenchInputError, match=re.escape(f"axes.mpi[0]: must be {_one_of(LAUNCHERS)}")):
        load_matrix_text("name: t\naxes: {gpu: [cpu], mpi: [no-such-mpi]}\n")
    with pytest.raises(BenchInputError, match=re.escape(f"axes.framework[0]: must be {_one_of(WORKLOADS)}")):
        load_matrix_text("name: t\naxes: {gpu: [cpu], framework: [no-such-framework]}\n")


def test_every_flavour_module_is_registered():
    """A module in bench/launch/ that defines a flavour (FLAVOUR) and is missing from LAUNCHERS is a flavour that
    nothing tests and no matrix can name."""
    import importlib
    import pkgutil

    import bench.launch

    for info in pkgutil.iter_modules(bench.launch.__path__):
        flavour = getattr(importlib.import_module(f"bench.launch.{info.name}"), "FLAVOUR", None)
        if flavour is not None:
            assert LAUNCHERS.get(flavour.name) is flavour, f"bench/launch/{info.name}.py: not in bench.launch.FLAVOURS"


def test_every_backend_class_is_registered():
    """A class in bench/backends/ with the backend interface's constructor (from_settings) is a registered backend."""
    import importlib
    import inspect
    import pkgutil

    import bench.backends
    from bench.backends import load
    from bench.backends.base import Backend

    registered = {load(e.impl) for e in BACKENDS.values()} | {Backend}  # Backend: the interface itself
    for info in pkgutil.walk_packages(bench.backends.__path__, "bench.backends."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and callable(getattr(cls, "from_settings", None)) \
                    and not getattr(cls, "_is_protocol", False):  # base.Backend, the interface itself
                assert cls in registered, f"{info.name}: {cls.__name__} is not in BACKENDS"


@pytest.mark.parametrize("name", list(BACKENDS))
def test_every_backend_is_importable_with_the_runner_interface(name):
    from bench.backends import load

    backend = load(BACKENDS[name].impl)
    for method in ("from_settings", "reach_reason", "render", "describe", "submit", "poll", "collect", "cancel"):
        assert callable(getattr(backend, method, None)), f"backend {name}: no {method}"
    load_matrix_text(f"name: t\naxes: {{gpu: [cpu]}}\nbackend: {{name: {name}}}\n")  # the matrix accepts it


@pytest.mark.parametrize("framework", list(WORKLOADS))
def test_every_workload_has_a_script_an_image_and_matrix_values(framework):
    from typing import get_args

    from bench.planning.matrix import DataKind, Precision, Workload

    w = WORKLOADS[framework]
    models_dir = Path(__file__).resolve().parent.parent / "models"
    assert (models_dir / w["script"]).is_file(), f"workload {framework}: no script {w['script']}"
    assert isinstance(w["version"], str) and w["version"], f"workload {framework}: no version"
    # bench doctor finds the framework and its Horovod build through these (bench/execution/doctor.py keeps no list of
    # its own)
    assert isinstance(w.get("imports"), str) and w["imports"], f"workload {framework}: no module for doctor to import"
    assert "horovod_module" in w, f"workload {framework}: no horovod_module (None if it rides on another's)"
    # the plan and doctor check the build has it (bench/launch/bindings.py): one of Horovod's compiled bindings
    assert w.get("horovod_binding") in ("torch", "tensorflow"), f"workload {framework}: no horovod_binding"
    assert set(w["data"]) <= set(get_args(DataKind)), f"workload {framework}: data outside the matrix's"
    assert set(w["precision"]) <= set(get_args(Precision)), f"workload {framework}: precision outside the matrix's"
    assert set(w["engines"]) <= set(get_args(Workload.model_fields["engine"].annotation)), \
        f"workload {framework}: engine outside the matrix's"
    # read by its rules (models/registry/rules.py WORKLOAD_RULES), which the worker and the plan both apply
    assert isinstance(w.get("channels_first_on_cpu"), bool), f"workload {framework}: no channels_first_on_cpu"
    assert recipes.framework_set(framework), f"workload {framework}: no image carries it"


@pytest.mark.parametrize("gpu", list(catalog()))
def test_every_catalogue_entry_has_an_image_for_every_flavour(gpu):
    existing = {v.image for v in recipes.variants()}
    for mpi in LAUNCHERS:
        image = recipes.image_for_cell({"gpu": gpu, "framework": next(iter(WORKLOADS)), "mpi": mpi})
        assert image in existing, f"gpu {gpu} with {mpi}: no image {image}"
