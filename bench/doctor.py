"""What this machine can run: frameworks, Horovod's build (checked by importing), MPI flavours, GPUs."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from bench.backends.local import local_gpus


def _version_line(argv: list[str]) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0] if lines else None


def _horovod() -> str:
    # A child process: importing horovod.torch here would load torch into the CLI for nothing.
    probe = ("import horovod, horovod.torch as h; "
             "print(horovod.__version__, 'mpi' if h.mpi_built() else '-', 'gloo' if h.gloo_built() else '-', "
             "'nccl' if h.nccl_built() else '-')")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    if out.returncode:
        return "not importable: " + (out.stderr.strip().splitlines() or ["?"])[-1]
    version, *caps = out.stdout.split()
    return f"{version} (built with: {', '.join(c for c in caps if c != '-') or 'nothing'})"


def report() -> str:
    lines = [f"python      {sys.version.split()[0]} ({sys.executable})", f"cpu cores   {os.cpu_count()}"]
    torch = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, timeout=120)
    lines.append(f"pytorch     {torch.stdout.strip() if torch.returncode == 0 else 'not installed'}")
    lines.append(f"horovod     {_horovod()}")
    lines.append(f"openmpi     {_version_line(['mpirun', '--version']) or 'not found'}")
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    lines.append(f"gloo        {'horovodrun found' if os.path.exists(horovodrun) else 'horovodrun not found'}")
    gpus = local_gpus()
    lines.append(f"gpus        {', '.join(gpus) if gpus else 'none (CPU fallback cells only)'}")
    return "\n".join(lines)
