"""Real-data input: the sample maker, the readers, corrupt images, and the input-bound mark."""
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from bench.analysis.scaling import input_bound
from bench.backends.shared.outcome import last_error
from bench.execution.datasets import make_imagenet_sample
from models.data.augment import random_resized_crop_box
from models.data.imagenet_torch import Batches
from models.data.layout import DataError, list_jpeg_tree
from tests.conftest import bench_cli


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    d = tmp_path_factory.mktemp("inet")
    make_imagenet_sample(d, classes=3, per_class=40, seed=1)
    return d


@pytest.mark.slow
def test_sample_has_both_layouts_readable(sample):
    files, classes = list_jpeg_tree(sample)
    assert len(files) == 120 and classes == sorted(classes) and len(classes) == 3
    from PIL import Image

    with Image.open(files[0][0]) as img:
        assert img.format == "JPEG"
    shards = sorted((sample / "tfrecord").glob("train-*"))
    assert len(shards) == 4
    code = ("import os; os.environ['TF_CPP_MIN_LOG_LEVEL']='3'; import sys, tensorflow as tf; "
            "spec={'image/encoded': tf.io.FixedLenFeature([], tf.string), "
            "'image/class/label': tf.io.FixedLenFeature([], tf.int64)}; "
            "labels=[int(tf.io.parse_single_example(r, spec)['image/class/label']) "
            "for r in tf.data.TFRecordDataset(sys.argv[1:])]; print(len(labels), min(labels), max(labels))")
    out = subprocess.run([sys.executable, "-c", code, *map(str, shards)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["120", "1", "3"]  # 1-based labels, as TensorFlow's conversion scripts write


def test_crop_box_stays_inside_and_respects_the_aspect_range():
    rng = random.Random(0)
    for _ in range(500):
        w, h = rng.randint(20, 500), rng.randint(20, 500)
        left, top, right, bottom = random_resized_crop_box(w, h, rng)
        assert 0 <= left < right <= w and 0 <= top < bottom <= h


def test_torch_batches_shard_per_rank_and_count_corrupt_images(tmp_path):
    sample = tmp_path / "inet"
    make_imagenet_sample(sample, classes=3, per_class=40, seed=1, tfrecord=False)  # JPEGs only: no TensorFlow
    rank0 = Batches(str(sample), 32, 8, rank=0, size=2, workers=0, device=torch.device("cpu"),
                    channels_last=False)
    rank1 = Batches(str(sample), 32, 8, rank=1, size=2, workers=0, device=torch.device("cpu"),
                    channels_last=False)
    assert not set(rank0.loader.dataset.files) & set(rank1.loader.dataset.files)
    images, labels = next(rank0)
    assert images.shape == (8, 3, 32, 32) and labels.dtype == torch.int64
    assert images.abs().sum() > 0 and abs(float(images.mean())) < 3

    # One corrupt file in 120 (0.8%): skipped and counted, not fatal.
    bad = tmp_path / "bad"
    make_imagenet_sample(bad, classes=2, per_class=60, seed=2, tfrecord=False)
    victim = sorted((bad / "train").rglob("*.JPEG"))[0]
    victim.write_bytes(b"not a jpeg at all")
    batches = Batches(str(bad), 32, 10, rank=0, size=1, workers=0, device=torch.device("cpu"),
                      channels_last=True)
    for _ in range(12):  # one epoch
        next(batches)
    assert batches.bad == 1 and batches.seen >= 110

    # Many corrupt files: an error naming the count.
    for path in sorted((bad / "train").rglob("*.JPEG"))[:20]:
        path.write_bytes(b"garbage")
    batches = Batches(str(bad), 32, 10, rank=0, size=1, workers=0, device=torch.device("cpu"),
                      channels_last=True)
    with pytest.raises(DataError, match="could not be decoded"):
        for _ in range(24):
            next(batches)


def test_missing_or_empty_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="no ImageNet JPEG tree"):
        list_jpeg_tree(tmp_path / "nope")
    (tmp_path / "train" / "n1").mkdir(parents=True)
    with pytest.raises(DataError, match="no JPEG files"):
        list_jpeg_tree(tmp_path)


@pytest.mark.slow
def test_make_sample_cli_and_bad_arguments(tmp_path):
    ok = bench_cli("data", "make-imagenet-sample", "d", "--classes", "2", "--per-class", "3", cwd=tmp_path)
    assert ok.returncode == 0 and "6 images in 2 classes" in ok.stdout
    # the TFRecord layout imports TensorFlow: its C++ start-up lines stay off the user's terminal
    assert (tmp_path / "d" / "tfrecord").is_dir() and "absl" not in ok.stderr and "oneDNN" not in ok.stderr, ok.stderr
    bad = bench_cli("data", "make-imagenet-sample", "e", "--classes", "0", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and not (tmp_path / "e").exists()
    # The GPU session's sample: ImageNet-like files, the JPEG tree alone.
    gpu = bench_cli("data", "make-imagenet-sample", "g", "--classes", "2", "--per-class", "4", "--profile", "imagenet",
                    "--layouts", "jpeg", "--workers", "2", cwd=tmp_path)
    assert gpu.returncode == 0 and "8 images in 2 classes, layouts: jpeg:" in gpu.stdout, gpu.stderr
    jpegs = list((tmp_path / "g" / "train").rglob("*.JPEG"))
    assert len(jpegs) == 8 and not (tmp_path / "g" / "tfrecord").exists()
    assert sum(p.stat().st_size for p in jpegs) / len(jpegs) > 50_000  # ImageNet's are ~110 KB; the small ones ~4 KB
    # A folder that cannot be made is the user's path, not a bug (the CLI fuzz drew /proc/none/x: exit 70 before).
    unwritable = bench_cli("data", "make-imagenet-sample", "/proc/none/x", "--classes", "1", "--per-class", "1",
                           cwd=tmp_path)
    assert unwritable.returncode == 2 and unwritable.stderr == ("bench: error: /proc/none/x: cannot write the sample: "
                                                                "No such file or directory\n")


def test_input_bound_marks_real_data_well_below_its_synthetic_twin():
    base = {"cell_id": "s", "gpu": "cpu", "framework": "pytorch", "mpi": "gloo", "ib": False, "gpus": 2,
            "model": "resnet50", "engine": "horovod", "data": "synthetic", "data_layout": "jpeg", "loader_workers": 0,
            "batch_per_gpu": 16, "image_size": 64, "precision": "fp32", "warmup_steps": 1, "steps": 2, "repeats": 2,
            "jobs": 1, "channels_last": False, "threads": 1, "workers_per_node": None, "max_message_bytes": None,
            "loader": "auto", "compile": "off", "optimizer_impl": "default", "cuda_graphs": False,
            "seq_len": None, "grad_accum": 1, "activation_checkpointing": False, "layout": None,
            "tp_across_nodes": False, "samples_per_sec": 100.0}
    df = pd.DataFrame([base, {**base, "cell_id": "r1", "data": "imagenet", "samples_per_sec": 50.0},
                       {**base, "cell_id": "r2", "data": "imagenet", "data_layout": "tfrecord", "loader_workers": 2,
                        "samples_per_sec": 95.0},
                       {**base, "cell_id": "r3", "data": "imagenet", "gpus": 1, "samples_per_sec": 10.0}])
    out = input_bound(df).set_index("cell_id")
    assert out.loc["r1", "input_bound"] and out.loc["r1", "real_vs_synthetic"] == pytest.approx(0.5)
    assert not out.loc["r2", "input_bound"]
    assert pd.isna(out.loc["r3", "real_vs_synthetic"]) and not out.loc["r3", "input_bound"]  # no twin


@pytest.mark.slow
def test_tf_reader_counts_dropped_images_and_fails_over_one_percent(tmp_path):
    d = tmp_path / "inet"
    make_imagenet_sample(d, classes=2, per_class=60, seed=3, tfrecord=False)
    files = sorted((d / "train").rglob("*.JPEG"))
    files[5].write_bytes(b"broken")  # 1 of 120: dropped and counted, not fatal
    code = f"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
import tensorflow as tf
from models.data.imagenet_tf import Counter, dataset
from models.data.layout import DataError
counter = Counter()
try:
    for x, y, n in dataset(tf, {str(d)!r}, "jpeg", 32, 10, 0, 1, True, numbered=True).take(int(sys.argv[1])):
        assert x.shape == (10, 32, 32, 3)
        counter.update(n.numpy())
    print("ok", counter.bad, counter.consumed)
except DataError as e:
    print("error", e)
"""
    out = subprocess.run([sys.executable, "-c", code, "24"], capture_output=True, text=True, timeout=300).stdout
    words = out.split()
    assert words[0] == "ok" and words[1] == "2" and int(words[2]) >= 240, out  # two epochs: seen twice
    for path in files[:20]:
        path.write_bytes(b"broken")
    out = subprocess.run([sys.executable, "-c", code, "24"], capture_output=True, text=True, timeout=300).stdout
    assert out.startswith("error") and "could not be decoded (over 1%)" in out, out


@pytest.mark.workload
def test_keras_workload_counts_undecodable_images_and_fails_over_one_percent(tmp_path):
    """model.fit's batches are fetched outside its step, so the Keras path counts dropped images like the others."""
    d = tmp_path / "inet"
    make_imagenet_sample(d, classes=2, per_class=60, seed=4, tfrecord=False)
    files = sorted((d / "train").rglob("*.JPEG"))
    files[7].write_bytes(b"broken")  # 1 of 120: skipped and counted
    root = Path(__file__).resolve().parent.parent
    cmd = [sys.executable, str(root / "models" / "workloads" / "resnet50" / "keras_worker.py"), "--data", "imagenet",
           "--data-dir", str(d),
           "--batch-size", "10", "--image-size", "32", "--num-classes", "2", "--threads", "1", "--warmup-steps", "1",
           "--steps", "12", "--repeats", "2", "--out", str(tmp_path / "r.jsonl")]
    ok = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr[-2000:]
    counted = re.search(r"skipped (\d+) undecodable images of (\d+)", ok.stdout)
    assert counted, ok.stdout
    assert int(counted[1]) == 2 and int(counted[2]) > 240  # 25 batches of 10: the one bad file, seen in 2 epochs
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(0 <= r["input_wait_s"] < r["window_s"] for r in records)
    for path in files[:20]:
        path.write_bytes(b"broken")
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2
    # The reason the harness records (its own reading of the log): the worker's line, even when TensorFlow's decoder
    # threads print "Not a JPEG file" after it (seen under load: libjpeg's warning came last).
    reason = last_error(bad.stderr)
    assert reason is not None and reason.startswith("bench worker: error:"), bad.stderr[-2000:]
    assert "could not be decoded (over 1%)" in reason
