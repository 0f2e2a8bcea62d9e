"""Container images for cluster backends: one per framework set x MPI flavour x CUDA generation, all rendered from
the one template docker/Dockerfile.j2 into docker/rendered/Dockerfile.<variant> (committed, so `docker build` needs
no Python; tests/test_images.py checks they equal a fresh render).

Image names are `bench-<frameworks>-<mpi>:<generation>`, e.g. `bench-pt-tf-openmpi:current`. The scheme is a
contract (the Azure ML backend calls `image_for_cell`): change it only with a migration note.

Versions: the current and cpu generations install exactly setup.cfg's pins through scripts/install.sh (the `make run`
recipe); nothing here repeats those version strings. The legacy generation cannot use them (torch 2.13 / TF 2.21 have
no Kepler/Pascal kernels, and setup.cfg needs Python >= 3.11), so its framework pins live in LEGACY_PINS below, each
with its source.
"""
from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.launch import LAUNCHERS, flavour_named

ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = ROOT / "docker"
TEMPLATE = "Dockerfile.j2"
RENDERED_DIR = DOCKER_DIR / "rendered"

# --- vocabulary --------------------------------------------------------------------------------------------------
# One framework set for now: "pt-tf" (PyTorch + TensorFlow + Keras), what `make run` installs. scripts/install.sh and
# scripts/build_horovod.sh install and build both frameworks unconditionally; a PyTorch-only image would need a second
# recipe. Adding a set is a row here plus a framework switch in the scripts.
FRAMEWORK_SETS: dict[str, tuple[str, ...]] = {"pt-tf": ("pytorch", "tensorflow", "keras")}

# What an image installs for each MPI flavour is the flavour's own recipe (`Flavour.image`, bench/launch/<flavour>.py):
# its apt packages, its runtime wheel, and whether it has an image at all (Gloo is Horovod's own controller: it needs
# no MPI, and the Open MPI image has Gloo built in, so gloo cells run on the openmpi image). Horovod is built against
# the flavour's MPI ABI (BENCH_MPI for scripts/build_horovod.sh): Intel MPI shares MPICH's libmpi.so.12, so the
# intelmpi image builds against the MPICH wheel and runs with Intel MPI's runtime (bench/launch/runtimes.py).


def image_flavours() -> tuple[str, ...]:
    """The flavours that have an image of their own, in the registry's order."""
    return tuple(name for name, f in LAUNCHERS.items() if f.image.runs_on is None)


def image_flavour(mpi: str) -> str:
    """The flavour whose image runs cells of `mpi`."""
    return flavour_named(mpi).image.runs_on or mpi


def abi_wheels(abi: str) -> list[tuple[str, str | None]]:
    """(wheel, prefix inside the venv or None) of every flavour of one ABI, as scripts/install.sh installs them into
    that ABI's environment: the environment's own runtime first (its compiler wrappers build Horovod), then those
    that sit in a prefix of their own."""
    found = [(f.image.wheel, f.runtime_prefix) for f in LAUNCHERS.values() if f.abi == abi and f.image.wheel]
    return sorted(found, key=lambda w: w[1] is not None)


@dataclass(frozen=True)
class Generation:
    name: str
    base: str                      # pinned base image tag
    python: str                    # interpreter that makes the venv
    cuda: str | None               # CUDA toolkit of the base image (and of the torch build required)
    horovod_cc: str | None         # HOROVOD_BUILD_CUDA_CC_LIST: Horovod's own CUDA kernels
    torch_index: str | None        # extra index for the torch build matching `cuda`
    uses_install_sh: bool          # True: setup.cfg pins via scripts/install.sh; False: LEGACY_PINS
    summary: str


# GPUs below this compute capability get the legacy generation. Kepler (3.7) has no CUDA 12 support at all (dropped
# in CUDA 12.0); Pascal (6.x) is kept with it so the 2018-19 study's K80/P40/P100 run one software stack, and the
# current generation's Horovod kernels (HOROVOD_BUILD_CUDA_CC_LIST) start at 7.0.
LEGACY_BELOW_CC = 7.0

GENERATIONS: dict[str, Generation] = {
    "legacy": Generation(
        name="legacy",
        # CUDA 11.8 is the last toolkit that still compiles for sm_37 (dropped in 12.0); Ubuntu 22.04 ships Python 3.10,
        # which both torch 2.3 and TensorFlow 2.14 support. cudnn8: what TF 2.14 was built against (build_info below).
        base="nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04",
        python="python3",
        cuda="11.8",
        # K80 = 3.7, P100 = 6.0, P40 = 6.1 (catalog.yaml); 7.0 too, so a V100 can run the legacy image for comparison.
        horovod_cc="37,60,61,70",
        torch_index="https://download.pytorch.org/whl/cu118",
        uses_install_sh=False,
        summary="K80/P40/P100-era GPUs (compute capability < 7.0): CUDA 11.8, torch 2.3.1+cu118, TensorFlow 2.14.1",
    ),
    "current": Generation(
        name="current",
        base="nvidia/cuda:12.6.3-cudnn-devel-ubuntu24.04",
        python="python3",
        cuda="12.6",
        horovod_cc="70,75,80,86,90",
        # setup.cfg pins torch==2.13.0; PyPI's wheel of it is the CUDA 13.0 build (requires cuda-toolkit==13.0.3), and
        # CUDA 13 has no sm_70, so V100 needs the cu126 build of the same version from PyTorch's index.
        torch_index="https://download.pytorch.org/whl/cu126",
        uses_install_sh=True,
        summary="V100/T4/A100/H100/H200 (compute capability >= 7.0): CUDA 12.6, setup.cfg's pins (torch +cu126)",
    ),
    "cpu": Generation(
        name="cpu",
        base="debian:bookworm-slim",
        python="python3",
        cuda=None,
        horovod_cc=None,
        # The CPU build of the pinned torch (PyPI's is a CUDA build that pulls ~2.8 GiB of nvidia packages).
        torch_index="https://download.pytorch.org/whl/cpu",
        uses_install_sh=True,
        summary="CPU fallback workers: Debian 12, its Python 3.11, setup.cfg's pins (torch +cpu)",
    ),
}

# Legacy framework pins, the one place they are written. Everything not listed (Horovod's build/runtime helpers:
# cloudpickle, psutil, PyYAML, packaging, cffi) comes from setup.cfg, whose pins all support Python 3.10.
#  - torch 2.3.1+cu118: PyTorch's wheel builds for CUDA 11.8 add sm_37 to the arch list (pytorch/builder
#    manywheel/build_cuda.sh: `11.8) TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST};3.7;9.0"`, base list
#    5.0;6.0;7.0;7.5;8.0;8.6; pytorch/pytorch#95648 shows such a build reporting sm_37...sm_90). 2.3 is the first
#    release with torch.amp.GradScaler(device), which models/workloads/resnet50/pytorch_worker.py uses, and the last
# whose cu118 build
#    links cuDNN 8 (2.4 moved to cuDNN 9).
#  - tensorflow 2.14.1: the last TF release built with CUDA 11 (2.15 moved to CUDA 12.2). Its wheel's
#    tensorflow/python/platform/build_info.py (read from the PyPI wheel here) says cuda_version 11.8, cudnn 8,
#    cuda_compute_capabilities sm_35, sm_50, sm_60, sm_70, sm_75, compute_80; sm_35 code runs on sm_37 (same major).
#    Keras 2.14 is built in (Horovod's Keras averaging needs Keras 2).
#  - numpy 1.26.4: TF 2.14 requires numpy < 2 and torch 2.3 wheels are built against numpy 1.x.
#  - pillow: not pinned by setup.cfg (matplotlib pulls it); the real-data reader needs it.
#  - setuptools/wheel: the versions scripts/install.sh installs.
LEGACY_PINS: dict[str, str] = {
    "torch": "2.3.1+cu118",
    "tensorflow": "2.14.1",
    "numpy": "1.26.4",
    "pillow": "11.3.0",
    "setuptools": "80.9.0",
    "wheel": "0.45.1",
}
LEGACY_FROM_SETUP_CFG: tuple[str, ...] = ("cloudpickle", "psutil", "PyYAML", "packaging", "cffi")

# apt packages (each MPI flavour's own are in its recipe). InfiniBand user space for GPU generations (NCCL and UCX
# dlopen libibverbs); NCCL from the NVIDIA repository the nvidia/cuda base images configure (devel images already
# carry it: the install is then a no-op).
BUILD_PACKAGES = ("ca-certificates", "cmake", "g++", "make")
PYTHON_PACKAGES = ("python3", "python3-dev", "python3-venv")
IB_PACKAGES = ("rdma-core", "ibverbs-providers", "libibverbs1", "librdmacm1")
NCCL_PACKAGES = ("libnccl2", "libnccl-dev")


@dataclass(frozen=True)
class Variant:
    frameworks: str
    mpi: str
    generation: str

    @property
    def id(self) -> str:
        return f"{self.frameworks}-{self.mpi}-{self.generation}"

    @property
    def image(self) -> str:
        return f"bench-{self.frameworks}-{self.mpi}:{self.generation}"

    @property
    def dockerfile(self) -> str:
        return f"Dockerfile.{self.id}"


def variants() -> list[Variant]:
    """Every image that exists: the full product (no combination is left out)."""
    return [Variant(f, m, g) for f in FRAMEWORK_SETS for m in image_flavours() for g in GENERATIONS]


def variant(variant_id: str) -> Variant:
    for v in variants():
        if v.id == variant_id:
            return v
    raise KeyError(f"no image variant {variant_id!r}; known: {', '.join(v.id for v in variants())}")


# --- which image runs a cell -------------------------------------------------------------------------------------
def cuda_generation(sku: Any) -> str:
    """legacy / current / cpu for a catalogue key or GpuSku, from its compute capability."""
    from bench.facts.catalog import catalog

    entry = catalog()[sku] if isinstance(sku, str) else sku
    if entry.compute_capability is None:
        return "cpu"
    return "legacy" if float(entry.compute_capability) < LEGACY_BELOW_CC else "current"


def framework_set(framework: str) -> str:
    for name, members in FRAMEWORK_SETS.items():
        if framework in members:
            return name
    raise KeyError(f"no image has framework {framework!r}")


def variant_for_cell(cell: dict[str, Any]) -> Variant:
    return Variant(framework_set(cell["framework"]), image_flavour(cell["mpi"]), cuda_generation(cell["gpu"]))


def image_for_cell(cell: dict[str, Any]) -> str:
    """The image name:tag (no registry) that runs this cell, e.g. "bench-pt-tf-openmpi:current"."""
    return variant_for_cell(cell).image


# --- rendering -----------------------------------------------------------------------------------------------------
def setup_cfg_pins(path: Path = ROOT / "setup.cfg") -> dict[str, str]:
    """name (lower case) -> version for every `name==version` in install_requires and the extras."""
    cfg = configparser.ConfigParser()
    cfg.read(path)
    text = cfg.get("options", "install_requires") + "\n" + "\n".join(cfg["options.extras_require"].values())
    pins = {}
    for line in text.splitlines():
        m = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;#]+)", line)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def _context(v: Variant) -> dict[str, Any]:
    flavour = flavour_named(v.mpi)
    gen = GENERATIONS[v.generation]
    gpu = gen.cuda is not None
    packages = list(BUILD_PACKAGES) + list(flavour.image.apt)
    packages += PYTHON_PACKAGES  # every base is a plain OS image: the venv's Python is the distribution's
    if gpu:
        packages += IB_PACKAGES + NCCL_PACKAGES
    pins = setup_cfg_pins()
    legacy = [] if gen.uses_install_sh else (
        [f"{n}=={ver}" for n, ver in LEGACY_PINS.items()] + [f"{n}=={pins[n.lower()]}" for n in LEGACY_FROM_SETUP_CFG])
    return {
        "v": v, "gen": gen, "gpu": gpu,
        "packages": sorted(set(packages)),
        "build_abi": flavour.abi,
        # A venv's own libmpi for the install step's own import check (see the template's ENV for why).
        "abi_env": "LD_LIBRARY_PATH=/opt/bench/.venv/lib " if flavour.libmpi_in_venv else "",
        "libmpi_in_venv": flavour.libmpi_in_venv,
        "abi_note": flavour.image.abi_note,
        "frameworks": FRAMEWORK_SETS[v.frameworks],
        "legacy_pins": legacy,
        "abi_wheels": abi_wheels(flavour.abi),
    }


def render(v: Variant | str) -> str:
    import jinja2

    v = variant(v) if isinstance(v, str) else v
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(DOCKER_DIR), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    return env.get_template(TEMPLATE).render(**_context(v))


def render_all(out_dir: str | Path = RENDERED_DIR) -> list[Path]:
    """Writes Dockerfile.<variant> for every variant into out_dir; returns the paths written."""
    return write_rendered(out_dir, ((v.dockerfile, render(v)) for v in variants()))


def write_rendered(out_dir: str | Path, files) -> list[Path]:
    """Writes each (file name, text) of `files` into out_dir (made if missing); returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files:
        path = out / name
        path.write_text(text)
        written.append(path)
    return written

