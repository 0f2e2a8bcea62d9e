"""The MPIJob layer (bench/images/mpijob.py, docker/Dockerfile.mpijob.j2): one over each default image, FROM it by
name, adding an sshd and nothing else, ending as the unprivileged `bench` user; the default images still have no
sshd. Its sshd settings are run in a real sshd here, as an unprivileged user, with the key laid out as the MPI
operator mounts it (root's files, mode 0644, in a world-writable sticky folder): the launcher's ssh logs in with the
job's key, without a known_hosts; with StrictModes on, the same login is refused (what `StrictModes no` is for).
`bench images build` of a layer whose default image is missing stops before building (a stand-in engine here)."""
from __future__ import annotations

import getpass
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from bench.images import mpijob, recipes
from bench.images.build import layer_build_argv
from bench.images.check import IMAGE_USER
from bench.images.engines import Engine
from tests.conftest import ROOT, bench_cli

LAYERS = mpijob.layers()
SSHD, SSH, KEYGEN, SETPRIV = "/usr/sbin/sshd", shutil.which("ssh"), shutil.which("ssh-keygen"), shutil.which("setpriv")


def test_one_layer_per_default_image_named_after_it():
    assert [la.base for la in LAYERS] == recipes.variants()
    for la in LAYERS:
        assert la.id == la.base.id + "-mpijob" and la.image == la.base.image + "-mpijob"
        assert la.dockerfile == f"Dockerfile.{la.base.id}-mpijob"
        assert mpijob.image_named(la.id) == la and mpijob.image_named(la.base.id) == la.base
    with pytest.raises(KeyError, match="no image variant 'pt-tf-nope-cpu-mpijob'"):
        mpijob.image_named("pt-tf-nope-cpu-mpijob")


def test_the_layer_for_a_cell():
    cell = {"gpu": "H100", "framework": "pytorch", "mpi": "openmpi"}
    assert mpijob.mpijob_image_for_cell(cell) == "bench-pt-tf-openmpi:current-mpijob"
    assert mpijob.mpijob_image_for_cell({**cell, "mpi": "gloo"}) == "bench-pt-tf-openmpi:current-mpijob"
    assert mpijob.mpijob_image_for_cell({**cell, "gpu": "cpu", "mpi": "intelmpi"}) == "bench-pt-tf-intelmpi:cpu-mpijob"
    assert mpijob.mpijob_image_for_cell(cell) == recipes.image_for_cell(cell) + mpijob.SUFFIX


def test_the_constants_a_kubernetes_backend_reads():
    assert mpijob.SSH_PORT == 2222 and mpijob.IMAGE_UID == 10001
    assert mpijob.SSH_AUTH_MOUNT_PATH == "/home/bench/.ssh" and mpijob.SSHD_CONFIG == "/home/bench/.sshd_config"
    assert mpijob.sshd_command() == ["/usr/sbin/sshd", "-De", "-f", "/home/bench/.sshd_config"]
    # The same user as the default images: check.py's, and the template's useradd (home /home/<name>).
    assert IMAGE_USER == f"{mpijob.IMAGE_UID}:{mpijob.IMAGE_UID}"
    template = (ROOT / "docker" / "Dockerfile.j2").read_text()
    assert f"useradd --create-home --user-group --uid {mpijob.IMAGE_UID} --shell /bin/bash " \
           f"{mpijob.IMAGE_USER_NAME}" in template
    assert mpijob.IMAGE_HOME == f"/home/{mpijob.IMAGE_USER_NAME}"


@pytest.mark.parametrize("layer", LAYERS, ids=[la.id for la in LAYERS])
def test_the_layer_adds_sshd_and_nothing_else(layer):
    text = mpijob.render(layer)
    assert text == (recipes.RENDERED_DIR / layer.dockerfile).read_text(), "stale: run `python -m bench.images render`"
    assert f"\nARG BASE={layer.base.image}\nFROM ${{BASE}}\n" in text and text.count("\nFROM ") == 1
    instructions = re.findall(r"^([A-Z]+) ", text, re.MULTILINE)
    assert set(instructions) == {"ARG", "FROM", "SHELL", "USER", "RUN", "EXPOSE"}, instructions
    assert instructions.count("RUN") == 1
    assert re.findall(r"^USER .*", text, re.MULTILINE)[-1] == f"USER {mpijob.IMAGE_UID}:{mpijob.IMAGE_UID}"
    assert "apt-get install -y --no-install-recommends openssh-client openssh-server" in text
    assert "rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*" in text  # no host key baked in
    for line in mpijob.sshd_config_lines():
        assert f"      '{line}' \\\n" in text
    assert f"> {mpijob.SSHD_CONFIG} " in text and f">> {mpijob.SSHD_CONFIG} " in text
    assert f"> {mpijob.SSH_CLIENT_CONFIG}\n" in text and f"EXPOSE {mpijob.SSH_PORT}\n" in text
    for name in mpijob.SESSION_ENV:
        assert f"${{{name}:+ {name}=${name}}}" in text
    # Nothing of the default image's recipe: no pip, no copy of the code, no build secret, no ENV.
    for word in ("pip ", "pip.conf", "COPY", "ADD", "--mount", "ENV ", "PIP_"):
        assert word not in text, word


@pytest.mark.parametrize("variant", recipes.variants(), ids=[v.id for v in recipes.variants()])
def test_the_default_images_still_have_no_sshd(variant):
    text = (recipes.RENDERED_DIR / variant.dockerfile).read_text()
    assert "openssh" not in text and "sshd" not in text and "2222" not in text


def test_the_sshd_and_client_settings():
    sshd = mpijob.sshd_config_lines()
    assert "Port 2222" in sshd and "HostKey /home/bench/.ssh/id_rsa" in sshd and "StrictModes no" in sshd
    assert "PidFile /home/bench/.sshd.pid" in sshd and "AllowUsers bench" in sshd
    assert "PasswordAuthentication no" in sshd and "PermitRootLogin no" in sshd
    client = [line.strip() for line in mpijob.ssh_client_lines()]
    assert {"Port 2222", "StrictHostKeyChecking no", "UserKnownHostsFile /dev/null"} <= set(client)


def test_the_layer_build_command_passes_nothing_in():
    for engine in (Engine("podman", "podman"), Engine("docker", "docker")):
        la = mpijob.image_named("pt-tf-openmpi-cpu-mpijob")
        argv = layer_build_argv(engine, la)
        assert argv[-1] == str(recipes.RENDERED_DIR)  # the context: the layer copies nothing
        assert argv[argv.index("-f") + 1] == str(recipes.RENDERED_DIR / la.dockerfile)
        assert argv[argv.index("-t") + 1] == "bench-pt-tf-openmpi:cpu-mpijob"
        assert not any(a in argv for a in ("--secret", "--volume", "--build-arg"))
        assert "BASE=registry.example/x:1" in layer_build_argv(engine, la, base="registry.example/x:1")


# --- the settings in a real sshd ------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def operator_mount():
    """A folder laid out as the MPI operator mounts its key where sshAuthMountPath is not /root/.ssh: id_rsa,
    id_rsa.pub, authorized_keys, root's (this process's) files, mode 0644, in a folder like a Secret volume's
    (world-writable, sticky). Under /tmp, not pytest's tmp_path: an unprivileged user must reach it."""
    if not (Path(SSHD).exists() and SSH and KEYGEN):
        pytest.skip("no OpenSSH here (sshd, ssh, ssh-keygen)")
    if os.geteuid() == 0 and not SETPRIV:
        pytest.skip("running as root without setpriv: no way to run sshd unprivileged")
    top = Path(tempfile.mkdtemp(prefix="bench-mpijob-ssh-"))
    top.chmod(0o755)
    keys, run = top / "ssh", top / "run"
    keys.mkdir()
    run.mkdir(mode=0o777)
    run.chmod(0o777)  # the pid file's folder: the unprivileged sshd writes it
    subprocess.run([KEYGEN, "-q", "-t", "ecdsa", "-N", "", "-C", "mpijob", "-f", str(keys / "id_rsa")], check=True)
    shutil.copy(keys / "id_rsa.pub", keys / "authorized_keys")
    for name in ("id_rsa", "id_rsa.pub", "authorized_keys"):
        (keys / name).chmod(0o644)
    keys.chmod(0o1777)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def _as_user() -> tuple[list[str], str]:
    """The argv prefix that runs a command unprivileged, and that user's name. As root: `daemon` (not `nobody`, whose
    locked shadow entry systemd's NSS module hands even to unprivileged callers; the image's `bench` has a shadow
    entry that its unprivileged sshd cannot read, like daemon's here)."""
    if os.geteuid() != 0:
        return [], getpass.getuser()
    try:
        daemon = pwd.getpwnam("daemon")
    except KeyError:
        pytest.skip("running as root with no `daemon` user to run sshd as")
    return [SETPRIV, f"--reuid={daemon.pw_uid}", f"--regid={daemon.pw_gid}", "--clear-groups"], "daemon"


def _login(top: Path, strict_modes: bool) -> subprocess.CompletedProcess:
    prefix, user = _as_user()
    port = _free_port()
    lines = mpijob.sshd_config_lines(user=user, port=port, keys=str(top / "ssh"), pid_file=str(top / "run" / "pid"))
    if strict_modes:
        lines = [("StrictModes yes" if line == "StrictModes no" else line) for line in lines]
    (top / "sshd_config").write_text("\n".join(lines + ["SetEnv PATH=/opt/bench/.venv/bin:/usr/bin:/bin"]) + "\n")
    (top / "ssh_config").write_text("\n".join(mpijob.ssh_client_lines(port=port)) + "\n")
    test = subprocess.run([*prefix, SSHD, "-t", "-f", str(top / "sshd_config")], capture_output=True, text=True,
                          timeout=30, check=False)
    assert test.returncode == 0, test.stderr
    daemon = subprocess.Popen([*prefix, SSHD, "-De", "-f", str(top / "sshd_config")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert daemon.poll() is None, daemon.stderr.read()
                assert time.monotonic() < deadline, "sshd did not listen"
                time.sleep(0.1)
        return subprocess.run([*prefix, SSH, "-F", str(top / "ssh_config"), "-i", str(top / "ssh" / "id_rsa"),
                               "-o", "BatchMode=yes", "-v", f"{user}@127.0.0.1", "echo PATH=$PATH"],
                              capture_output=True, text=True, timeout=60, check=False)
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


def test_the_sshd_runs_unprivileged_and_lets_the_launcher_in_with_the_mounted_key(operator_mount):
    done = _login(operator_mount, strict_modes=False)
    assert "Authenticated to 127.0.0.1" in done.stderr, done.stderr[-2000:]
    assert not (operator_mount / "ssh" / "known_hosts").exists()
    assert (operator_mount / "ssh" / "id_rsa").stat().st_mode & 0o777 == 0o644  # untouched
    if os.geteuid() != 0:  # a user with a shell: the session ran, with the image's PATH (SetEnv)
        assert done.returncode == 0 and "PATH=/opt/bench/.venv/bin:/usr/bin:/bin" in done.stdout, done.stderr


def test_with_strict_modes_the_same_login_is_refused(operator_mount):
    done = _login(operator_mount, strict_modes=True)
    assert "Authenticated to" not in done.stderr and done.returncode == 255, done.stderr[-2000:]


# --- building a layer ------------------------------------------------------------------------------------------------
FAKE_ENGINE = r"""#!/bin/bash
# A stand-in container engine: logs its arguments; knows the images in $FAKE_IMAGES.
echo "$*" >> "$FAKE_LOG"
args=("$@")
while [[ "${args[0]}" == --* ]]; do args=("${args[@]:2}"); done
[[ "${args[0]}" == build ]] && exit 1  # every build fails
case "${args[0]} ${args[1]}" in
  "info ") exit 0 ;;
  "image exists") [[ " $FAKE_IMAGES " == *" ${args[2]} "* ]]; exit $? ;;
esac
exit 1
"""


def test_building_a_layer_without_its_default_image_stops_before_building(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "podman").write_text(FAKE_ENGINE)
    (bin_dir / "podman").chmod(0o755)
    env = {"PATH": str(bin_dir), "PYTHONPATH": str(ROOT), "FAKE_LOG": str(tmp_path / "calls"), "FAKE_IMAGES": ""}
    done = bench_cli("images", "build", "pt-tf-openmpi-cpu-mpijob", "--log-dir", str(tmp_path / "logs"),
                     cwd=tmp_path, timeout=120, env=env)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "built FROM bench-pt-tf-openmpi:cpu, which podman does not have" in done.stderr
    assert (tmp_path / "calls").read_text().split("\n")[0].endswith("image exists bench-pt-tf-openmpi:cpu")
    assert " build " not in (tmp_path / "calls").read_text() and not (tmp_path / "logs").exists()


def test_a_layer_is_not_built_when_its_default_image_failed_to_build(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "podman").write_text(FAKE_ENGINE)
    (bin_dir / "podman").chmod(0o755)
    env = {"PATH": str(bin_dir), "PYTHONPATH": str(ROOT), "FAKE_LOG": str(tmp_path / "calls"), "FAKE_IMAGES": ""}
    done = bench_cli("images", "build", "pt-tf-openmpi-cpu-mpijob", "pt-tf-openmpi-cpu", "--log-dir",
                     str(tmp_path / "logs"), cwd=tmp_path, timeout=120, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "bench-pt-tf-openmpi:cpu: the build failed (exit 1)" in done.stdout
    assert "bench-pt-tf-openmpi:cpu-mpijob: not built, as its default image bench-pt-tf-openmpi:cpu failed" \
        in done.stdout
    builds = [line for line in (tmp_path / "calls").read_text().splitlines() if " build " in f" {line} "]
    assert len(builds) == 1 and "Dockerfile.pt-tf-openmpi-cpu " in builds[0] + " "
