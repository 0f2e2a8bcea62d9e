"""Built images, for real (marker `images`): a 2-worker PyTorch cell inside the openmpi cpu image as its unprivileged
user, with records and a transport verdict, and the host's pip settings nowhere in the image. The build itself (tens
of minutes per variant on two cores) is `make images`; these tests use the image it left, and say so when it is
missing. Skipped, with the reason, where no container engine runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from bench.core.errors import BenchInputError
from bench.images import recipes
from bench.images.build import find_leaks
from bench.images.check import IMAGE_USER, run_cell
from bench.images.engines import find_engine
from bench.images.pip_settings import host_pip_settings

VARIANT = recipes.variant("pt-tf-openmpi-cpu")
BASE = "localhost/debian:bookworm"  # scripts/debian_base.sh's
ROOT = Path(__file__).resolve().parent.parent


def _engine_or_reason():
    try:
        engine = find_engine()
    except BenchInputError as e:
        return None, str(e)
    info = subprocess.run(engine.command("info"), capture_output=True, text=True, timeout=120, check=False)
    if info.returncode != 0:
        return None, f"{engine.name} does not run here: {(info.stderr.strip().splitlines() or ['?'])[-1]}"
    return engine, None


ENGINE, WHY_NOT = _engine_or_reason()
pytestmark = [pytest.mark.images, pytest.mark.skipif(ENGINE is None, reason=f"no container engine: {WHY_NOT}")]


def _exists(image: str) -> bool:
    return subprocess.run(ENGINE.command("image", "exists", image) if ENGINE.name == "podman" else
                          ENGINE.command("image", "inspect", image), capture_output=True).returncode == 0


def ensure_built(variant) -> str:
    """The variant's image, built (or brought up to date) the way `make images` builds it: same base and torch index
    (the Makefile's IMAGE_BASE / IMAGE_TORCH_INDEX, read here from the environment with the same defaults). Layers
    whose inputs did not change are reused, so with a current image this takes seconds plus the leak check; a cold
    build is minutes (docker/README.md). The image must hold this checkout's code: its workers run it."""
    base = os.environ.get("IMAGE_BASE", BASE)
    if base == BASE and not _exists(BASE):
        subprocess.run([str(ROOT / "scripts" / "debian_base.sh"), BASE], check=True, capture_output=True,
                       timeout=1800)
    if variant.id not in _BUILT:
        logs = Path(tempfile.mkdtemp(prefix="bench-images-"))
        done = subprocess.run([sys.executable, "-m", "bench", "images", "build", "--base", base, "--torch-index",
                               os.environ.get("IMAGE_TORCH_INDEX", ""), "--log-dir", str(logs), variant.id],
                              capture_output=True, text=True, timeout=3600, cwd=ROOT)
        log = logs / f"{variant.id}.log"
        assert done.returncode == 0, (done.stdout + done.stderr)[-2000:] + (log.read_text()[-3000:] if log.exists()
                                                                           else "")
        _BUILT[variant.id] = variant.image
    return _BUILT[variant.id]


_BUILT: dict[str, str] = {}


@pytest.fixture(scope="module")
def image() -> str:
    return ensure_built(VARIANT)


def test_a_two_worker_cell_runs_inside_the_image_as_its_user(image, tmp_path):
    result = run_cell(ENGINE, VARIANT, image, tmp_path / "work")
    assert result.doctor_rc == 0, (tmp_path / "work" / "doctor.txt").read_text()[-2000:]
    assert result.run_rc == 0 and result.ok, result.tail[-3000:]
    assert len(result.rows) == 2  # the cell's two repeats
    for row in result.rows:
        assert row["mpi"] == "openmpi" and row["world_size"] == 2 and row["samples_per_sec"] > 0
        assert row["effective_transport"], row["transport_evidence"]
        record = json.loads(row["record_json"])
        ranks = json.loads(row["record_json"]).get("per_rank", [])
        assert len(ranks) == 2 and record["env_probe"]["python"].startswith("3.11")
    # The store was written by the image's user, not by root.
    assert (tmp_path / "work" / "image-check.db").stat().st_uid == int(IMAGE_USER.split(":")[0])


def test_the_host_pip_settings_are_not_in_the_image(image):
    settings = host_pip_settings()
    if not settings.leak_markers() and settings.ca_file is None:
        pytest.skip("this host has no pip settings to pass")
    assert find_leaks(ENGINE, image, settings) == []


def test_the_leak_check_finds_settings_written_into_an_image(tmp_path):
    """The check above can fail: a file holding one of the settings, committed into an image, is found."""
    settings = host_pip_settings()
    markers = settings.leak_markers()
    if not markers:
        pytest.skip("this host has no pip settings with an index or find-links to plant")
    if not _exists(BASE):
        subprocess.run([str(ROOT / "scripts" / "debian_base.sh"), BASE], check=True, capture_output=True, timeout=1800)
    name = f"bench-leak-{uuid.uuid4().hex[:8]}"
    subprocess.run(ENGINE.command("run", "--name", name, BASE, "sh", "-c", f"echo {markers[0]} > /root/pip-log.txt"),
                   check=True, capture_output=True)
    try:
        subprocess.run(ENGINE.command("commit", name, f"localhost/{name}:test"), check=True, capture_output=True)
        leaks = find_leaks(ENGINE, f"localhost/{name}:test", settings)
        assert leaks == ["file /root/pip-log.txt"], leaks
    finally:
        subprocess.run(ENGINE.command("rm", "-f", name), capture_output=True)
        subprocess.run(ENGINE.command("rmi", "-f", f"localhost/{name}:test"), capture_output=True)
