"""What a node is, as the node itself sees it: the hosts backend runs this file on every host of a cell (over ssh,
or here) before the cell starts, and compares each host's facts with this machine's.

    python <repo>/models/probes/node_probe.py MARKER_PATH IFACE_OR_EMPTY

prints one JSON object: host, python, bench (the version of the repository this file is in), models (a digest of
models/), horovod, cores, gpus, marker (the shared workdir's marker as read here, or null), iface (whether the
interface exists; true when none was asked about). It reads the control plane's version from its file and imports
nothing from it: a node needs only models/."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
from importlib import metadata

MODELS = pathlib.Path(__file__).resolve().parents[1]
ROOT = MODELS.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: models/ imports as a package

from models.gpu.query import count_gpus_from_list  # noqa: E402


def bench_version(root: pathlib.Path = ROOT) -> str | None:
    """__version__ from <root>/bench/__init__.py, loaded as a file (the repository's own, not an installed one)."""
    spec = importlib.util.spec_from_file_location("_bench_version", root / "bench" / "__init__.py")
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except OSError:
        return None
    return getattr(module, "__version__", None)


def models_digest(models: pathlib.Path = MODELS) -> str:
    code = hashlib.sha256()
    for p in sorted(models.rglob("*.py")):
        code.update(p.relative_to(models).as_posix().encode())  # a file moved to another folder is a change too
        code.update(p.read_bytes())
    return code.hexdigest()[:16]


def gpu_count() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return count_gpus_from_list(out)


def facts(marker: str, iface: str) -> dict:
    try:
        horovod = metadata.version("horovod")
    except metadata.PackageNotFoundError:
        horovod = None
    try:
        seen = pathlib.Path(marker).read_text()
    except OSError:
        seen = None
    return {"host": socket.gethostname(), "python": sys.version.split()[0], "bench": bench_version(),
            "models": models_digest(), "horovod": horovod, "cores": len(os.sched_getaffinity(0)),
            "gpus": gpu_count(), "marker": seen,
            "iface": (not iface) or os.path.exists(os.path.join("/sys/class/net", iface))}


if __name__ == "__main__":
    print(json.dumps(facts(sys.argv[1], sys.argv[2])))
