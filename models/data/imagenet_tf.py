"""ImageNet for TensorFlow/Keras via tf.data, in both layouts: the JPEG folder tree and TFRecord shards (the
field names and 1-based labels of TensorFlow's ImageNet conversion). Random-resized-crop + flip, a shard per rank,
parallel decoding, prefetch.

Undecodable images are dropped (tf.data's ignore_errors). To count them, every record is numbered in the order it is
consumed and decoding keeps that order, so a gap in the numbers a batch carries is a dropped image (`Counter`);
more than 1% dropped is an error, as in the PyTorch reader (`too_many_bad`)."""
from __future__ import annotations

from pathlib import Path

from models.data.layout import DataError, list_jpeg_tree, too_many_bad

MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


def _crop_decode(tf, encoded, size: int):
    shape = tf.image.extract_jpeg_shape(encoded)
    begin, crop, _ = tf.image.sample_distorted_bounding_box(
        shape, bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]), min_object_covered=0.1,
        aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=10,
        use_image_if_no_bounding_boxes=True)
    y, x, _ = tf.unstack(begin)
    h, w, _ = tf.unstack(crop)
    image = tf.image.decode_and_crop_jpeg(encoded, tf.stack([y, x, h, w]), channels=3)
    image = tf.image.resize(image, (size, size))
    image = tf.image.random_flip_left_right(image)
    return (image - MEAN) / STD


def dataset(tf, root: str, layout: str, image_size: int, batch_size: int, rank: int, size: int,
            channels_last: bool, numbered: bool = False):
    """Batches of (images, labels), or of (images, labels, record numbers) with `numbered` (see Counter)."""
    root_path = Path(root)
    if layout == "jpeg":
        files, _ = list_jpeg_tree(root_path)
        shard = files[rank::size]
        records = tf.data.Dataset.from_tensor_slices(([f for f, _ in shard], [c for _, c in shard]))
        records = records.shuffle(len(shard), seed=rank, reshuffle_each_iteration=True).repeat()
        records = records.map(lambda path, label: (tf.io.read_file(path), label),
                              num_parallel_calls=tf.data.AUTOTUNE)
        count = len(shard)
    elif layout == "tfrecord":
        folder = root_path / "tfrecord" if (root_path / "tfrecord").is_dir() else root_path
        shards = sorted(str(p) for p in folder.glob("train-*"))
        if not shards:
            raise DataError(f"no TFRecord shards (train-*) under {folder}")
        if len(shards) < size:
            raise DataError(f"{len(shards)} TFRecord shards cannot be split across {size} ranks")
        files = tf.data.Dataset.from_tensor_slices(shards).shard(size, rank)
        records = files.interleave(tf.data.TFRecordDataset, cycle_length=min(4, len(shards)),
                                   num_parallel_calls=tf.data.AUTOTUNE).shuffle(1024, seed=rank).repeat()
        spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64)}

        def parse(serialized):
            f = tf.io.parse_single_example(serialized, spec)
            return f["image/encoded"], f["image/class/label"] - 1  # TF's conversion scripts count from 1

        records = records.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        count = None
    else:
        raise DataError(f"unknown data layout {layout!r} (jpeg or tfrecord)")
    records = records.enumerate()  # after shuffle and repeat: numbers follow consumption order
    images = records.map(lambda n, rec: (_crop_decode(tf, rec[0], image_size), rec[1], n),
                         num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).ignore_errors()
    if not channels_last:
        images = images.map(lambda x, y, n: (tf.transpose(x, [2, 0, 1]), y, n))
    if not numbered:
        images = images.map(lambda x, y, n: (x, y))
    if count is not None and count < batch_size:
        raise DataError(f"rank {rank}'s shard has {count} images, fewer than one batch of {batch_size}")
    return images.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


class Counter:
    """Counts images dropped as undecodable from the record numbers of delivered batches."""

    def __init__(self):
        self.delivered = 0
        self.consumed = 0  # records up to the highest number delivered so far

    @property
    def bad(self) -> int:
        return self.consumed - self.delivered

    def update(self, numbers) -> None:
        self.delivered += len(numbers)
        self.consumed = max(self.consumed, int(max(numbers)) + 1)
        if too_many_bad(self.bad, self.consumed):
            raise DataError(f"{self.bad} of {self.consumed} images could not be decoded (over 1%)")
