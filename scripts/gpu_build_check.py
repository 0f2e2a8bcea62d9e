"""What a Horovod GPU build proves without a GPU; run with the GPU venv's python (scripts/gpu_build.sh runs it).

1. `horovod.torch` imports and reports NCCL, Gloo (and MPI) built in: the binding answers from its build flags, no
   device is asked.
2. `ldd` of the torch extension resolves libnccl.so.2 to the NCCL wheel and libcudart to the CUDA runtime wheel
   torch uses, with the library path torch's own loading gives (its lib folder and the nvidia wheels'): Horovod's
   extension records no search path of its own and relies on torch having loaded them first.
3. After the import, the process has mapped libnccl.so.2 from that same wheel (one NCCL in the process).

Prints one line per check and exits 1 when any fails. `--json` prints the findings as one JSON object instead.
"""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import subprocess
import sys


def wheel_lib_dirs() -> list[str]:
    """torch's lib folder and every nvidia-* wheel's lib folder, as torch's RUNPATH names them."""
    import torch

    dirs = [os.path.join(os.path.dirname(torch.__file__), "lib")]
    nvidia = importlib.util.find_spec("nvidia")
    for root in (nvidia.submodule_search_locations if nvidia else []):
        dirs += sorted(d for d in (glob.glob(os.path.join(root, "*", "lib"))
                                   + glob.glob(os.path.join(root, "*", "*", "lib")))
                       if os.path.isdir(d))
    return dirs


def ldd(path: str, lib_dirs: list[str]) -> dict[str, str]:
    """soname → what it resolves to ("not found" included)."""
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(lib_dirs)}
    out = subprocess.run(["ldd", path], capture_output=True, text=True, env=env, check=True).stdout
    links = {}
    for line in out.splitlines():
        if "=>" in line:
            name, target = (part.strip() for part in line.split("=>", 1))
            links[name] = target.split(" (")[0]
    return links


def findings() -> dict:
    import horovod
    import horovod.torch as hvd

    nccl_root = importlib.util.find_spec("nvidia.nccl").submodule_search_locations[0]
    ext = glob.glob(os.path.join(os.path.dirname(hvd.__file__), "mpi_lib_v2*.so"))
    links = ldd(ext[0], wheel_lib_dirs()) if ext else {}
    with open("/proc/self/maps", encoding="utf-8") as f:
        mapped = sorted({line.split()[-1] for line in f if "libnccl.so" in line})
    return {
        "horovod": horovod.__version__, "nccl_built": bool(hvd.nccl_built()), "gloo_built": bool(hvd.gloo_built()),
        "mpi_built": bool(hvd.mpi_built()), "extension": ext[0] if ext else None,
        "nccl_wheel": os.path.realpath(nccl_root),
        "ldd": {k: v for k, v in links.items() if k.startswith(("libnccl", "libcudart", "libmpi", "libtorch_cuda"))},
        "nccl_mapped": [os.path.realpath(p) for p in mapped],
    }


def verdicts(f: dict) -> list[tuple[bool, str]]:
    ldd_nccl = f["ldd"].get("libnccl.so.2", "absent")
    cudart = {k: v for k, v in f["ldd"].items() if k.startswith("libcudart")}
    return [
        (f["nccl_built"], f"hvd.nccl_built() = {f['nccl_built']} (gloo {f['gloo_built']}, mpi {f['mpi_built']})"),
        (f["extension"] is not None, f"torch extension: {f['extension']}"),
        (os.path.realpath(ldd_nccl).startswith(f["nccl_wheel"] + os.sep), f"ldd: libnccl.so.2 => {ldd_nccl}"),
        (bool(cudart) and all(v != "not found" for v in cudart.values()),
         "ldd: " + ("; ".join(f"{k} => {v}" for k, v in cudart.items()) or "no libcudart")),
        (bool(f["nccl_mapped"]) and all(p.startswith(f["nccl_wheel"] + os.sep) for p in f["nccl_mapped"]),
         f"mapped after import: {', '.join(f['nccl_mapped']) or 'no libnccl'}"),
    ]


def main(argv: list[str]) -> int:
    try:
        f = findings()
    except ImportError as e:
        print(f"FAIL import: {e}")
        return 1
    if "--json" in argv:
        print(json.dumps(f, indent=1))
    checks = verdicts(f)
    for ok, text in checks:
        print(("ok   " if ok else "FAIL ") + text)
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
