"""Finding an ImageNet JPEG tree on disk; no framework imported."""
from __future__ import annotations

from pathlib import Path

MAX_BAD_FRACTION = 0.01


def too_many_bad(bad: int, read: int) -> bool:
    """More than 1% of the images read could not be decoded. Two are always tolerated: on a small data set the
    same corrupt file comes round again each epoch, and one file in a hundred is not a broken data set."""
    return bad > max(MAX_BAD_FRACTION * read, 2)


class DataError(RuntimeError):
    """The dataset cannot be used (missing, empty, too corrupt): one clear line for the record."""


def list_jpeg_tree(root: str | Path) -> tuple[list[tuple[str, int]], list[str]]:
    """(path, class index) of every JPEG under root/train/<wnid>/ (or root/<wnid>/), classes sorted by wnid."""
    root = Path(root)
    train = root / "train" if (root / "train").is_dir() else root
    if not train.is_dir():
        raise DataError(f"no ImageNet JPEG tree at {root} (expected {root}/train/<wnid>/*.JPEG)")
    classes = sorted(d.name for d in train.iterdir() if d.is_dir())
    files = [(str(path), i) for i, wnid in enumerate(classes) for path in sorted((train / wnid).iterdir())
             if path.suffix.lower() in (".jpeg", ".jpg")]
    if not files:
        raise DataError(f"no JPEG files under {train}")
    return files, classes
