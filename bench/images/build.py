"""`bench images build`: one rendered variant built by a container engine, the host's pip settings passed in as build
secrets and read-only mounts (bench/images/pip_settings.py), then the image checked for what must not be in it. An
MPIJob layer (bench/images/mpijob.py) is built the same way FROM its default image, with nothing passed in.

The checks after the build: no string that only the host's pip settings hold (its index URLs, find-links folders)
appears in the image's history or in any text file of its file system, and no certificate of the host's CA bundle
that Debian's bundle lacks (a TLS-inspecting proxy's CA) is anywhere in it.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.images.engines import Engine
from bench.images.mpijob import MpiJobLayer
from bench.images.pip_settings import CA_TARGET, PipSettings, write_settings
from bench.images.recipes import RENDERED_DIR, ROOT, Variant

CHECK_TIMEOUT_S = 900
IMAGE_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # Debian's (and Ubuntu's) bundle inside the image
# Where the install step looks for the host's Horovod builds (docker/Dockerfile.j2's BENCH_HOROVOD_WHEEL_SEED).
WHEEL_SEED_TARGET = "/run/bench-horovod-seed"


def host_wheel_cache(environ: dict[str, str] | None = None) -> Path:
    """The folder scripts/build_horovod.sh caches its wheels in on this machine (same rule as the script's)."""
    env = os.environ if environ is None else environ
    base = env.get("BENCH_CACHE_DIR") or str(Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bench")
    return Path(base) / "wheels"


@dataclass
class Built:
    variant: Variant | MpiJobLayer
    image: str
    seconds: float
    size_bytes: int | None
    leaks: list[str]  # what of the pip settings was found in the image; [] = none

    def line(self) -> str:
        size = f"{self.size_bytes / 1e9:.2f} GB" if self.size_bytes else "size unknown"
        verdict = "no pip settings in the image" if not self.leaks else "PIP SETTINGS FOUND: " + "; ".join(self.leaks)
        return f"{self.image}: built in {self.seconds:.0f} s, {size}; {verdict}"


def build_argv(engine: Engine, v: Variant, base: str | None, torch_index: str | None, settings: PipSettings,
               secrets_dir: Path, tag: str | None = None) -> list[str]:
    """The engine's build command for one variant (nothing is run here; secrets_dir must hold write_settings')."""
    args = ["-f", str(RENDERED_DIR / v.dockerfile), "-t", tag or v.image]
    if base:
        args += ["--build-arg", f"BASE_IMAGE={base}"]
    if torch_index is not None:
        args += ["--build-arg", f"TORCH_INDEX={torch_index}"]
    args += ["--secret", f"id=pip.conf,src={secrets_dir / 'pip.conf'}"]
    if settings.ca_file is not None:
        args += ["--secret", f"id=pip-ca.crt,src={secrets_dir / 'ca.crt'}"]
    for folder in settings.local_dirs:
        args += ["--volume", f"{folder}:{folder}:ro"]
    seed = host_wheel_cache()
    if engine.mounts_dirs_at_build() and seed.is_dir():
        args += ["--volume", f"{seed}:{WHEEL_SEED_TARGET}:ro"]
    return engine.command("build", *args, str(ROOT))


def layer_build_argv(engine: Engine, layer: MpiJobLayer, base: str | None = None, tag: str | None = None) -> list[str]:
    """The engine's build command for an MPIJob layer: FROM `base` (default: its default image, by name), nothing
    passed in (it installs Debian/Ubuntu packages only), the rendered folder as the context (it copies nothing)."""
    args = ["-f", str(RENDERED_DIR / layer.dockerfile), "-t", tag or layer.image]
    if base:
        args += ["--build-arg", f"BASE={base}"]
    return engine.command("build", *args, str(RENDERED_DIR))


def _run_build(argv: list[str], image: str, log: Path) -> float:
    """Runs a build command, its output into `log`; the seconds it took, or RuntimeError naming the log."""
    start = time.monotonic()
    with log.open("w") as out:
        out.write("$ " + " ".join(argv) + "\n")
        out.flush()
        rc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    if rc != 0:
        raise RuntimeError(f"{image}: the build failed (exit {rc}); its output is in {log}")
    return time.monotonic() - start


def build(engine: Engine, v: Variant, base: str | None, torch_index: str | None, settings: PipSettings,
          log: Path, tag: str | None = None) -> Built:
    """Builds one variant (its output into `log`); raises RuntimeError naming the log when the build fails."""
    image = tag or v.image
    with tempfile.TemporaryDirectory(prefix="bench-pip-") as tmp:
        write_settings(settings, Path(tmp))
        seconds = _run_build(build_argv(engine, v, base, torch_index, settings, Path(tmp), image), image, log)
    return Built(v, image, seconds, image_size(engine, image), find_leaks(engine, image, settings))


def build_layer(engine: Engine, layer: MpiJobLayer, settings: PipSettings, log: Path) -> Built:
    """Builds an MPIJob layer FROM its default image (which must exist here), then the same check for the host's pip
    settings as its default image had (the layer passes none in; the check shows it stayed so)."""
    seconds = _run_build(layer_build_argv(engine, layer), layer.image, log)
    image = layer.image
    return Built(layer, image, seconds, image_size(engine, image), find_leaks(engine, image, settings))


def engine_problem(engine: Engine) -> str | None:
    """None when the engine answers (`info`); else the last line it gave (docker's client with no daemon, podman
    that cannot start here)."""
    try:
        done = subprocess.run(engine.command("info"), capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or [f"{engine.name} info: exit {done.returncode}"])[-1]


def image_exists(engine: Engine, image: str) -> bool:
    """Whether the engine has this image locally (podman: `image exists`; docker: `image inspect`)."""
    sub = ("image", "exists", image) if engine.name == "podman" else ("image", "inspect", image)
    return subprocess.run(engine.command(*sub), capture_output=True, check=False).returncode == 0


def image_size(engine: Engine, image: str) -> int | None:
    out = subprocess.run(engine.command("image", "inspect", "--format", "{{.Size}}", image),
                         capture_output=True, text=True, check=False)
    try:
        return int(out.stdout.strip().splitlines()[0])
    except (ValueError, IndexError):
        return None


def _pem_bodies(text: str) -> list[str]:
    """The first base64 line after the header of every certificate in a PEM bundle (a cert's unique fingerprint
    in text form: the line holds its serial and issuer)."""
    lines = text.splitlines()
    return [lines[i + 2].strip() for i, line in enumerate(lines)
            if line.strip() == "-----BEGIN CERTIFICATE-----" and i + 2 < len(lines)]


def find_leaks(engine: Engine, image: str, settings: PipSettings) -> list[str]:
    """What of the host's pip settings the image holds: in its history, or in a file (grep over its whole file
    system, binary files skipped). The host CA's certificates that the image's own bundle also has are public
    ones, not a leak."""
    leaks = []
    markers = settings.leak_markers()
    history = subprocess.run(engine.command("history", "--no-trunc", "--format", "{{.CreatedBy}}", image),
                             capture_output=True, text=True, check=True).stdout
    leaks += [f"history holds {m!r}" for m in markers if m in history]
    extra_certs: list[str] = []
    if settings.ca_file is not None:
        # The public bundles in the image: Debian's, and the Mozilla bundles that pip and requests vendor (certifi's
        # cacert.pem; a host bundle newer than the image's Debian one shares certificates with them, found in the
        # first finished build). A host certificate in none of them is the proxy's.
        own = subprocess.run(engine.command("run", "--rm", "--user", "0", "--network", "none", image, "sh", "-c",
                                            f"cat {IMAGE_CA_BUNDLE}; find / -xdev -path '*certifi/cacert.pem' "
                                            "-exec cat {} + 2>/dev/null"),
                             capture_output=True, text=True, check=False)
        image_certs = set(_pem_bodies(own.stdout))
        extra_certs = [c for c in _pem_bodies(settings.ca_file.read_text()) if c not in image_certs]
    # The pip.conf line the build's settings hold (not the mount path alone: bench's own code in the image names it).
    patterns = markers + extra_certs + [f"cert = {CA_TARGET}"]
    with tempfile.TemporaryDirectory(prefix="bench-leak-") as tmp:
        (Path(tmp) / "patterns").write_text("\n".join(patterns) + "\n")
        # grep -l: the files that hold any pattern; /proc, /sys, /dev and the mount itself are not the image's.
        argv = engine.command("run", "--rm", "--user", "0", "--network", "none", "-v", f"{tmp}:/leak-check:ro",
                              image, "grep", "-rIlF", "-f", "/leak-check/patterns", "/",
                              "--exclude-dir=proc", "--exclude-dir=sys", "--exclude-dir=dev",
                              "--exclude-dir=leak-check")
        found = subprocess.run(argv, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False)
    if found.returncode not in (0, 1):
        leaks.append(f"the file check could not run (grep exit {found.returncode}: {found.stderr.strip()[-200:]})")
    leaks += [f"file {path}" for path in found.stdout.split()]
    return leaks


def summary_json(built: Built) -> str:
    return json.dumps({"variant": built.variant.id, "image": built.image, "seconds": round(built.seconds),
                       "size_bytes": built.size_bytes, "leaks": built.leaks})
