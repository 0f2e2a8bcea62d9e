"""What actually ran: versions, build capabilities, hardware. Checked by importing and querying, not by reading
help text."""
from __future__ import annotations

import ctypes
import os
import platform
import shutil
import socket
import subprocess
import sys

from models.gpu.query import PROBE_FIELDS, gpu_summary, parse_query_gpu
from models.measure import allocator
from models.probes.cgroup_probe import cpu_affinity, cpu_quota
from models.probes.cpufeatures import SPEED_FLAGS, cpu_probe


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def mpi_library_version() -> str | None:
    """MPI_Get_library_version from the libmpi this process has loaded (valid before MPI_Init)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = {line.split()[-1] for line in f if "libmpi.so" in line or "libmpi_" in line}
    except OSError:
        return None
    for path in sorted(paths):
        if "libmpi.so" not in path:
            continue
        try:
            lib = ctypes.CDLL(path)
            buf = ctypes.create_string_buffer(8192)
            length = ctypes.c_int(0)
            if lib.MPI_Get_library_version(buf, ctypes.byref(length)) == 0:
                return buf.value.decode(errors="replace").strip().splitlines()[0]
        except (OSError, AttributeError):
            continue
    return None


def gpu_info() -> dict | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(PROBE_FIELDS)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return gpu_summary(parse_query_gpu(out, PROBE_FIELDS))


# Python distributions whose version moves training speed, asked of the installed metadata (no import).
SPEED_PACKAGES = ("torch", "horovod", "tensorflow", "tensorflow-cpu", "tf-keras", "keras", "numpy", "mpi4py",
                  "intel-extension-for-pytorch", "oneccl-bind-pt", "nvidia-nccl-cu12", "nvidia-cudnn-cu12")
# Environment variables that tune threads, allocators and transports (prefixes), recorded as the worker saw them.
TUNING_ENV_PREFIXES = ("OMP_", "MKL_", "KMP_", "OPENBLAS_", "GOMP_", "NCCL_", "HOROVOD_", "UCX_", "OMPI_MCA_",
                       "I_MPI_", "FI_", "GLOO_", "TORCH_", "PYTORCH_", "TF_NUM_", "TF_ENABLE_", "TF_XLA_", "TF_GPU_",
                       "TF_USE_LEGACY_KERAS", "CUDA_", "MALLOC_", "LD_PRELOAD",
                       "ATEN_CPU_CAPABILITY", "DNNL_", "ONEDNN_")
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL")


def package_versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in SPEED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def tuning_env(environ=None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {k: v[:200] for k, v in sorted(environ.items())
            if k.startswith(TUNING_ENV_PREFIXES) and not any(w in k for w in _SECRET_WORDS)}


def base_probe() -> dict:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu": cpu_probe(),  # identity and the flags that decide CPU speed (models/probes/cpufeatures.py)
        "malloc": allocator.state,
        "cpu_affinity": cpu_affinity(),  # the CPUs this process may run on ("0-1")
        "cpu_quota": cpu_quota(),        # its cgroup's CPU quota: {"cpus": 0.9 | None, "source": ...}
        "packages": package_versions(),
        "tuning_env": tuning_env(),
    }


def horovod_probe(hvd) -> dict:
    """Horovod's build capabilities, asked of the imported binding (not --check-build's text)."""
    if hvd is None:
        return {"horovod_version": None, "horovod_built": None, "horovod_controller": None}
    return {
        "horovod_version": getattr(sys.modules.get("horovod"), "__version__", None),
        "horovod_built": {"mpi": bool(hvd.mpi_built()), "gloo": bool(hvd.gloo_built()),
                          "nccl": bool(hvd.nccl_built())},
        "horovod_controller": "mpi" if hvd.mpi_enabled() else "gloo" if hvd.gloo_enabled() else "unknown",
    }


# /proc/cpuinfo flag → torch.cpu.get_capabilities() key, where torch spells it differently.
_TORCH_NAMES = {"avx512f": "avx512_f", "fma": "fma3"}


def torch_cpu_use(torch) -> dict:
    """What torch itself detected and dispatches to: the ATen kernel level (get_cpu_capability: 'AVX2', 'AVX512',
    ...; ATEN_CPU_CAPABILITY can lower it) and, where torch has the public call, the SPEED_FLAGS its cpuinfo sees
    (CPUID and OS state: a kernel flag the OS does not enable for the process would show here as False)."""
    out = {"torch_cpu_capability": None, "torch_cpu_features": None}
    try:
        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        pass
    get_capabilities = getattr(getattr(torch, "cpu", None), "get_capabilities", None)  # torch >= 2.9
    if get_capabilities is not None:
        caps = get_capabilities()
        out["torch_cpu_features"] = {f: bool(caps[_TORCH_NAMES.get(f, f)]) for f in SPEED_FLAGS
                                     if _TORCH_NAMES.get(f, f) in caps}
    return out


def probe_torch(hvd) -> dict:
    import torch

    info = {**base_probe(), "framework": "pytorch", "framework_version": torch.__version__,
            "torch_threads": torch.get_num_threads(), **torch_cpu_use(torch), **horovod_probe(hvd),
            "mpi_library": mpi_library_version(), "cuda": torch.version.cuda, "nccl": None, "gpu": None}
    if torch.cuda.is_available():
        try:
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - a build without NCCL
            pass
        info["gpu"] = gpu_info() or {"model": torch.cuda.get_device_name(0), "count": torch.cuda.device_count()}
    return info


def probe_tensorflow(hvd, framework: str = "tensorflow") -> dict:
    import tensorflow as tf

    build = tf.sysconfig.get_build_info()
    gpus = tf.config.list_physical_devices("GPU")
    info = {**base_probe(), "framework": framework, "framework_version": tf.__version__,
            "keras_version": getattr(tf.keras, "__version__", None), **horovod_probe(hvd),
            "mpi_library": mpi_library_version(), "cuda": build.get("cuda_version"), "nccl": None, "gpu": None}
    if gpus:
        info["gpu"] = gpu_info() or {"model": gpus[0].name, "count": len(gpus)}
    return info
