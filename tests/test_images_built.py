"""Built images, for real (marker `images`): a 2-worker PyTorch cell inside the openmpi cpu image as its unprivileged
user, with records and a transport verdict, and the host's pip settings nowhere in the image. The build itself (tens
of minutes per variant on two cores) is `make images`; these tests use the image it left, and say so when it is
missing. Skipped, with the reason, where no container engine runs."""
from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from bench import images
from bench.errors import BenchInputError
from bench.image_build import find_leaks
from bench.image_check import IMAGE_USER, per_rank_hosts, run_cell
from bench.image_engines import find_engine
from bench.image_pip import host_pip_settings

VARIANT = images.variant("pt-tf-openmpi-cpu")
BASE = "localhost/debian:bookworm"  # scripts/debian_base.sh's


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


@pytest.fixture(scope="module")
def image() -> str:
    if not _exists(VARIANT.image):
        pytest.skip(f"{VARIANT.image} is not built here: `make images` builds it "
                    "(tens of minutes on two cores: docker/README.md)")
    return VARIANT.image


def test_a_two_worker_cell_runs_inside_the_image_as_its_user(image, tmp_path):
    result = run_cell(ENGINE, VARIANT, image, tmp_path / "work")
    assert result.doctor_rc == 0, (tmp_path / "work" / "doctor.txt").read_text()[-2000:]
    assert result.run_rc == 0 and result.ok, result.tail[-3000:]
    assert len(result.rows) == 2  # the cell's two repeats
    for row in result.rows:
        assert row["mpi"] == "openmpi" and row["world_size"] == 2 and row["images_per_sec"] > 0
        assert row["effective_transport"], row["transport_evidence"]
        record = json.loads(row["record_json"])
        assert len(per_rank_hosts(row)) == 2 and record["env_probe"]["python"].startswith("3.11")
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
    if not markers or not _exists(BASE):
        pytest.skip("needs pip settings with an index or find-links, and the base image (scripts/debian_base.sh)")
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
