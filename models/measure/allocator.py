"""Keeps freed memory in the process instead of handing it back to the kernel after every step.

glibc's malloc serves large blocks (activations, gradients) with mmap and returns them with munmap on free, so every
training step page-faults its whole working set in again, zero-filled by the kernel. Measured here with
benchmarks/allocator_effect.py (the PyTorch workload, ResNet-50, 224x224, channels-last, 2 threads, CPU): batch 32
ran at 5.59 img/s by default and at 7.86 img/s with freed memory held (docs/measurements.md).
Frameworks that bring their own caching allocator (CUDA, TensorFlow's GPU BFC) are not affected either way.
"""
from __future__ import annotations

import ctypes
import ctypes.util

# mallopt() parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_KEEP_BYTES = 1 << 30  # blocks up to 1 GiB come from the heap, and up to 1 GiB of free heap is kept

state = "default"  # what this process's allocator was set to; the environment probe records it


def hold_freed_memory(enabled: bool = True) -> str:
    """Tell glibc to keep freed blocks (no-op, and says so, where the C library is not glibc)."""
    global state
    if not enabled:
        state = "default (disabled by --no-hold-freed-memory)"
        return state
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        state = "default (no glibc mallopt)"
        return state
    ok = mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES) == 1 and mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES) == 1
    state = "glibc mallopt: mmap_threshold=1GiB trim_threshold=1GiB" if ok else "default (mallopt refused)"
    return state
