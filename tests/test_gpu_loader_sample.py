"""The JPEG sample behind GPU input-pipeline figures (bench/execution/datasets.py, profile "imagenet"): ImageNet-like to
a decoder - pixel dimensions and bytes per file near ILSVRC-2012's (~400x350 px, ~110 KB) - while the default
("small") profile, which the CPU tests use, stays as it was."""
from __future__ import annotations

import hashlib
import statistics
from pathlib import Path

import pytest
from PIL import Image

from bench.core.errors import BenchInputError
from bench.execution.datasets import make_imagenet_sample


def _files(root: Path) -> list[Path]:
    return sorted((root / "train").rglob("*.JPEG"))


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in _files(root):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def test_imagenet_profile_looks_like_imagenet_to_a_decoder(tmp_path):
    made = make_imagenet_sample(tmp_path / "s", classes=4, per_class=12, seed=3, tfrecord=False, profile="imagenet")
    assert made["images"] == 48 and made["profile"] == "imagenet"
    files = _files(tmp_path / "s")
    sizes_kb = [p.stat().st_size / 1024 for p in files]
    dims = []
    for path in files:
        with Image.open(path) as img:
            assert img.format == "JPEG" and img.mode == "RGB"
            dims.append(img.size)
    assert all(max(w, h) <= 500 and min(w, h) >= 100 for w, h in dims)
    mean_w, mean_h = statistics.mean(w for w, _ in dims), statistics.mean(h for _, h in dims)
    assert 330 <= mean_w <= 480 and 290 <= mean_h <= 420, (mean_w, mean_h)  # ImageNet: ~400 x 350 on average
    assert 80 <= statistics.mean(sizes_kb) <= 140, statistics.mean(sizes_kb)  # ImageNet: ~110 KB a JPEG
    assert len({(w, h) for w, h in dims}) > 5  # sizes and aspect ratios vary


def test_imagenet_profile_is_the_same_from_one_process_or_several(tmp_path):
    make_imagenet_sample(tmp_path / "one", classes=2, per_class=70, seed=5, tfrecord=False, profile="imagenet")
    make_imagenet_sample(tmp_path / "two", classes=2, per_class=70, seed=5, tfrecord=False, profile="imagenet",
                         workers=2)
    assert len(_files(tmp_path / "one")) == 140
    assert _digest(tmp_path / "one") == _digest(tmp_path / "two")


def test_default_profile_is_the_small_one_and_bad_profiles_are_refused(tmp_path):
    made = make_imagenet_sample(tmp_path / "d", classes=2, per_class=5, seed=1, tfrecord=False)
    assert made["profile"] == "small"
    for path in _files(tmp_path / "d"):
        with Image.open(path) as img:
            assert 96 <= img.width <= 320 and 96 <= img.height <= 320
        assert path.stat().st_size < 30 * 1024
    with pytest.raises(BenchInputError, match="unknown sample profile 'huge'"):
        make_imagenet_sample(tmp_path / "e", classes=1, per_class=1, profile="huge")
    assert not (tmp_path / "e").exists()
