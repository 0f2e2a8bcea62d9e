"""ImageNet for TensorFlow/Keras via tf.data, in both layouts: the JPEG folder tree and TFRecord shards (the
field names and 1-based labels of TensorFlow's ImageNet conversion). Random-resized-crop + flip, a shard per rank,
parallel decoding, prefetch. Undecodable images are dropped (tf.data's ignore_errors)."""
from __future__ import annotations

from pathlib import Path

from models.data.layout import DataError, list_jpeg_tree

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
            channels_last: bool):
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
    images = records.map(lambda enc, label: (_crop_decode(tf, enc, image_size), label),
                         num_parallel_calls=tf.data.AUTOTUNE).ignore_errors()
    if not channels_last:
        images = images.map(lambda x, y: (tf.transpose(x, [2, 0, 1]), y))
    if count is not None and count < batch_size:
        raise DataError(f"rank {rank}'s shard has {count} images, fewer than one batch of {batch_size}")
    return images.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
