"""ImageNet JPEG tree through an NVIDIA DALI pipeline: read on the host, decode + random crop on the GPU ("mixed"),
resize, flip and normalise on the GPU, handed to PyTorch by DALIGenericIterator.

    fn.readers.file            this rank's shard (files[rank::size], as the Pillow path; labels from the sorted
                               wnid folders, as list_jpeg_tree), shuffled through DALI's buffer
    fn.decoders.image_random_crop   device "mixed": nvJPEG (the hardware decoder where there is one) with the crop
                               window drawn from the same ranges as models/data/augment.py (area 0.08-1, aspect
                               3/4-4/3, 10 attempts): the same distribution, not the same draws
    fn.resize                  to image_size x image_size, linear with antialiasing (Pillow's BILINEAR when shrinking)
    fn.crop_mirror_normalize   coin-flip mirror, ImageNet mean/std (x 255), float32, "HWC" for channels-last
                               (handed on as an NCHW view with channels-last strides, no copy) or "CHW"

The shard is passed as `files`/`labels` with DALI's own sharding left at one shard: DALI shards take contiguous
runs of the file list, which on a tree sorted by class would give each rank a subset of the classes.

Imported only when this loader is chosen; DALI is not installed where the CPU tests run, so `dali_params` (the
pipeline's arguments, plain data) and `dali_batch` (its outputs as the model wants them) carry what is tested there.
With no device (`device_id` None) the same pipeline runs on DALI's CPU operators: scripts/gpu_loader_check.py runs it
so against the nvjpeg path's crop, resize and normalisation, with the real DALI on a CPU. Not run on a GPU yet.
"""
from __future__ import annotations

from typing import Any

import torch

from models.data.imagenet_torch import MEAN, STD
from models.data.layout import DataError, list_jpeg_tree

READER = "Reader"
# NVIDIA's ResNet-50 example for DALI preallocates these for ImageNet's largest images (nvJPEG's buffers).
DEVICE_MEMORY_PADDING = 211_025_920
HOST_MEMORY_PADDING = 140_544_512


def dali_params(files: list[tuple[str, int]], batch_size: int, image_size: int, channels_last: bool,
                device_id: int | None, workers: int, rank: int, size: int, seed: int) -> dict[str, Any]:
    """The pipeline's arguments, operator by operator, as plain values (DALI's enums are filled in by `build`).
    `device_id` None: every operator on the CPU (DALI's CPU-only mode), for checking the pipeline without a GPU."""
    from models.data.gpu_jpeg import shard_files

    shard = shard_files(files, rank, size)
    if len(shard) < batch_size:
        raise DataError(f"rank {rank}'s shard has {len(shard)} images, fewer than one batch of {batch_size}")
    # DALI's operator devices: "mixed" decodes on the host and the GPU (nvJPEG); None puts every operator on the CPU.
    decoder, gpu = ("mixed", "gpu") if device_id is not None else ("cpu", "cpu")
    return {
        "pipeline": {"batch_size": batch_size, "num_threads": max(1, workers), "device_id": device_id,
                     "seed": (seed * 1_000_003 + rank) % 2**31, "prefetch_queue_depth": 2},
        "reader": {"name": READER, "files": [f for f, _ in shard], "labels": [c for _, c in shard],
                   "random_shuffle": True, "shard_id": 0, "num_shards": 1, "pad_last_batch": False},
        "decoder": {"device": decoder, "output_type": "RGB", "random_area": [0.08, 1.0],
                    "random_aspect_ratio": [3 / 4, 4 / 3], "num_attempts": 10,
                    "device_memory_padding": DEVICE_MEMORY_PADDING, "host_memory_padding": HOST_MEMORY_PADDING},
        "resize": {"device": gpu, "resize_x": image_size, "resize_y": image_size, "interp_type": "INTERP_LINEAR",
                   "antialias": True},
        "mirror": {"probability": 0.5},
        "normalize": {"device": gpu, "dtype": "FLOAT", "output_layout": "HWC" if channels_last else "CHW",
                      "mean": [float(m) for m in MEAN], "std": [float(s) for s in STD]},
        "shard_size": len(shard),
    }


def build(params: dict[str, Any]):
    """The DALI pipeline of `params`, built (needs DALI; a GPU unless the params are the CPU-only ones)."""
    from nvidia.dali import fn, pipeline_def, types

    decoder = {**params["decoder"], "output_type": getattr(types, params["decoder"]["output_type"])}
    resize = {**params["resize"], "interp_type": getattr(types, params["resize"]["interp_type"])}
    normalize = {**params["normalize"], "dtype": getattr(types, params["normalize"]["dtype"])}

    @pipeline_def(**params["pipeline"])
    def train_pipeline():
        jpegs, labels = fn.readers.file(**params["reader"])
        images = fn.decoders.image_random_crop(jpegs, **decoder)
        images = fn.resize(images, **resize)
        images = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(**params["mirror"]), **normalize)
        return images, (labels.gpu() if params["pipeline"]["device_id"] is not None else labels)

    pipe = train_pipeline()
    pipe.build()
    return pipe


def dali_batch(images: torch.Tensor, labels: torch.Tensor, channels_last: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """DALI's outputs -> (float32 (N, 3, S, S) images, int64 (N,) labels). "HWC" output is (N, S, S, 3): its NCHW
    view is exactly channels-last memory, so no copy; DALI's labels are int32 (N, 1)."""
    if channels_last:
        images = images.permute(0, 3, 1, 2)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    return images.contiguous(memory_format=memory_format), labels.reshape(-1).long()


class DaliBatches:
    """Endless batches from this rank's shard through DALI; `next()` returns (images, labels) on the device: the
    GPU's (loaders.resolve_loader gives dali to GPU cells only), or the CPU, which the loader check uses.

    DALI stops on an image it cannot decode rather than skipping it: that is a DataError here (`bad` stays 0)."""

    kind = "dali"

    def __init__(self, root: str, image_size: int, batch_size: int, rank: int, size: int, workers: int,
                 device: torch.device | str, channels_last: bool, seed: int = 0):
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        device = torch.device(device)
        files, _ = list_jpeg_tree(root)
        device_id = None if device.type == "cpu" else (
            device.index if device.index is not None else torch.cuda.current_device())
        self.params = dali_params(files, batch_size, image_size, channels_last, device_id, workers, rank, size, seed)
        self.channels_last = channels_last
        self.workers = self.params["pipeline"]["num_threads"]
        self.seen = self.bad = 0
        self.pipe = build(self.params)
        self.it = DALIGenericIterator([self.pipe], ["images", "labels"], reader_name=READER,
                                      last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)

    def __iter__(self):
        return self

    def __next__(self):
        while True:  # auto_reset: the call after an epoch's last batch raises StopIteration and resets
            try:
                out = next(self.it)
            except StopIteration:
                continue  # a shard holds at least one batch (dali_params), so the next epoch yields one
            except RuntimeError as e:
                raise DataError(f"DALI pipeline failed: {str(e).strip().splitlines()[0]}") from e
            images, labels = dali_batch(out[0]["images"], out[0]["labels"], self.channels_last)
            self.seen += len(labels)
            return images, labels
