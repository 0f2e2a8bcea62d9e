"""`bench images push REGISTRY VARIANT...` (bench/images/push.py): the tag and push commands for podman and docker, the
registry checked before anything runs, the pushed digest recorded in pushed.json and read back by `pushed_reference`,
and the whole verb run against a stand-in engine (a script that answers as podman or docker would). No real push
runs here: no container engine and no registry are reachable (docker/README.md, "Pushing to a registry")."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.core.errors import BenchInputError
from bench.images.engines import Engine
from bench.images.push import (DEFAULT_LOG_DIR, PUSHED_FILE, Pushed, check_registry, digest_argv, push_argv,
                               pushed_reference, read_pushed, record_pushed, reference_from_repo_digests, remote_name,
                               repository, tag_argv)
from tests.conftest import ROOT, bench_cli

PODMAN = Engine("podman", "/usr/bin/podman")
DOCKER = Engine("docker", "/usr/bin/docker")
SHA = "sha256:" + "ab" * 32
SHA2 = "sha256:" + "cd" * 32


def test_the_tag_and_push_commands():
    remote = remote_name("bench-pt-tf-openmpi:cpu", "ghcr.io/org")
    assert remote == "ghcr.io/org/bench-pt-tf-openmpi:cpu"
    assert tag_argv(DOCKER, "bench-pt-tf-openmpi:cpu", remote) == \
        ["/usr/bin/docker", "tag", "bench-pt-tf-openmpi:cpu", "ghcr.io/org/bench-pt-tf-openmpi:cpu"]
    assert push_argv(DOCKER, remote, Path("/tmp/d")) == ["/usr/bin/docker", "push", remote]
    assert digest_argv(DOCKER, remote) == \
        ["/usr/bin/docker", "image", "inspect", "--format", "{{json .RepoDigests}}", remote]
    # podman: the same after its global options (runc where this host needs it), the digest written to a file.
    podman_push = push_argv(PODMAN, remote, Path("/tmp/d"))
    assert podman_push[0] == "/usr/bin/podman" and podman_push[-4:] == ["push", "--digestfile", "/tmp/d", remote]
    assert tag_argv(PODMAN, "x:1", "r.io/x:1")[-3:] == ["tag", "x:1", "r.io/x:1"]


@pytest.mark.parametrize("registry", ["ghcr.io/org", "localhost:5000", "myacr.azurecr.io", "r.example.com:443/a/b-c",
                                      "registry.k8s.local/team_1/sub.proj"])
def test_registries_that_are_accepted(registry):
    assert check_registry(registry) == registry


@pytest.mark.parametrize("registry,message", [
    ("https://ghcr.io/org", "no scheme"),
    ("ghcr.io/ org", "whitespace"),
    ("ghcr.io/org\n", "whitespace"),
    ("", "empty"),
    ("ghcr.io/Org", "not a registry"),
    ("ghcr.io/org:tag", "not a registry"),
    (f"ghcr.io/org@{SHA}", "not a registry"),
    ("ghcr.io/org/", "not a registry"),
    ("-ghcr.io", "not a registry"),
])
def test_registries_that_are_refused_in_one_line(registry, message):
    with pytest.raises(BenchInputError, match=message) as e:
        check_registry(registry)
    assert "\n" not in str(e.value)


def test_the_digest_reference_of_the_repository_pushed_to():
    remote = "ghcr.io/org/bench-pt-tf-openmpi:cpu"
    assert repository(remote) == "ghcr.io/org/bench-pt-tf-openmpi"
    assert repository("localhost:5000/x:1") == "localhost:5000/x" and repository(f"r.io/x@{SHA}") == "r.io/x"
    digests = json.dumps([f"other.io/bench-pt-tf-openmpi@{SHA2}", f"ghcr.io/org/bench-pt-tf-openmpi@{SHA}"])
    assert reference_from_repo_digests(digests, remote) == f"ghcr.io/org/bench-pt-tf-openmpi@{SHA}"
    assert reference_from_repo_digests("[]", remote) is None
    assert reference_from_repo_digests("null", remote) is None and reference_from_repo_digests("<no", remote) is None


def test_pushed_json_round_trip_and_pushed_reference(tmp_path):
    image = "bench-pt-tf-openmpi:cpu-mpijob"
    assert pushed_reference(image, None, tmp_path) is None  # no file yet
    first = Pushed(image, "ghcr.io/org", f"ghcr.io/org/bench-pt-tf-openmpi@{SHA}", "sha256:1",
                   "2026-11-28T10:00:00+00:00")
    second = Pushed(image, "localhost:5000", f"localhost:5000/bench-pt-tf-openmpi@{SHA2}", "sha256:1",
                    "2026-11-28T11:00:00+00:00")
    record_pushed(first, tmp_path)
    path = record_pushed(second, tmp_path)
    assert path == tmp_path / PUSHED_FILE
    data = json.loads(path.read_text())
    assert data == {image: {"ghcr.io/org": first.entry(), "localhost:5000": second.entry()}}
    assert read_pushed(tmp_path) == data
    assert pushed_reference(image, "ghcr.io/org", tmp_path) == first.reference
    assert pushed_reference(image, "localhost:5000", tmp_path) == second.reference
    assert pushed_reference(image, None, tmp_path) == second.reference  # the latest push
    assert pushed_reference(image, "elsewhere.io", tmp_path) == second.reference  # none there: the latest
    assert pushed_reference("bench-pt-tf-mpich:cpu", "ghcr.io/org", tmp_path) is None
    # A push to the same registry again replaces that entry only.
    again = Pushed(image, "ghcr.io/org", f"ghcr.io/org/bench-pt-tf-openmpi@{SHA2}", "sha256:2",
                   "2026-11-28T12:00:00+00:00")
    record_pushed(again, tmp_path)
    assert pushed_reference(image, "ghcr.io/org", tmp_path) == again.reference
    assert pushed_reference(image, None, tmp_path) == again.reference
    assert not list(tmp_path.glob("*.tmp"))
    assert DEFAULT_LOG_DIR == Path("results/images")


@pytest.mark.parametrize("text", ["{not json", "[]", '{"x": 1}', '{"x": {"r": 2}}'])
def test_a_damaged_pushed_json_is_one_line(tmp_path, text):
    (tmp_path / PUSHED_FILE).write_text(text)
    with pytest.raises(BenchInputError, match=PUSHED_FILE) as e:
        pushed_reference("x:1", None, tmp_path)
    assert "\n" not in str(e.value)


# --- the verb ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,message", [
    (["push", "https://ghcr.io/org", "pt-tf-openmpi-cpu"], "no scheme"),
    (["push", "ghcr.io/ org", "pt-tf-openmpi-cpu"], "whitespace"),
    (["push", "ghcr.io/org", "pt-tf-nope-cpu"], "no image variant 'pt-tf-nope-cpu'"),
    (["push", "ghcr.io/org", "pt-tf-openmpi-cpu-mpijob", "pt-tf-nope-cpu-mpijob"], "no image variant"),
    (["push", "ghcr.io/org"], "the following arguments are required: VARIANT"),
    (["push", "ghcr.io/org", "pt-tf-openmpi-cpu", "--engine", "rkt"], "unknown container engine 'rkt'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    done = bench_cli("images", *args, "--log-dir", str(tmp_path / "logs"), cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "logs").exists() and done.stdout == ""


def test_no_engine_on_path_is_one_line_and_exit_2(tmp_path):
    done = bench_cli("images", "push", "ghcr.io/org", "pt-tf-openmpi-cpu", "--log-dir", str(tmp_path / "logs"),
                     cwd=tmp_path, timeout=120, env={"PATH": str(tmp_path), "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "no container engine" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "logs").exists()


# A stand-in engine: logs each call; knows the images in $FAKE_IMAGES; podman's push writes a digest file, docker's
# image inspect answers RepoDigests for the repository pushed to (as `docker push` leaves them).
FAKE_ENGINE = r"""#!/bin/bash
echo "$*" >> "$FAKE_LOG"
args=("$@")
while [[ "${args[0]}" == --* ]]; do args=("${args[@]:2}"); done
known() { [[ " $FAKE_IMAGES " == *" $1 "* ]]; }
case "${args[0]}" in
  info) [[ -z "$FAKE_DOWN" ]] || { echo "Cannot connect to the Docker daemon" >&2; exit 1; }; exit 0 ;;
  tag) known "${args[1]}"; exit $? ;;
  push)
    [[ -n "$FAKE_PUSH_FAILS" ]] && { echo "Error: unauthorized" >&2; exit 125; }
    if [[ "${args[1]}" == --digestfile ]]; then echo "$FAKE_DIGEST" > "${args[2]}"; fi
    exit 0 ;;
  image)
    case "${args[1]}" in
      exists) known "${args[2]}"; exit $? ;;
      inspect)
        if [[ "${args[2]}" == --format ]]; then
          ref="${args[4]}"
          if [[ "${args[3]}" == *RepoDigests* ]]; then echo "[\"${ref%:*}@$FAKE_DIGEST\"]"; else echo sha256:feed; fi
          exit 0
        fi
        known "${args[2]}"; exit $? ;;
    esac ;;
esac
exit 1
"""


def _fake(tmp_path: Path, name: str, images: str, **extra: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(FAKE_ENGINE)
    (bin_dir / name).chmod(0o755)
    return {"PATH": str(bin_dir), "PYTHONPATH": str(ROOT), "FAKE_LOG": str(tmp_path / "calls"),
            "FAKE_IMAGES": images, "FAKE_DIGEST": SHA, **extra}


@pytest.mark.parametrize("engine", ["podman", "docker"])
def test_push_tags_pushes_prints_and_records_the_digest(tmp_path, engine):
    env = _fake(tmp_path, engine, "bench-pt-tf-openmpi:cpu bench-pt-tf-openmpi:cpu-mpijob")
    done = bench_cli("images", "push", "localhost:5000/team", "pt-tf-openmpi-cpu-mpijob", "pt-tf-openmpi-cpu",
                     "--log-dir", str(tmp_path / "logs"), cwd=tmp_path, timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    for image, repo in (("bench-pt-tf-openmpi:cpu", "bench-pt-tf-openmpi"),
                        ("bench-pt-tf-openmpi:cpu-mpijob", "bench-pt-tf-openmpi")):
        reference = f"localhost:5000/team/{repo}@{SHA}"
        assert f"{image}: pushed as {reference}" in done.stdout
        assert pushed_reference(image, "localhost:5000/team", tmp_path / "logs") == reference
    entry = read_pushed(tmp_path / "logs")["bench-pt-tf-openmpi:cpu"]["localhost:5000/team"]
    assert entry["registry"] == "localhost:5000/team" and entry["image_id"] == "sha256:feed" and entry["pushed_at"]
    calls = (tmp_path / "calls").read_text()
    assert "tag bench-pt-tf-openmpi:cpu localhost:5000/team/bench-pt-tf-openmpi:cpu\n" in calls
    push = "push --digestfile " if engine == "podman" else "push localhost:5000/team/bench-pt-tf-openmpi:cpu\n"
    assert push in calls
    # The default image first (as named or not): the order a cluster would need them in.
    assert calls.index("tag bench-pt-tf-openmpi:cpu ") < calls.index("tag bench-pt-tf-openmpi:cpu-mpijob ")
    assert (tmp_path / "logs" / "push-pt-tf-openmpi-cpu.log").exists()


def test_an_image_not_built_here_stops_before_any_push(tmp_path):
    env = _fake(tmp_path, "podman", "bench-pt-tf-openmpi:cpu")
    done = bench_cli("images", "push", "ghcr.io/org", "pt-tf-openmpi-cpu", "pt-tf-mpich-cpu",
                     "--log-dir", str(tmp_path / "logs"), cwd=tmp_path, timeout=120, env=env)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "podman has no image bench-pt-tf-mpich:cpu: bench images build pt-tf-mpich-cpu first" in done.stderr
    calls = (tmp_path / "calls").read_text()
    assert " tag " not in f" {calls}" and "push" not in calls and not (tmp_path / "logs").exists()


def test_an_engine_that_does_not_run_is_said_so(tmp_path):
    env = _fake(tmp_path, "docker", "", FAKE_DOWN="1")  # docker's client with no daemon: no image answers
    done = bench_cli("images", "push", "ghcr.io/org", "pt-tf-openmpi-cpu", "--log-dir", str(tmp_path / "logs"),
                     cwd=tmp_path, timeout=120, env=env)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "docker does not run here: Cannot connect to the Docker daemon" in done.stderr
    assert "push" not in (tmp_path / "calls").read_text() and not (tmp_path / "logs").exists()


def test_a_failed_push_is_said_and_exit_1_nothing_recorded(tmp_path):
    env = _fake(tmp_path, "podman", "bench-pt-tf-openmpi:cpu", FAKE_PUSH_FAILS="1")
    done = bench_cli("images", "push", "ghcr.io/org", "pt-tf-openmpi-cpu", "--log-dir", str(tmp_path / "logs"),
                     cwd=tmp_path, timeout=120, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "bench-pt-tf-openmpi:cpu: podman push failed (exit 125)" in done.stdout
    assert "Error: unauthorized" in (tmp_path / "logs" / "push-pt-tf-openmpi-cpu.log").read_text()
    assert not (tmp_path / "logs" / PUSHED_FILE).exists()
