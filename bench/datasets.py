"""A small, valid ImageNet-shaped dataset in both usual layouts, made from generated images.

    DIR/train/<wnid>/<wnid>_<n>.JPEG              the JPEG folder tree (class index = position of wnid, sorted)
    DIR/tfrecord/train-<k>-of-<K>                 TFRecord shards of tf.train.Example, the field names and 1-based
                                                  labels of TensorFlow's ImageNet conversion scripts

For tests and for trying the real-data path without the 150 GB original. Images differ in size and aspect ratio
so that decoding and random-resized-crop do the work they do on real photographs.
"""
from __future__ import annotations

import io
import os
import random
from pathlib import Path

from bench.errors import BenchInputError

SHARDS = 4


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


def make_imagenet_sample(out: str | Path, classes: int, per_class: int, seed: int = 0,
                         tfrecord: bool = True) -> dict:
    if classes <= 0 or per_class <= 0:
        raise BenchInputError(f"--classes and --per-class must be positive, got {classes} and {per_class}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise BenchInputError("exists and is not a directory", str(out))
    rng = random.Random(seed)
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
    return {"dir": str(out), "classes": classes, "images": len(samples),
            "layouts": ["jpeg"] + (["tfrecord"] if tfrecord else [])}


def _write_tfrecords(folder: Path, samples: list, rng: random.Random) -> None:
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
                example = tf.train.Example(features=tf.train.Features(feature={
                    "image/encoded": feature(data), "image/format": feature(b"JPEG"),
                    "image/class/label": feature(cls + 1), "image/class/synset": feature(wnid.encode()),
                    "image/height": feature(height), "image/width": feature(width),
                }))
                writer.write(example.SerializeToString())
