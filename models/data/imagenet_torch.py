"""ImageNet JPEG folder tree (train/<wnid>/*.JPEG) for PyTorch: Pillow decoding, random-resized-crop + flip,
a shard per rank, DataLoader workers. A corrupt image is skipped and counted; more than 1% bad is an error."""
from __future__ import annotations

import os
import random

import numpy as np
import torch

from models.data.layout import DataError, list_jpeg_tree, too_many_bad

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32) * 255


class JpegTree(torch.utils.data.Dataset):
    def __init__(self, files: list[tuple[str, int]], image_size: int, channels_last: bool):
        self.files, self.size, self.channels_last = files, image_size, channels_last

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        from PIL import Image, UnidentifiedImageError

        from models.data.augment import train_transform

        path, label = self.files[i]
        try:
            with Image.open(path) as img:
                img = img.convert("RGB")
        except (OSError, UnidentifiedImageError, ValueError):
            return None  # counted by the collate function
        img = train_transform(img, self.size, random)  # DataLoader seeds `random` per worker
        x = (np.asarray(img, dtype=np.float32) - MEAN) / STD
        return torch.from_numpy(x).permute(2, 0, 1), label


def _collate(batch):
    good = [b for b in batch if b is not None]
    if not good:
        return None, None, len(batch)
    images = torch.stack([b[0] for b in good])
    labels = torch.tensor([b[1] for b in good])
    return images, labels, len(batch) - len(good)


class Batches:
    """Endless batches from this rank's shard; `next()` returns (images, labels) on the device."""

    kind = "pil"  # models/data/loaders.py: the loader's name beside nvjpeg and dali

    def __init__(self, root: str, image_size: int, batch_size: int, rank: int, size: int, workers: int,
                 device: torch.device, channels_last: bool):
        files, _ = list_jpeg_tree(root)
        shard = files[rank::size]
        if len(shard) < batch_size:
            raise DataError(f"rank {rank}'s shard has {len(shard)} images, fewer than one batch of {batch_size}")
        self.device, self.channels_last = device, channels_last
        gen = torch.Generator().manual_seed(rank)
        self.loader = torch.utils.data.DataLoader(
            JpegTree(shard, image_size, channels_last), batch_size=batch_size, shuffle=True, drop_last=True,
            num_workers=workers, collate_fn=_collate, pin_memory=device.type == "cuda", generator=gen,
            persistent_workers=workers > 0, prefetch_factor=4 if workers > 0 else None)
        self.it = iter(self.loader)
        self.seen = self.bad = 0

    def __next__(self):
        while True:
            try:
                images, labels, bad = next(self.it)
            except StopIteration:  # next epoch
                self.it = iter(self.loader)
                continue
            self.seen += (0 if labels is None else len(labels)) + bad
            self.bad += bad
            if too_many_bad(self.bad, self.seen):
                raise DataError(f"{self.bad} of {self.seen} images could not be decoded (over 1%)")
            if images is None:
                continue
            memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
            images = images.to(self.device, non_blocking=True).contiguous(memory_format=memory_format)
            return images, labels.to(self.device, non_blocking=True)

    def __iter__(self):
        return self

    @property
    def workers(self) -> int:
        """DataLoader worker processes (0: decoded in the worker's own process)."""
        return self.loader.num_workers


def default_workers(local_size: int) -> int:
    return max(1, min(8, (os.cpu_count() or 1) // max(1, local_size) - 1))
