"""`bench images build`'s parts that need no engine: the host's pip settings read the way pip reads them, the build
command passing them as secrets and read-only mounts (never as build arguments), the engine options, and bad input
(one line, exit 2, nothing run)."""
from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from bench.core.errors import BenchInputError
from bench.images import recipes
from bench.images.build import _pem_bodies, build_argv
from bench.images.engines import Engine, find_engine
from bench.images.pip_settings import CA_TARGET, host_pip_settings, write_settings
from tests.conftest import bench_cli

ROOT = Path(__file__).resolve().parent.parent
CERT = "-----BEGIN CERTIFICATE-----\nMIIB{n}\nPROXYCA{n}abcdef\nrest\n-----END CERTIFICATE-----\n"


@pytest.fixture
def pip_host(tmp_path) -> dict[str, str]:
    """A pip set-up like this machine's: a config file naming a file:// index and a find-links folder, a CA bundle
    named by PIP_CERT, a timeout in the environment."""
    (tmp_path / "index" / "simple").mkdir(parents=True)
    (tmp_path / "wheels").mkdir()
    (tmp_path / "ca.pem").write_text(CERT.format(n=1))
    (tmp_path / "pip.conf").write_text(f"[global]\nextra-index-url = file://{tmp_path}/index/simple\n"
                                       f"find-links = {tmp_path}/wheels\nno-cache-dir = true\n")
    return {"PIP_CONFIG_FILE": str(tmp_path / "pip.conf"), "PIP_CERT": str(tmp_path / "ca.pem"),
            "PIP_DEFAULT_TIMEOUT": "180", "PIP_FIND_LINKS": f"{tmp_path}/wheels", "HOME": str(tmp_path)}


def test_settings_are_read_like_pip_and_point_at_the_build_mounts(pip_host, tmp_path):
    s = host_pip_settings(pip_host)
    assert s.values["extra-index-url"] == f"file://{tmp_path}/index/simple"
    assert s.values["default-timeout"] == "180"  # the environment, after the files
    assert s.values["cert"] == CA_TARGET and s.ca_file == tmp_path / "ca.pem"
    assert "no-cache-dir" not in s.values  # about the host's pip, not about reaching the index
    assert f"{tmp_path}/index" in s.local_dirs and f"{tmp_path}/wheels" in s.local_dirs
    assert f"file://{tmp_path}/index/simple" in s.leak_markers() and f"{tmp_path}/wheels" in s.leak_markers()
    conf, ca = write_settings(s, tmp_path / "out")
    assert f"cert = {CA_TARGET}" in conf.read_text() and ca.read_text() == CERT.format(n=1)


def test_the_build_command_passes_settings_as_secrets_and_mounts_never_as_arguments(pip_host, tmp_path):
    s = host_pip_settings(pip_host)
    podman = Engine("podman", "/usr/bin/podman")
    v = recipes.variant("pt-tf-openmpi-cpu")
    argv = build_argv(podman, v, "localhost/debian:bookworm", "", s, tmp_path / "secrets")
    joined = " ".join(argv)
    assert f"--secret id=pip.conf,src={tmp_path / 'secrets' / 'pip.conf'}" in joined
    assert f"--secret id=pip-ca.crt,src={tmp_path / 'secrets' / 'ca.crt'}" in joined
    assert f"--volume {tmp_path}/wheels:{tmp_path}/wheels:ro" in joined
    assert "--build-arg BASE_IMAGE=localhost/debian:bookworm" in joined and "--build-arg TORCH_INDEX=" in joined
    build_args = [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"]
    assert not any(m in a for a in build_args for m in s.leak_markers())
    assert argv[-1] == str(ROOT) and str(recipes.RENDERED_DIR / v.dockerfile) in argv
    # The Dockerfile mounts the secrets where the pip.conf points.
    text = (recipes.RENDERED_DIR / v.dockerfile).read_text()
    assert f"id=pip-ca.crt,target={CA_TARGET}" in text and "PIP_CONFIG_FILE=/run/bench-pip/pip.conf" in text


def test_podman_gets_runc_docker_format_and_limits_within_the_hard_ones():
    argv = Engine("podman", "podman").command("build", "-t", "x", ".")
    assert argv[argv.index("build") + 1:argv.index("build") + 3] == ["--format", "docker"]
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if nofile != resource.RLIM_INFINITY:
        assert f"nofile={nofile}:{nofile}" in argv
    hybrid = not Path("/sys/fs/cgroup/cgroup.controllers").exists()
    assert ("runc" in argv) == (hybrid and any(Path(p, "runc").exists() for p in os.environ["PATH"].split(":")))
    assert Engine("docker", "docker").command("build", "-t", "x", ".") == ["docker", "build", "-t", "x", "."]


def test_pem_bodies_name_each_certificate():
    assert _pem_bodies(CERT.format(n=1) + CERT.format(n=2)) == ["PROXYCA1abcdef", "PROXYCA2abcdef"]


def test_an_unknown_engine_is_an_input_error():
    with pytest.raises(BenchInputError, match="unknown container engine 'rkt'"):
        find_engine("rkt")


@pytest.mark.parametrize("args,message", [
    (["build"], "the following arguments are required: VARIANT"),
    (["build", "pt-tf-nope-cpu"], "no image variant 'pt-tf-nope-cpu'"),
    (["build", "pt-tf-openmpi-cpu", "--engine", "rkt"], "unknown container engine 'rkt'"),
    (["check", "pt-tf-openmpi-current"], "GPU images"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    done = bench_cli("images", *args, "--log-dir", str(tmp_path / "logs"), cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "logs").exists()


def test_no_engine_on_path_is_one_line_and_exit_2(tmp_path):
    done = bench_cli("images", "build", "pt-tf-openmpi-cpu", "--log-dir", str(tmp_path / "logs"), cwd=tmp_path,
                     timeout=120, env={"PATH": str(tmp_path), "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "no container engine" in done.stderr, done.stderr
    assert not (tmp_path / "logs").exists()


def test_inside_an_image_its_one_environment_runs_its_abis_flavours(monkeypatch):
    """The images set BENCH_MPI: their main venv is that ABI's (no .venv-mpich next to it); the other ABI's flavours
    are another image's, which `bench doctor` reports instead of probing."""
    from bench.launch.runtimes import not_in_image, runtime_for

    py = "/opt/bench/.venv/bin/python"
    monkeypatch.delenv("BENCH_MPI", raising=False)
    assert runtime_for("mpich", py).python == "/opt/bench/.venv-mpich/bin/python" and not not_in_image("mpich")
    monkeypatch.setenv("BENCH_MPI", "mpich")
    assert runtime_for("mpich", py).python == py
    assert runtime_for("mpich", py).env["LD_LIBRARY_PATH"].split(":")[0] == "/opt/bench/.venv/lib"
    assert runtime_for("intelmpi", py).bin_dirs[0] == "/opt/bench/.venv/opt/impi/bin"
    assert not_in_image("openmpi") and not_in_image("gloo") and not not_in_image("intelmpi")
    monkeypatch.setenv("BENCH_MPI", "openmpi")
    assert runtime_for("openmpi", py).python == py and not_in_image("mpich") and not not_in_image("gloo")


def test_podman_builds_see_the_hosts_horovod_cache_read_only_and_docker_builds_do_not(pip_host, tmp_path, monkeypatch):
    """The install step finds the host's Horovod builds at BENCH_HOROVOD_WHEEL_SEED (scripts/build_horovod.sh reuses one
    whose key matches); docker build has no --volume, so there it compiles."""
    from bench.images.build import WHEEL_SEED_TARGET, host_wheel_cache
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache" / "wheels").mkdir(parents=True)
    assert host_wheel_cache() == tmp_path / "cache" / "wheels"
    s = host_pip_settings(pip_host)
    v = recipes.variant("pt-tf-mpich-cpu")
    podman = build_argv(Engine("podman", "/usr/bin/podman"), v, None, None, s, tmp_path / "secrets")
    assert f"{tmp_path}/cache/wheels:{WHEEL_SEED_TARGET}:ro" in podman
    docker = build_argv(Engine("docker", "/usr/bin/docker"), v, None, None, s, tmp_path / "secrets")
    assert not any(WHEEL_SEED_TARGET in a for a in docker)
    assert f"BENCH_HOROVOD_WHEEL_SEED={WHEEL_SEED_TARGET}" in (recipes.RENDERED_DIR / v.dockerfile).read_text()
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "nowhere"))  # no cache on this host: nothing mounted
    assert not any(WHEEL_SEED_TARGET in a for a in build_argv(Engine("podman", "/usr/bin/podman"), v, None, None, s,
                                                              tmp_path / "secrets"))
