"""Which Horovod bindings the environment that runs a cell's workers was built with, read from its files.

Horovod compiles one extension per framework binding (horovod/torch/mpi_lib_v2…so, horovod/tensorflow/mpi_lib…so)
and only for the frameworks its build was asked for; a binding built without its extension raises ImportError on
import ("Extension horovod.tensorflow has not been built"). scripts/install.sh builds both bindings in both
environments, but one built for PyTorch's alone (BENCH_MPICH_FRAMEWORKS=pytorch, as the MPICH-ABI environment was by
default before) serves no TensorFlow or Keras cell. Planning asks here so that such a cell is skipped with the fix, as
the worker would refuse it (models/measure/common.py, `import_horovod`), instead of running and failing.

Reading the files, not importing: the plan runs in the control process, which must not import TensorFlow (seconds)
nor the other environment's Horovod (another MPI ABI).
"""
from __future__ import annotations

import functools
import importlib.util
import sys
import sysconfig
from pathlib import Path
from typing import Any

from bench.launch.runtimes import image_abi, not_in_image, runtime_for
from models.registry.workloads import WORKLOADS

# What `make run` does about it: install.sh finds the build missing and builds (or takes from its cache) Horovod with
# both bindings, in whichever environment lacks one.
FIX = "`make run` builds it (scripts/install.sh)"


def horovod_dir(python: str) -> Path | None:
    """The Horovod package the environment of `python` imports, or None where it has none of its own; raises
    LookupError where this cannot be read from files (a Python that is neither a venv nor this one)."""
    prefix = Path(python).parent.parent
    if (prefix / "pyvenv.cfg").exists():
        # A venv's own site-packages: an MPICH-ABI venv also sees the main venv's packages (a .pth line), but a
        # Horovod found only there is the other ABI's, so it does not count.
        found = sorted(prefix.glob("lib/python3*/site-packages/horovod"))
        return found[0] if found else None
    if Path(python).resolve() == Path(sys.executable).resolve():
        spec = importlib.util.find_spec("horovod")
        return Path(spec.origin).parent if spec and spec.origin else None
    raise LookupError(python)


@functools.cache
def built_bindings(python: str) -> frozenset[str] | None:
    """The bindings ("torch", "tensorflow") whose extension this environment's Horovod has; an empty set where it has
    no Horovod, None where that cannot be told from here (the worker then says what it finds)."""
    if not Path(python).exists():
        return frozenset()
    try:
        package = horovod_dir(python)
    except LookupError:
        return None
    if package is None:
        return frozenset()
    # The extension's file name ends with the interpreter's suffix; every environment here runs one CPython minor
    # release (install.sh makes them with the same interpreter), so this process's suffix is theirs.
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return frozenset(b for b in ("torch", "tensorflow") if any((package / b).glob(f"mpi_lib*{suffix}")))


def _where(python: str) -> str:
    """The environment as people name it: `.venv-mpich`, relative to the checkout where it is inside it."""
    prefix = Path(python).parent.parent
    try:
        return str(prefix.relative_to(Path.cwd()))
    except ValueError:
        return str(prefix)


def binding_reason(cell: dict[str, Any], python: str = sys.executable) -> str | None:
    """Why the environment that would run this cell's workers cannot serve it (None where it can, or cannot tell).

    Only multi-worker Horovod cells: one worker exchanges nothing, and a worker launched alone without Horovod runs
    as one process (models/measure/common.py); DDP and FSDP2 need no Horovod."""
    if cell.get("engine", "horovod") != "horovod" or cell.get("gpus", 1) < 2:
        return None
    binding = WORKLOADS.get(cell.get("framework"), {}).get("horovod_binding")
    if binding is None:
        return None
    if not_in_image(cell["mpi"]):
        return f"mpi={cell['mpi']}: not in this image (built for the {image_abi()} ABI); its cells run in its own image"
    worker_python = runtime_for(cell["mpi"], python).python
    if not Path(worker_python).exists():
        return (f"mpi={cell['mpi']}: no environment at {_where(worker_python)} to run its workers; "
                + FIX.replace("builds it", "makes it"))
    built = built_bindings(worker_python)
    if built is None or binding in built:
        return None
    where = _where(worker_python)
    have = (f"the Horovod in {where} has {', '.join(f'horovod.{b}' for b in sorted(built))} only, not "
            f"horovod.{binding}" if built else f"{where} has no Horovod of its own")
    return f"framework={cell['framework']} with mpi={cell['mpi']}: {have}; {FIX}"
