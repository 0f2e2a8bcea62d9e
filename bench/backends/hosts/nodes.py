"""The hosts backend's node checks: each host's facts (models/probes/node_probe.py, run there over ssh or here) and the
verdict on whether a host can run its share of a cell."""
from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

from bench.backends.shared.cell_launch import MODELS_DIR
from bench.planning.cell import PlannedCell

PROBE_UNDER_MODELS = "probes/node_probe.py"  # in this checkout, and in a container image's models/
PROBE = MODELS_DIR / PROBE_UNDER_MODELS  # the same path on every host (the repository is shared, or at the same place)
PROBE_TIMEOUT_S = 30  # one node's check, ssh connection included
MARKER = ".bench-shared"  # written into the workdir by this machine; every host must read the same token back
SAME = (("python", "Python"), ("bench", "bench"), ("models", "workload code"), ("horovod", "Horovod"))


def probe(python: str, marker: Path, iface: str, ssh: list[str] | None,
          program: tuple[str, ...] | None = None) -> dict[str, Any] | str:
    """A node's facts, or one line saying why they could not be had; `ssh` is the argv that reaches the node, None
    for this machine (its own share is checked here, without ssh). `program`: what runs the probe instead of
    `python PROBE` (the same probe inside the cell's container image)."""
    argv = [*(program or (python, str(PROBE))), str(marker), iface]
    if ssh is not None:
        argv = [*ssh, shlex.join(argv)]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                             stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return f"did not answer within {PROBE_TIMEOUT_S} s"
    except OSError as e:
        return f"could not run its check ({e.strerror or e})"
    if out.returncode == 255 and ssh is not None:
        return f"unreachable over ssh ({last_line(out.stderr) or 'exit 255'})"
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return f"its check failed (exit {out.returncode}: {last_line(out.stderr) or 'no output'})"


def node_verdict(host: str, facts: dict[str, Any] | str, here: dict[str, Any], planned: PlannedCell,
                 iface: str | None, workdir: Path) -> str | None:
    """Whether one node can run its share of the cell: one line naming it, or None."""
    if isinstance(facts, str):
        return f"{host}: {facts}"
    for key, what in SAME:
        if facts.get(key) != here.get(key):
            return f"{host}: {what} {facts.get(key) or 'missing'}, this machine has {here.get(key) or 'none'}"
    if facts.get("marker") != here.get("marker") or facts.get("marker") is None:
        return f"{host}: does not see the shared workdir {workdir} (it must be the same directory on every host)"
    if planned.nodes > 1 and not facts.get("iface"):
        return f"{host}: has no interface {iface}"
    per_node = planned.per_node
    if planned.sku.is_cpu:
        if facts["cores"] < per_node:
            return f"{host}: {facts['cores']} cores for {per_node} CPU workers"
    elif facts["gpus"] < per_node:
        return f"{host}: {facts['gpus']} GPUs (nvidia-smi -L) for {per_node} workers of {planned.sku.gpu_model}"
    return None


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""
