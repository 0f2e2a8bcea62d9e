"""`bench images push REGISTRY VARIANT...`: local images tagged `REGISTRY/<name>:<tag>` and pushed by the engine, and
the digest each push gave recorded in `<log-dir>/pushed.json`, so that a cluster backend can name exactly the image it
pushed (`REGISTRY/<name>@sha256:...`), not a tag that may since have moved.

pushed.json: {local "name:tag": {registry: {"reference", "registry", "image_id", "pushed_at"}}}, one entry per
registry the image went to (the latest push to it). `pushed_reference` reads it.

The digest: podman writes it to `--digestfile`; docker has none, so its repository digests are read after the push
(`image inspect`, the one of the repository just pushed to).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bench.core.errors import BenchInputError
from bench.images.engines import Engine

DEFAULT_LOG_DIR = Path("results/images")  # `bench images build|check|push --log-dir`'s default
PUSHED_FILE = "pushed.json"
PUSH_TIMEOUT_S = 3600  # a first push of a 4 GB image over a slow link
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# A registry as image references name it (the distribution reference grammar, less the tag): a host (dotted DNS
# labels, or localhost), an optional port, then optional lower-case path components (an organisation, a project).
_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REGISTRY = re.compile(rf"^{_HOST}(?:/{_PATH})*$")


def check_registry(registry: str) -> str:
    """The registry as given, or BenchInputError (one line) saying what is wrong with it."""
    if not registry or any(ch.isspace() for ch in registry):
        raise BenchInputError(f"registry {registry!r}: empty or has whitespace; give a host and path, "
                              "e.g. ghcr.io/org or localhost:5000")
    if "://" in registry:
        raise BenchInputError(f"registry {registry!r}: no scheme (https://); give the host and path only, "
                              f"e.g. {registry.split('://', 1)[1].rstrip('/') or 'ghcr.io/org'}")
    if not REGISTRY.match(registry):
        raise BenchInputError(f"registry {registry!r} is not a registry host[:port][/path] (the path lower case, "
                              "no tag or digest), e.g. ghcr.io/org or localhost:5000")
    return registry


def remote_name(image: str, registry: str) -> str:
    """`REGISTRY/<name>:<tag>` for a local `name:tag`."""
    return f"{registry}/{image}"


def repository(reference: str) -> str:
    """A reference without its tag or digest (`ghcr.io/org/bench-pt-tf-openmpi`)."""
    name = reference.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name[: len(name) - len(last)] + last.split(":", 1)[0]


def tag_argv(engine: Engine, image: str, remote: str) -> list[str]:
    return engine.command("tag", image, remote)


def push_argv(engine: Engine, remote: str, digest_file: Path) -> list[str]:
    """podman writes the pushed manifest's digest to a file; docker prints it (read back by digest_argv)."""
    if engine.name == "podman":
        return engine.command("push", "--digestfile", str(digest_file), remote)
    return engine.command("push", remote)


def digest_argv(engine: Engine, remote: str) -> list[str]:
    """docker: the image's repository digests (`repo@sha256:...`, one per repository it was pushed to), as JSON."""
    return engine.command("image", "inspect", "--format", "{{json .RepoDigests}}", remote)


def image_id_argv(engine: Engine, image: str) -> list[str]:
    return engine.command("image", "inspect", "--format", "{{.Id}}", image)


def reference_from_repo_digests(output: str, remote: str) -> str | None:
    """The `repo@sha256:...` of `docker image inspect`'s RepoDigests that belongs to the repository pushed to."""
    try:
        digests = json.loads(output.strip() or "[]") or []
    except ValueError:
        return None
    repo = repository(remote)
    return next((d for d in digests if isinstance(d, str) and d.startswith(repo + "@") and
                 DIGEST.match(d.split("@", 1)[1])), None)


@dataclass
class Pushed:
    image: str  # the local name:tag
    registry: str
    reference: str  # REGISTRY/name@sha256:...
    image_id: str | None
    pushed_at: str

    def line(self) -> str:
        return f"{self.image}: pushed as {self.reference}"

    def entry(self) -> dict[str, str | None]:
        return {"reference": self.reference, "registry": self.registry, "image_id": self.image_id,
                "pushed_at": self.pushed_at}


def push(engine: Engine, image: str, registry: str, log: Path) -> Pushed:
    """Tags and pushes one local image (the engine's output into `log`); RuntimeError naming the log on failure."""
    remote = remote_name(image, registry)
    with tempfile.TemporaryDirectory(prefix="bench-push-") as tmp, log.open("w") as out:
        digest_file = Path(tmp) / "digest"

        def run(argv: list[str], capture: bool = False) -> subprocess.CompletedProcess:
            out.write("$ " + " ".join(argv) + "\n")
            out.flush()
            done = subprocess.run(argv, stdout=subprocess.PIPE if capture else out, stderr=out, text=True,
                                  stdin=subprocess.DEVNULL, timeout=PUSH_TIMEOUT_S, check=False)
            if done.returncode != 0:
                sub = argv[len(engine.command("x")) - 1]  # the subcommand, past the engine's global options
                raise RuntimeError(f"{image}: {engine.name} {sub} failed (exit {done.returncode}); "
                                   f"its output is in {log}")
            return done

        run(tag_argv(engine, image, remote))
        run(push_argv(engine, remote, digest_file))
        if engine.name == "podman":
            digest = digest_file.read_text().strip() if digest_file.exists() else ""
            reference = f"{repository(remote)}@{digest}" if DIGEST.match(digest) else None
        else:
            reference = reference_from_repo_digests(run(digest_argv(engine, remote), capture=True).stdout, remote)
        if reference is None:
            raise RuntimeError(f"{image}: pushed, but {engine.name} gave no sha256 digest for {remote}; see {log}")
        image_id = run(image_id_argv(engine, image), capture=True).stdout.strip() or None
    return Pushed(image, registry, reference, image_id, datetime.now(timezone.utc).isoformat(timespec="seconds"))


# --- pushed.json -------------------------------------------------------------------------------------------------
def read_pushed(log_dir: str | Path = DEFAULT_LOG_DIR) -> dict[str, dict[str, dict]]:
    """pushed.json's content ({} when there is none); BenchInputError (one line) when it is not one."""
    path = Path(log_dir) / PUSHED_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise BenchInputError(f"cannot read the pushed images: {e}", str(path)) from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) and all(isinstance(e, dict) for e in v.values())
                                             for v in data.values()):
        raise BenchInputError("not a pushed-images file ({image: {registry: {reference, ...}}})", str(path))
    return data


def record_pushed(pushed: Pushed, log_dir: str | Path = DEFAULT_LOG_DIR) -> Path:
    """Adds (or replaces) this image's entry for its registry in pushed.json, written whole then renamed."""
    folder = Path(log_dir)
    folder.mkdir(parents=True, exist_ok=True)
    data = read_pushed(folder)
    data.setdefault(pushed.image, {})[pushed.registry] = pushed.entry()
    path = folder / PUSHED_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def pushed_reference(image: str, registry: str | None = None, log_dir: str | Path = DEFAULT_LOG_DIR) -> str | None:
    """The digest reference (`REGISTRY/name@sha256:...`) recorded for the local image `name:tag`: the one pushed to
    `registry` when there is one, else the latest push to any registry; None when it was never pushed (from this
    log_dir). It names what was pushed, which a later build of the same tag does not change."""
    entries = read_pushed(log_dir).get(image) or {}
    if registry is not None and isinstance(entries.get(registry), dict) and entries[registry].get("reference"):
        return entries[registry]["reference"]
    latest = sorted((e for e in entries.values() if e.get("reference")), key=lambda e: str(e.get("pushed_at", "")))
    return latest[-1]["reference"] if latest else None
