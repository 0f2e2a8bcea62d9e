"""The MPIJob layer: each default image plus an sshd, for Kubeflow MPI operator MPIJobs (docker/README.md, "sshd:
only in the MPIJob layer").

The operator's launcher reaches its workers over ssh: it makes an ssh key per job (a Secret), mounts it in every pod
at the MPIJob's `spec.sshAuthMountPath` as `id_rsa`, `id_rsa.pub` and `authorized_keys` (read-only), and each worker
container runs an sshd. The default images have no sshd (bench's own backends start the ranks themselves); this layer
adds one, built FROM the default image by name, changing nothing else: the sshd runs as the image's unprivileged user
`bench` on SSH_PORT with a config of its own (SSHD_CONFIG) whose host key is the job's mounted key, and the ssh client
settings let the launcher reach it without a writable known_hosts.

What a Kubernetes backend takes from here (the one place these are written):
- SSH_PORT, SSH_AUTH_MOUNT_PATH (the MPIJob's `sshAuthMountPath`; not /root/.ssh: the operator mounts the files 0600
  there, root's, which uid IMAGE_UID cannot read; elsewhere 0644), SSHD_CONFIG, IMAGE_UID;
- mpijob_image_for_cell(cell): the layer's name:tag for a cell; sshd_command(): the worker container's command.

Names: the default image's with `-mpijob` after the tag (`bench-pt-tf-openmpi:current-mpijob`), variant id
`<variant>-mpijob`, rendered from docker/Dockerfile.mpijob.j2 into docker/rendered/Dockerfile.<variant>-mpijob.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.images.recipes import DOCKER_DIR, RENDERED_DIR, Variant, image_for_cell, variant, variants, write_rendered

SUFFIX = "-mpijob"
TEMPLATE = "Dockerfile.mpijob.j2"

IMAGE_UID = 10001  # `bench`, uid and gid, made by docker/Dockerfile.j2 (bench.images.check.IMAGE_USER)
IMAGE_USER_NAME = "bench"
IMAGE_HOME = "/home/bench"
SSH_PORT = 2222  # above 1024: an unprivileged sshd may bind it
SSH_AUTH_MOUNT_PATH = f"{IMAGE_HOME}/.ssh"  # the MPIJob's spec.sshAuthMountPath: the bench user's ~/.ssh
SSHD_CONFIG = f"{IMAGE_HOME}/.sshd_config"
SSHD_PID_FILE = f"{IMAGE_HOME}/.sshd.pid"
SSHD = "/usr/sbin/sshd"  # sshd re-executes itself: an absolute path
SSH_CLIENT_CONFIG = "/etc/ssh/ssh_config.d/bench-mpijob.conf"  # read by /etc/ssh/ssh_config's Include (Debian, Ubuntu)
# The variables the image sets that a session started by sshd must see too (sshd gives its sessions a fresh
# environment: the venv's PATH, the MPICH wheel's LD_LIBRARY_PATH, BENCH_MPI); the layer writes their values, as the
# image has them, into SetEnv.
SESSION_ENV = ("PATH", "LD_LIBRARY_PATH", "BENCH_MPI")


@dataclass(frozen=True)
class MpiJobLayer:
    base: Variant

    @property
    def id(self) -> str:
        return self.base.id + SUFFIX

    @property
    def image(self) -> str:
        return self.base.image + SUFFIX

    @property
    def dockerfile(self) -> str:
        return f"Dockerfile.{self.id}"


def layers() -> list[MpiJobLayer]:
    """One layer per default image."""
    return [MpiJobLayer(v) for v in variants()]


def image_named(name: str) -> Variant | MpiJobLayer:
    """A default variant or, with the `-mpijob` suffix, its layer; KeyError (one line) for neither."""
    try:
        return MpiJobLayer(variant(name.removesuffix(SUFFIX))) if name.endswith(SUFFIX) else variant(name)
    except KeyError:
        known = ", ".join(v.id for v in variants())
        raise KeyError(f"no image variant {name!r}; known: {known}, each also with {SUFFIX}") from None


def mpijob_image_for_cell(cell: dict[str, Any]) -> str:
    """The MPIJob layer's name:tag (no registry) for this cell, e.g. "bench-pt-tf-openmpi:current-mpijob"."""
    return image_for_cell(cell) + SUFFIX


def sshd_command() -> list[str]:
    """The worker container's command: the sshd in the foreground (-D), logging to the container's stderr (-e)."""
    return [SSHD, "-De", "-f", SSHD_CONFIG]


def sshd_config_lines(user: str = IMAGE_USER_NAME, port: int = SSH_PORT, keys: str = SSH_AUTH_MOUNT_PATH,
                      pid_file: str = SSHD_PID_FILE) -> list[str]:
    """SSHD_CONFIG without its SetEnv line (the build adds that one from the image's environment). The arguments are
    for tests that run this config in a real sshd elsewhere."""
    return [
        f"# MPIJob worker sshd, run as {user}: {' '.join(sshd_command())}",
        f"Port {port}",
        f"PidFile {pid_file}",
        # The operator's per-job key: its private half is the host key, its public half the one authorised key.
        f"HostKey {keys}/id_rsa",
        f"AuthorizedKeysFile {keys}/authorized_keys",
        # The mounted files and folder are root's (a Secret volume): StrictModes would refuse them.
        "StrictModes no",
        f"AllowUsers {user}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin no",
        # What MPI's launch needs is a remote command; nothing is forwarded.
        "AllowTcpForwarding no",
        "AllowAgentForwarding no",
        "X11Forwarding no",
        "PermitTunnel no",
        "PrintMotd no",
    ]


def ssh_client_lines(port: int = SSH_PORT) -> list[str]:
    """The launcher's ssh settings (SSH_CLIENT_CONFIG): the workers' port; their host keys are per job and
    ~/.ssh is the read-only mount, so no known_hosts is kept or checked."""
    return [
        "# ssh from an MPIJob launcher to its workers (the bench MPIJob layer)",
        "Host *",
        f"    Port {port}",
        "    StrictHostKeyChecking no",
        "    UserKnownHostsFile /dev/null",
        "    LogLevel ERROR",
    ]


def render(layer: MpiJobLayer | str) -> str:
    import jinja2

    layer = image_named(layer) if isinstance(layer, str) else layer
    if not isinstance(layer, MpiJobLayer):
        raise KeyError(f"{layer.id} is a default image, not an MPIJob layer")
    quoted = [line for line in sshd_config_lines() + ssh_client_lines() if "'" in line]
    if quoted:  # each line goes into the Dockerfile in single quotes
        raise ValueError(f"a config line holds a single quote: {quoted[0]}")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(DOCKER_DIR), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    return env.get_template(TEMPLATE).render(
        layer=layer, v=layer.base, uid=IMAGE_UID, port=SSH_PORT, sshd_config=SSHD_CONFIG,
        sshd_lines=sshd_config_lines(), client_config=SSH_CLIENT_CONFIG, client_lines=ssh_client_lines(),
        session_env=SESSION_ENV, command=sshd_command(),
        # "${PATH:+ PATH=$PATH}..." : each variable the image sets, as `NAME=value` after SetEnv (sshd_config(5)).
        session_env_arg="".join(f"${{{name}:+ {name}=${name}}}" for name in SESSION_ENV))


def render_all(out_dir: str | Path = RENDERED_DIR) -> list[Path]:
    """Writes Dockerfile.<variant>-mpijob for every layer into out_dir; returns the paths written."""
    return write_rendered(out_dir, ((layer.dockerfile, render(layer)) for layer in layers()))
