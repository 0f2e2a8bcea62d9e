"""Which input pipeline reads the ImageNet JPEG tree for the PyTorch worker, and building it.

    pil     Pillow in DataLoader worker processes (models/data/imagenet_torch.py): decode, crop, resize on the CPU
    nvjpeg  file bytes read by host threads, decoded by nvJPEG (torchvision.io.decode_jpeg), cropped, resized,
            flipped and normalised on the GPU (models/data/gpu_jpeg.py); needs torchvision
    dali    an NVIDIA DALI pipeline (models/data/dali_loader.py); needs nvidia-dali
    auto    dali where DALI is installed, else nvjpeg where torchvision imports, on a CUDA device; pil on a CPU

Every loader hands over what imagenet_torch.Batches does: (images, labels) on the device, float32 (N, 3, S, S)
images normalised with ImageNet's mean/std in the memory format asked (channels-last or contiguous), int64 (N,)
labels; and counts `seen` and `bad` images, names itself (`kind`) and its host workers (`workers`).
"""
from __future__ import annotations

import importlib.util
from typing import Iterator, Protocol

LOADERS = ("auto", "pil", "nvjpeg", "dali")


class ImageBatches(Protocol):
    kind: str  # pil | nvjpeg | dali
    workers: int  # host processes (pil) or threads (nvjpeg, dali) feeding the device
    seen: int  # images read so far, bad ones included
    bad: int  # images skipped as unreadable

    def __next__(self): ...

    def __iter__(self) -> Iterator: ...


def dali_available() -> bool:
    """NVIDIA DALI is installed (found, not imported: importing it is slow and needs CUDA)."""
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except (ImportError, ValueError):  # no `nvidia` namespace package at all
        return False


def torchvision_available() -> bool:
    """torchvision imports beside this torch (a wheel built for another torch is found but fails to import)."""
    try:
        import torchvision.io  # noqa: F401
    except Exception:  # noqa: BLE001 - ImportError, or the OSError/RuntimeError of a mismatched build
        return False
    return True


def resolve_loader(requested: str, device_type: str, have_dali: bool | None = None,
                   have_torchvision: bool | None = None) -> str:
    """The loader to build for `requested` (auto | pil | nvjpeg | dali) on a `device_type` ("cuda" or "cpu") device.

    auto: pil on a CPU; on CUDA dali if DALI is installed, else nvjpeg if torchvision imports, else pil. An explicit
    nvjpeg or dali on a CPU, or without its package, is a ValueError of one line. `have_dali` / `have_torchvision`
    None: look (dali_available, torchvision_available)."""
    if requested not in LOADERS:
        raise ValueError(f"unknown loader {requested!r} (one of: {', '.join(LOADERS)})")
    cuda = device_type == "cuda"
    if requested == "pil":
        return "pil"
    if requested == "auto":
        if not cuda:
            return "pil"
        if have_dali if have_dali is not None else dali_available():
            return "dali"
        if have_torchvision if have_torchvision is not None else torchvision_available():
            return "nvjpeg"
        return "pil"
    if not cuda:
        raise ValueError(f"loader {requested} decodes on a GPU; this worker's device is {device_type}")
    if requested == "dali" and not (have_dali if have_dali is not None else dali_available()):
        raise ValueError("loader dali: NVIDIA DALI is not installed (pip install nvidia-dali-cuda130, or loader "
                         "nvjpeg / auto)")
    if requested == "nvjpeg" and not (have_torchvision if have_torchvision is not None else torchvision_available()):
        raise ValueError("loader nvjpeg: torchvision does not import here (it decodes with torchvision.io.decode_jpeg)")
    return requested


def build_loader(kind: str, data_dir: str, batch_size: int, image_size: int, channels_last: bool, device,
                 workers: int, rank: int, size: int, seed: int, precision: str) -> ImageBatches:
    """This rank's endless batches of the JPEG tree at `data_dir` through loader `kind` (auto is resolved first).

    `workers`: DataLoader processes (pil; 0 = in the worker's process) or reader threads (nvjpeg, dali; at least 1).
    `seed` orders and augments the nvjpeg and dali paths (with the rank); the pil path keeps its own seeding (the
    sampler from the rank, `random` per DataLoader worker). `precision` does not change what is handed over: every
    loader gives float32 images, as the Pillow path does, and autocast casts inside the model.
    A dataset that cannot be used raises models.data.layout.DataError."""
    import torch

    device = torch.device(device)
    kind = resolve_loader(kind, device.type)
    if kind == "pil":
        from models.data.imagenet_torch import Batches

        return Batches(data_dir, image_size, batch_size, rank, size, workers, device, channels_last)
    if kind == "nvjpeg":
        from models.data.gpu_jpeg import GpuJpegBatches

        return GpuJpegBatches(data_dir, image_size, batch_size, rank, size, workers, device, channels_last, seed=seed)
    from models.data.dali_loader import DaliBatches

    return DaliBatches(data_dir, image_size, batch_size, rank, size, workers, device, channels_last, seed=seed)
