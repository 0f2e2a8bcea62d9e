"""Random-resized-crop + horizontal flip on Pillow images (the standard ResNet training augmentation), so the
PyTorch path needs no torchvision."""
from __future__ import annotations

import math
import random


def random_resized_crop_box(width: int, height: int, rng: random.Random, scale=(0.08, 1.0),
                            ratio=(3 / 4, 4 / 3), attempts: int = 10) -> tuple[int, int, int, int]:
    """A crop box (left, top, right, bottom) covering `scale` of the area with aspect ratio in `ratio`;
    after `attempts` misses, the largest centred crop within the ratio range."""
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(attempts):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            left, top = rng.randint(0, width - w), rng.randint(0, height - h)
            return left, top, left + w, top + h
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        h, w = height, int(round(height * ratio[1]))
    else:
        w, h = width, height
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h


def train_transform(img, size: int, rng: random.Random):
    from PIL import Image

    box = random_resized_crop_box(img.width, img.height, rng)
    img = img.resize((size, size), Image.BILINEAR, box=box)
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    return img
