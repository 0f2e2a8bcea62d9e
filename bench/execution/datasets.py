"""A small, valid ImageNet-shaped dataset in both usual layouts, made from generated images.

    DIR/train/<wnid>/<wnid>_<n>.JPEG              the JPEG folder tree (class index = position of wnid, sorted)
    DIR/tfrecord/train-<k>-of-<K>                 TFRecord shards of tf.train.Example, the field names and 1-based
                                                  labels of TensorFlow's ImageNet conversion scripts

For tests and for trying the real-data path without the 150 GB original. Images differ in size and aspect ratio
so that decoding and random-resized-crop do the work they do on real photographs.

Two size profiles:

    small      (the default; what the CPU tests use) 96-320 px a side, flat shapes: ~4 KB a JPEG. Cheap to make and
               to decode, so a loader's img/s on it says little about ImageNet.
    imagenet   ImageNet-like for a decoder: ~420x340 px on average (long side 500 px for 60 % of images, else
               200-500 px; photo aspect ratios, mostly landscape), textured content at JPEG quality 90, ~110 KB a file
               on average. For GPU input-pipeline figures (nvJPEG and DALI decode work grows with pixels and bytes).
               Images are drawn from per-image seeds, so `workers` processes make the same bytes as one.

ILSVRC-2012 train, for comparison: 1,281,167 JPEGs in 1,000 classes, ~150 GB with the validation set (Julien Simon,
"ImageNet - part 1: going on an adventure", 2017, julsimon.medium.com: "Clocking in at 150 GB ... 1,281,167 images
for training and 50,000 images for validation"), i.e. ~110 KB a JPEG; typical Flickr-era sizes of 500x375 /
375x500 and an average near 400x350 px (the figure image-net.org's statistics page used to give; no stored copy of
it was found to cite, so treat it as approximate).
"""
from __future__ import annotations

import contextlib
import io
import os
import random
import sys
import tempfile
from pathlib import Path

from bench.core.errors import BenchInputError

SHARDS = 4
PROFILES = ("small", "imagenet")
IMAGENET_QUALITY = 90
_NOISE_SIDE = 1024  # the fine-grain texture bank (per process): windows of it are added to every image
_NOISE_SIGMA = 42.0


def wnids(classes: int) -> list[str]:
    return [f"n{9_000_000 + i:08d}" for i in range(classes)]


def _image(rng: random.Random, cls: int):
    from PIL import Image, ImageDraw

    w, h = rng.randint(96, 320), rng.randint(96, 320)
    base = ((cls * 67) % 256, (cls * 131) % 256, (cls * 199) % 256)
    img = Image.new("RGB", (w, h), base)
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randint(3, 12)):
        x0, y0 = rng.randrange(w), rng.randrange(h)
        x1, y1 = x0 + rng.randint(8, w), y0 + rng.randint(8, h)
        colour = tuple(rng.randrange(256) for _ in range(3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=colour)
    return img


def _imagenet_dims(rng: random.Random) -> tuple[int, int]:
    """(width, height) like ILSVRC-2012's: the long side 500 px for most images, photo aspect ratios."""
    long = 500 if rng.random() < 0.6 else rng.randint(200, 500)
    aspect = rng.choice((4 / 3, 4 / 3, 4 / 3, 3 / 2, 3 / 2, 1.0, 3 / 4, 2 / 3))
    return (long, round(long / aspect)) if aspect >= 1 else (round(long * aspect), long)


_noise_bank = None


def _noise():
    """Gaussian texture around 128, made once per process from a fixed seed (the same in every worker)."""
    global _noise_bank
    if _noise_bank is None:
        import numpy as np
        from PIL import Image

        g = np.random.default_rng(20121)
        _noise_bank = Image.fromarray(np.clip(g.normal(128, _NOISE_SIGMA, (_NOISE_SIDE, _NOISE_SIDE, 3)), 0, 255)
                                      .astype(np.uint8))
    return _noise_bank


def _imagenet_image(seed: int, cls: int, n: int):
    """One ImageNet-like picture: smooth colour fields at several scales and shapes, drawn at a quarter of the size
    and scaled up, plus fine texture, so that JPEG at quality 90 spends about as many bytes as on a photograph."""
    from PIL import Image, ImageChops, ImageDraw

    rng = random.Random(f"imagenet-sample:{seed}:{cls}:{n}")
    w, h = _imagenet_dims(rng)
    lw, lh = max(2, w // 4), max(2, h // 4)
    base = ((cls * 67) % 256, (cls * 131) % 256, (cls * 199) % 256)
    low = Image.new("RGB", (lw, lh), base)
    for cells, weight in ((2, 0.5), (6, 0.35), (20, 0.25)):
        cw = max(2, round(cells * w / h))
        field = Image.frombytes("RGB", (cw, cells), rng.randbytes(cw * cells * 3))
        low = Image.blend(low, field.resize((lw, lh), Image.BICUBIC), weight)
    draw = ImageDraw.Draw(low)
    for _ in range(rng.randint(3, 10)):
        x0, y0 = rng.randrange(lw), rng.randrange(lh)
        x1, y1 = x0 + rng.randint(2, max(2, lw // 2)), y0 + rng.randint(2, max(2, lh // 2))
        colour = tuple(rng.randrange(256) for _ in range(3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(
            (x0, y0, x1, y1), fill=colour if rng.random() < 0.5 else None, outline=colour, width=1)
    img = low.resize((w, h), Image.BICUBIC)
    x, y = rng.randrange(_NOISE_SIDE - w + 1), rng.randrange(_NOISE_SIDE - h + 1)
    return ImageChops.add(img, _noise().crop((x, y, x + w, y + h)), scale=1.0, offset=-128)


def _write_imagenet_chunk(task: tuple) -> list[tuple[str, int, str, int, int]]:
    """Makes and writes images n0..n1-1 of one class (a process-pool task); returns (path, class, wnid, h, w)."""
    folder, seed, cls, wnid, n0, n1 = task
    made = []
    for n in range(n0, n1):
        img = _imagenet_image(seed, cls, n)
        path = Path(folder) / f"{wnid}_{n}.JPEG"
        img.save(path, format="JPEG", quality=IMAGENET_QUALITY)
        made.append((str(path), cls, wnid, img.height, img.width))
    return made


def _make_imagenet_profile(out: Path, classes: int, per_class: int, seed: int, workers: int) -> list:
    tasks = []
    for cls, wnid in enumerate(wnids(classes)):
        folder = out / "train" / wnid
        folder.mkdir(parents=True, exist_ok=True)
        tasks += [(str(folder), seed, cls, wnid, n0, min(per_class, n0 + 64)) for n0 in range(0, per_class, 64)]
    if workers <= 1 or len(tasks) == 1:
        chunks = map(_write_imagenet_chunk, tasks)
        return [s for chunk in chunks for s in chunk]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        return [s for chunk in pool.map(_write_imagenet_chunk, tasks) for s in chunk]


def make_imagenet_sample(out: str | Path, classes: int, per_class: int, seed: int = 0,
                         tfrecord: bool = True, profile: str = "small", workers: int = 1) -> dict:
    """`profile` "small" (default) or "imagenet" (see the module's docstring); `workers` processes draw the images
    of the imagenet profile (the small profile is drawn in one sequence, as it always was)."""
    if classes <= 0 or per_class <= 0:
        raise BenchInputError(f"--classes and --per-class must be positive, got {classes} and {per_class}")
    if profile not in PROFILES:
        raise BenchInputError(f"unknown sample profile {profile!r} (one of: {', '.join(PROFILES)})")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise BenchInputError("exists and is not a directory", str(out))
    rng = random.Random(seed)
    if profile == "imagenet":
        samples = _make_imagenet_profile(out, classes, per_class, seed, max(1, workers))
        if tfrecord:
            _write_tfrecords(out / "tfrecord", samples, rng)
        return {"dir": str(out), "classes": classes, "images": len(samples), "profile": profile,
                "layouts": ["jpeg"] + (["tfrecord"] if tfrecord else [])}
    samples: list[tuple[bytes, int, str, int, int]] = []
    for cls, wnid in enumerate(wnids(classes)):
        folder = out / "train" / wnid
        folder.mkdir(parents=True, exist_ok=True)
        for n in range(per_class):
            img = _image(rng, cls)
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=90)
            data = buf.getvalue()
            (folder / f"{wnid}_{n}.JPEG").write_bytes(data)
            samples.append((data, cls, wnid, img.height, img.width))
    if tfrecord:
        _write_tfrecords(out / "tfrecord", samples, rng)
    return {"dir": str(out), "classes": classes, "images": len(samples), "profile": profile,
            "layouts": ["jpeg"] + (["tfrecord"] if tfrecord else [])}


@contextlib.contextmanager
def _stderr_kept_aside():
    """TensorFlow's start-up lines (absl's "All log messages before absl::InitializeLog() is called…", oneDNN's
    notice) come from its C++ side before TF_CPP_MIN_LOG_LEVEL is read, at import and at first use: `make run` would
    show them between its own lines. The process's stderr (fd 2) goes to a file for the block, shown if it fails."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as aside:
            os.dup2(aside.fileno(), 2)
            try:
                yield
            except BaseException:
                os.dup2(saved, 2)
                aside.seek(0)
                sys.stderr.write(aside.read().decode("utf-8", errors="replace")[-4000:])
                raise
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _write_tfrecords(folder: Path, samples: list, rng: random.Random) -> None:
    with _stderr_kept_aside():
        _write_tfrecord_shards(folder, samples, rng)


def _write_tfrecord_shards(folder: Path, samples: list, rng: random.Random) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    folder.mkdir(parents=True, exist_ok=True)
    order = list(range(len(samples)))
    rng.shuffle(order)  # shards mix classes, as the originals do
    shards = min(SHARDS, len(samples))

    def feature(value):
        if isinstance(value, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    for k in range(shards):
        with tf.io.TFRecordWriter(str(folder / f"train-{k:05d}-of-{shards:05d}")) as writer:
            for i in order[k::shards]:
                data, cls, wnid, height, width = samples[i]
                if not isinstance(data, bytes):  # the imagenet profile keeps paths, not ~110 KB of bytes each
                    data = Path(data).read_bytes()
                example = tf.train.Example(features=tf.train.Features(feature={
                    "image/encoded": feature(data), "image/format": feature(b"JPEG"),
                    "image/class/label": feature(cls + 1), "image/class/synset": feature(wnid.encode()),
                    "image/height": feature(height), "image/width": feature(width),
                }))
                writer.write(example.SerializeToString())
