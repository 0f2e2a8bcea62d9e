"""The ImageNet data set a machine offers: the same rule for every backend that runs workers on its own hosts."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def imagenet_reach_reason(cell: dict, imagenet_dir: Path | None, sample: Any) -> str | None:
    """Why a real-data cell cannot run where the data set is configured (None if it can, or the cell is synthetic)."""
    if cell["data"] != "imagenet":
        return None
    if imagenet_dir is None:
        return "data=imagenet: no dataset configured (set backend.imagenet_dir)"
    if not imagenet_dir.exists() and sample is None:
        return f"data=imagenet: no dataset at {imagenet_dir}"
    return None


def make_imagenet_sample_if_needed(planned: list, imagenet_dir: Path | None, sample: Any, say: Any = print) -> None:
    """Makes the matrix's generated ImageNet sample when runnable real-data cells need it and none is there yet."""
    if sample is None or imagenet_dir is None or imagenet_dir.exists():
        return
    if any(p.runnable and p.cell["data"] == "imagenet" for p in planned):
        from bench.execution.datasets import make_imagenet_sample

        made = make_imagenet_sample(imagenet_dir, sample.classes, sample.per_class)
        say(f"made an ImageNet sample for the real-data cells: {made['images']} images, "
            f"{made['classes']} classes, {' and '.join(made['layouts'])} layouts, in {made['dir']}")
