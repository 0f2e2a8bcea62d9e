"""Model FLOPs per trained image, per model and image size: the table models/workloads/resnet50/flops.py counts and
writes (bench/data/model_flops.yaml). Read here without torch; bench/analysis/mfu.py divides by the catalogue's
peaks."""
from __future__ import annotations

import functools
from importlib import resources

import yaml


@functools.cache
def model_flops() -> dict[str, dict[int, dict[str, int]]]:
    """model → image size (px) → {flops_per_image, forward_flops, step_flops_counted}."""
    text = resources.files("bench").joinpath("data/model_flops.yaml").read_text(encoding="utf-8")
    return {str(model): {int(size): dict(row) for size, row in sizes.items()}
            for model, sizes in (yaml.safe_load(text) or {}).items()}


def flops_per_image(model: str, image_size: int) -> int | None:
    """3 × one forward pass's matmul and convolution FLOPs (the MFU convention); None when the table has no entry."""
    row = model_flops().get(model, {}).get(int(image_size))
    return None if row is None else int(row["flops_per_image"])
