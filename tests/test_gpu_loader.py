"""The GPU input pipelines for real JPEGs (models/data/loaders.py, gpu_jpeg.py, dali_loader.py), proven on a CPU.

No GPU, nvJPEG, torchvision or DALI here: the nvjpeg path's decoder is replaced by Pillow, which turns the same JPEG
bytes into the same kind of uint8 (3, H, W) tensor that torchvision.io.decode_jpeg(device="cuda") returns (nvJPEG's
IDCT may differ from libjpeg's by a level or so; that is the one step these tests do not cover). Everything after
decoding - the crop/flip draws, crop + antialiased resize, flip, normalisation, layout, batching, sharding, the byte
reader and its prefetch thread, the counting of bad images - is the code the GPU runs, run with device="cpu", and
compared with the Pillow path (imagenet_torch.JpegTree, the code the CPU workers run) for the same seed.
"""
from __future__ import annotations

import math
import random
import subprocess
import sys
import types

import pytest
import torch

from bench.execution.datasets import make_imagenet_sample
from models.data import augment, dali_loader, gpu_jpeg
from models.data.dali_loader import dali_batch, dali_params
from models.data.gpu_jpeg import (ByteReader, CropFlip, GpuJpegBatches, augment_seed, batch_plan, draw_crop_flips,
                                  epoch_order, shard_files)
from models.data.imagenet_torch import MEAN, STD, Batches, JpegTree
from models.data.layout import DataError, list_jpeg_tree
from models.data.loaders import build_loader, resolve_loader
from tests.conftest import ROOT

SEED = 7
LEVELS = torch.as_tensor(STD).view(1, 3, 1, 1)  # normalised difference x STD = difference in 0-255 pixel levels


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    d = tmp_path_factory.mktemp("inet")
    make_imagenet_sample(d, classes=3, per_class=20, seed=1, tfrecord=False)  # the default (small) profile
    return d


@pytest.fixture(scope="module")
def imagenet_like(tmp_path_factory):
    d = tmp_path_factory.mktemp("inet-like")
    make_imagenet_sample(d, classes=2, per_class=12, seed=1, tfrecord=False, profile="imagenet")  # ~110 KB JPEGs
    return d


pillow_decode = gpu_jpeg.decode_pillow  # stands in for nvJPEG: the same bytes to the same kind of tensor


def gpu_path(root, image_size, batch_size, batches, channels_last, **kw):
    """`batches` batches of the nvjpeg path with Pillow standing in for nvJPEG, and the crop/flip draws it made."""
    drawn: list[CropFlip] = []
    real_draw = gpu_jpeg.draw_crop_flips

    def recording_draw(shapes, rng):
        out = real_draw(shapes, rng)
        drawn.extend(out)
        return out

    gpu_jpeg.draw_crop_flips = recording_draw
    loader = GpuJpegBatches(str(root), image_size, batch_size, rank=kw.pop("rank", 0), size=kw.pop("size", 1),
                            workers=2, device="cpu", channels_last=channels_last, seed=SEED, decode=pillow_decode,
                            **kw)
    try:
        got = [next(loader) for _ in range(batches)]
    finally:
        loader.close()
        gpu_jpeg.draw_crop_flips = real_draw
    return got, drawn, loader


def pillow_path(files, image_size, rank=0):
    """The Pillow path's output for `files` in this order, its `random` seeded as the GPU path's generator is, with
    the crop boxes it drew and whether it flipped each image (recorded from inside train_transform)."""
    from PIL import Image

    boxes, flips = [], []
    real_box, real_transpose = augment.random_resized_crop_box, Image.Image.transpose

    def recording_box(*a, **k):
        boxes.append(real_box(*a, **k))
        return boxes[-1]

    def recording_transpose(img, method):
        flips[-1] = method == Image.FLIP_LEFT_RIGHT
        return real_transpose(img, method)

    augment.random_resized_crop_box, Image.Image.transpose = recording_box, recording_transpose
    try:
        tree = JpegTree(files, image_size, channels_last=False)
        random.seed(augment_seed(SEED, rank))  # JpegTree draws from the module's generator
        out = []
        for i in range(len(files)):
            flips.append(False)
            out.append(tree[i])
    finally:
        augment.random_resized_crop_box, Image.Image.transpose = real_box, real_transpose
    return torch.stack([x for x, _ in out]), torch.tensor([y for _, y in out]), boxes, flips


def pixel_check(got: torch.Tensor, want: torch.Tensor, boxes, image_size: int) -> tuple[float, float]:
    """(worst interior difference, mean difference), in 0-255 levels. The interior leaves out the ring that Pillow's
    box resize computes from pixels just outside the crop box (crop-then-resize cannot see them): one output pixel
    when shrinking, about half the enlargement factor when enlarging."""
    levels = (got.float() - want.float()).abs() * LEVELS
    worst = 0.0
    for i, (left, top, right, bottom) in enumerate(boxes):
        ring = math.ceil(0.5 * image_size / min(right - left, bottom - top)) + 1
        worst = max(worst, float(levels[i, :, ring:image_size - ring, ring:image_size - ring].max()))
    return worst, float(levels.mean())


# Tolerances, in 0-255 levels. Interior: 1 level - torch's antialiased bilinear filter is Pillow's (same support,
# same triangle weights), but Pillow works in 8-bit fixed point with its own rounding, so a pixel may land one level
# away. Mean over whole images: 0.5 level - the border ring (above) differs by up to tens of levels on busy images.
# A wrong mean or std, a swapped flip, another box or another image moves the interior by many levels.
INTERIOR_MAX, MEAN_MAX = 1.01, 0.5


@pytest.mark.parametrize("data,image_size,channels_last", [("sample", 64, False), ("sample", 64, True),
                                                         ("sample", 224, True), ("imagenet_like", 224, True)])
def test_gpu_path_matches_the_pillow_path_for_the_same_seed(request, data, image_size, channels_last):
    sample = request.getfixturevalue(data)
    batch = 12
    got, drawn, loader = gpu_path(sample, image_size, batch, batches=2, channels_last=channels_last)
    files, _ = list_jpeg_tree(sample)
    order = epoch_order(len(files), SEED, 0, 0)[:2 * batch]  # the batches' files, in the order the loader took them
    want_x, want_y, boxes, flips = pillow_path([files[i] for i in order], image_size)

    x = torch.cat([b[0] for b in got])
    y = torch.cat([b[1] for b in got])
    assert torch.equal(y, want_y)  # same labels, same order
    drawn = drawn[:len(boxes)]  # the device stage had drawn for a batch or two ahead
    assert [d.box for d in drawn] == boxes  # same crop boxes ...
    assert [d.flip for d in drawn] == flips  # ... and flips, drawn in the same sequence
    assert 0 < sum(flips) < len(flips)  # both kinds present
    for images, labels in got:
        assert images.shape == (batch, 3, image_size, image_size) and images.dtype == torch.float32
        assert labels.dtype == torch.int64 and labels.shape == (batch,)
        memory_format = torch.channels_last if channels_last else torch.contiguous_format
        assert images.is_contiguous(memory_format=memory_format)
    assert x.shape == want_x.shape and x.dtype == want_x.dtype
    worst, mean = pixel_check(x, want_x, boxes, image_size)
    assert worst <= INTERIOR_MAX and mean <= MEAN_MAX, (worst, mean)
    assert loader.seen == 2 * batch and loader.bad == 0


def test_the_pixel_check_catches_a_wrong_mean_a_swapped_flip_and_a_wrong_box(sample):
    """The comparison above can fail: the same batch with one thing wrong does."""
    image_size, batch = 64, 12
    got, drawn, _ = gpu_path(sample, image_size, batch, batches=1, channels_last=False)
    drawn = drawn[:batch]
    files, _ = list_jpeg_tree(sample)
    want_x, _, boxes, _ = pillow_path([files[i] for i in epoch_order(len(files), SEED, 0, 0)[:batch]], image_size)
    x = got[0][0]
    worst, mean = pixel_check(x, want_x, boxes, image_size)
    assert worst <= INTERIOR_MAX and mean <= MEAN_MAX

    one_level = 1 / torch.as_tensor(STD).view(1, 3, 1, 1)
    assert pixel_check(x - 2 * one_level, want_x, boxes, image_size)[0] > INTERIOR_MAX  # mean 2 levels off

    flipped = torch.tensor([not d.flip for d in drawn])
    images = [t for t in pillow_decode([gpu_jpeg.bytes_tensor(open(files[i][0], "rb").read())
                                        for i in epoch_order(len(files), SEED, 0, 0)[:batch]])]
    swapped = gpu_jpeg.crop_resize_flip_normalise(images, [CropFlip(d.box, bool(f)) for d, f in zip(drawn, flipped)],
                                                  image_size, False)
    assert pixel_check(swapped, want_x, boxes, image_size)[0] > 20  # every image mirrored the wrong way

    shifted = [CropFlip((d.box[0] + 1, d.box[1], d.box[2] + 1, d.box[3]) if d.box[2] < img.shape[-1]
                        else (d.box[0] - 1, d.box[1], d.box[2] - 1, d.box[3]), d.flip)
               for d, img in zip(drawn, images)]
    moved = gpu_jpeg.crop_resize_flip_normalise(images, shifted, image_size, False)
    assert pixel_check(moved, want_x, boxes, image_size)[0] > INTERIOR_MAX  # the box one pixel off


def test_draws_follow_train_transform_and_post_decode_is_batched():
    rng_a, rng_b = random.Random("x"), random.Random("x")
    shapes = [(300, 200), (96, 320), (500, 375)]
    drawn = draw_crop_flips(shapes, rng_a)
    for (h, w), d in zip(shapes, drawn):
        assert d.box == augment.random_resized_crop_box(w, h, rng_b) and d.flip == (rng_b.random() < 0.5)
    images = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8) for h, w in shapes]
    out = gpu_jpeg.crop_resize_flip_normalise(images, drawn, 32, channels_last=True)
    assert out.shape == (3, 3, 32, 32) and out.is_contiguous(memory_format=torch.channels_last)
    constant = [torch.full((3, 40, 50), 128, dtype=torch.uint8)]
    x = gpu_jpeg.crop_resize_flip_normalise(constant, [CropFlip((0, 0, 50, 40), False)], 16, False)
    expected = (128 - torch.as_tensor(MEAN)) / torch.as_tensor(STD)  # the Pillow path's normalisation
    assert torch.allclose(x[0, :, 5, 5], expected)
    with pytest.raises(ValueError, match="2 images but 1"):
        gpu_jpeg.crop_resize_flip_normalise(constant * 2, [CropFlip((0, 0, 50, 40), False)], 16, False)


def test_shards_cover_every_file_once_as_the_pillow_path_does(sample):
    files, _ = list_jpeg_tree(sample)
    for size in (1, 2, 3, 4, 7):
        shards = [shard_files(files, r, size) for r in range(size)]
        flat = [f for s in shards for f in s]
        assert sorted(flat) == sorted(files) and len(flat) == len(set(flat)) == len(files)
    pil = Batches(str(sample), 32, 4, rank=1, size=3, workers=0, device=torch.device("cpu"), channels_last=False)
    assert shard_files(files, 1, 3) == pil.loader.dataset.files  # the same share as the Pillow path's


def test_batch_plan_reshuffles_each_epoch_and_drops_the_tail():
    n, b = 23, 5
    plan = batch_plan(n, b, seed=3, rank=1)
    epochs: dict[int, list[list[int]]] = {}
    for _ in range(3 * (n // b)):
        epoch, idx = next(plan)
        epochs.setdefault(epoch, []).append(idx)
    assert sorted(epochs) == [0, 1, 2]
    for batches in epochs.values():
        flat = [i for idx in batches for i in idx]
        assert len(batches) == n // b and all(len(idx) == b for idx in batches)
        assert len(set(flat)) == len(flat) == (n // b) * b and set(flat) <= set(range(n))
    assert epochs[0] != epochs[1] != epochs[2]
    assert epoch_order(n, 3, 1, 0) == epoch_order(n, 3, 1, 0)
    assert epoch_order(n, 3, 1, 0) != epoch_order(n, 4, 1, 0) and epoch_order(n, 3, 1, 0) != epoch_order(n, 3, 0, 0)
    with pytest.raises(ValueError, match="cannot fill a batch"):
        batch_plan(4, 5, 0, 0)


def test_byte_reader_returns_exact_file_bytes_and_none_for_unreadable(sample, tmp_path):
    files, _ = list_jpeg_tree(sample)
    shard = shard_files(files, 0, 2)
    reader = ByteReader(shard, batch_size=8, seed=SEED, rank=0, threads=3, prefetch=2)
    reader.start()
    try:
        for _ in range(5):  # past an epoch of 30 files in batches of 8
            raw = next(reader)
            assert len(raw.datas) == len(raw.labels) == len(raw.paths) == 8
            for data, label, path in zip(raw.datas, raw.labels, raw.paths):
                assert data.dtype == torch.uint8 and data.dim() == 1
                assert data.numpy().tobytes() == open(path, "rb").read()
                assert (path, label) in shard
    finally:
        reader.close()
    assert gpu_jpeg.read_bytes(str(tmp_path / "missing.JPEG")) is None


def test_bad_images_are_skipped_and_counted_and_too_many_is_an_error(tmp_path):
    bad = tmp_path / "bad"
    make_imagenet_sample(bad, classes=2, per_class=60, seed=2, tfrecord=False)
    jpegs = sorted((bad / "train").rglob("*.JPEG"))
    jpegs[0].write_bytes(b"not a jpeg at all")
    loader = GpuJpegBatches(str(bad), 32, 10, rank=0, size=1, workers=2, device="cpu", channels_last=True,
                            seed=1, decode=pillow_decode)
    try:
        for _ in range(12):  # one epoch
            images, labels = next(loader)
            assert len(images) == len(labels) >= 9
    finally:
        loader.close()
    assert loader.bad == 1 and loader.seen == 120

    for path in jpegs[:20]:
        path.write_bytes(b"")  # unreadable as well as undecodable: empty files never reach the decoder
    loader = GpuJpegBatches(str(bad), 32, 10, rank=0, size=1, workers=2, device="cpu", channels_last=True,
                            seed=1, decode=pillow_decode)
    try:
        with pytest.raises(DataError, match="could not be decoded"):
            for _ in range(24):
                next(loader)
    finally:
        loader.close()
    with pytest.raises(DataError, match="fewer than one batch"):
        GpuJpegBatches(str(bad), 32, 200, rank=0, size=1, workers=1, device="cpu", channels_last=True)


def test_nvjpeg_decode_falls_back_image_by_image(monkeypatch):
    """decode_nvjpeg with a stand-in torchvision.io: a batch that fails is decoded one image at a time, nvJPEG then
    the CPU decoder, None for what neither reads."""
    calls = []

    def decode_jpeg(data, mode=None, device="cpu"):
        calls.append(("jpeg", len(data) if isinstance(data, list) else 1, str(device)))
        items = data if isinstance(data, list) else [data]
        if any(bytes(t.tolist()[:1]) != b"J" for t in items):
            raise RuntimeError("nvjpeg says no")
        out = [torch.zeros(3, 2, 2, dtype=torch.uint8) for _ in items]
        return out if isinstance(data, list) else out[0]

    def decode_image(data, mode=None):
        calls.append(("image", 1, "cpu"))
        if bytes(data.tolist()[:1]) == b"C":
            return torch.ones(3, 2, 2, dtype=torch.uint8)
        raise RuntimeError("not an image")

    fake = types.ModuleType("torchvision.io")
    fake.ImageReadMode = types.SimpleNamespace(RGB="RGB")
    fake.decode_jpeg, fake.decode_image = decode_jpeg, decode_image
    monkeypatch.setitem(sys.modules, "torchvision", types.ModuleType("torchvision"))
    monkeypatch.setitem(sys.modules, "torchvision.io", fake)
    t = gpu_jpeg.bytes_tensor
    assert len(gpu_jpeg.decode_nvjpeg([t(b"J1"), t(b"J2")], torch.device("cpu"))) == 2
    assert calls == [("jpeg", 2, "cpu")]  # one batched call when all decode
    out = gpu_jpeg.decode_nvjpeg([t(b"J1"), t(b"Cmyk"), t(b"xx")], torch.device("cpu"))
    assert out[0] is not None and out[0].sum() == 0 and out[1].sum() == 12 and out[2] is None
    assert gpu_jpeg.decode_nvjpeg([], torch.device("cpu")) == []


def test_resolve_loader_rules():
    assert resolve_loader("auto", "cpu", have_dali=True, have_torchvision=True) == "pil"
    assert resolve_loader("auto", "cuda", have_dali=True, have_torchvision=True) == "dali"
    assert resolve_loader("auto", "cuda", have_dali=False, have_torchvision=True) == "nvjpeg"
    assert resolve_loader("auto", "cuda", have_dali=False, have_torchvision=False) == "pil"
    assert resolve_loader("pil", "cuda") == resolve_loader("pil", "cpu") == "pil"
    assert resolve_loader("nvjpeg", "cuda", have_torchvision=True) == "nvjpeg"
    assert resolve_loader("dali", "cuda", have_dali=True) == "dali"
    for kind in ("nvjpeg", "dali"):
        with pytest.raises(ValueError, match=f"loader {kind} decodes on a GPU; this worker's device is cpu") as e:
            resolve_loader(kind, "cpu", have_dali=True, have_torchvision=True)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="NVIDIA DALI is not installed"):
        resolve_loader("dali", "cuda", have_dali=False)
    with pytest.raises(ValueError, match="torchvision does not import"):
        resolve_loader("nvjpeg", "cuda", have_torchvision=False)
    with pytest.raises(ValueError, match="unknown loader 'jpeg'"):
        resolve_loader("jpeg", "cuda")
    # Probed for real here: no DALI, and no torchvision that imports beside the CPU torch.
    assert resolve_loader("auto", "cuda") == "pil"


def test_build_loader_pil_is_todays_path_and_gpu_loaders_refuse_a_cpu(sample):
    loader = build_loader("auto", str(sample), batch_size=4, image_size=32, channels_last=True, device="cpu",
                          workers=0, rank=0, size=2, seed=0, precision="fp32")
    assert isinstance(loader, Batches) and loader.kind == "pil" and loader.workers == 0
    images, labels = next(loader)
    assert images.shape == (4, 3, 32, 32) and images.is_contiguous(memory_format=torch.channels_last)
    assert labels.dtype == torch.int64 and iter(loader) is loader
    for kind in ("nvjpeg", "dali"):
        with pytest.raises(ValueError, match="decodes on a GPU"):
            build_loader(kind, str(sample), 4, 32, True, "cpu", 1, 0, 1, 0, "fp16")


def test_dali_pipeline_arguments(sample):
    files, _ = list_jpeg_tree(sample)
    p = dali_params(files, batch_size=8, image_size=176, channels_last=True, device_id=3, workers=6, rank=1, size=2,
                    seed=5)
    shard = shard_files(files, 1, 2)
    assert p["reader"]["files"] == [f for f, _ in shard] and p["reader"]["labels"] == [c for _, c in shard]
    assert p["reader"]["name"] == dali_loader.READER and p["reader"]["random_shuffle"]
    assert (p["reader"]["shard_id"], p["reader"]["num_shards"]) == (0, 1)  # the shard is in `files` already
    assert p["pipeline"]["batch_size"] == 8 and p["pipeline"]["num_threads"] == 6 and p["pipeline"]["device_id"] == 3
    assert p["pipeline"]["seed"] != dali_params(files, 8, 176, True, 3, 6, 0, 2, 5)["pipeline"]["seed"]  # per rank
    d = p["decoder"]
    assert d["device"] == "mixed" and d["output_type"] == "RGB" and d["num_attempts"] == 10
    assert d["random_area"] == [0.08, 1.0] and d["random_aspect_ratio"] == pytest.approx([3 / 4, 4 / 3])
    assert p["resize"]["resize_x"] == p["resize"]["resize_y"] == 176 and p["resize"]["antialias"]
    n = p["normalize"]
    assert n["output_layout"] == "HWC" and n["dtype"] == "FLOAT"
    assert n["mean"] == pytest.approx(list(MEAN)) and n["std"] == pytest.approx(list(STD))
    assert n["mean"] == pytest.approx([0.485 * 255, 0.456 * 255, 0.406 * 255])
    assert dali_params(files, 8, 176, False, 0, 1, 0, 1, 0)["normalize"]["output_layout"] == "CHW"
    assert p["mirror"] == {"probability": 0.5} and p["shard_size"] == len(shard)
    assert p["resize"]["device"] == n["device"] == "gpu"
    # No device: DALI's CPU operators, everything else the same (the loader check runs it so, with the real DALI).
    cpu = dali_params(files, 8, 176, True, None, 6, 1, 2, 5)
    assert (cpu["decoder"]["device"], cpu["resize"]["device"], cpu["normalize"]["device"]) == ("cpu", "cpu", "cpu")
    assert cpu["pipeline"]["device_id"] is None
    for key in ("reader", "mirror"):
        assert cpu[key] == p[key]
    assert {k: v for k, v in cpu["decoder"].items() if k != "device"} == {k: v for k, v in d.items() if k != "device"}
    with pytest.raises(DataError, match="fewer than one batch"):
        dali_params(files, 64, 176, True, 0, 1, 0, 2, 0)


def test_dali_outputs_become_the_models_batch_without_a_copy():
    nhwc = torch.randn(4, 8, 8, 3)
    labels = torch.tensor([[3], [1], [0], [2]], dtype=torch.int32)
    images, y = dali_batch(nhwc, labels, channels_last=True)
    assert images.shape == (4, 3, 8, 8) and images.is_contiguous(memory_format=torch.channels_last)
    assert images.data_ptr() == nhwc.data_ptr()  # a view: HWC output is channels-last memory
    assert torch.equal(images[:, 1], nhwc[..., 1])
    assert y.dtype == torch.int64 and y.tolist() == [3, 1, 0, 2]
    nchw = torch.randn(4, 3, 8, 8)
    images, _ = dali_batch(nchw, labels, channels_last=False)
    assert images.data_ptr() == nchw.data_ptr() and images.is_contiguous()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (nvJPEG); the CPU tests above stand "
                    "Pillow in for it")
def test_nvjpeg_on_the_gpu_matches_the_pillow_path(sample):
    from models.data.loaders import torchvision_available

    if not torchvision_available():
        pytest.skip("torchvision does not import beside this torch")
    files, _ = list_jpeg_tree(sample)
    datas = [gpu_jpeg.bytes_tensor(open(f, "rb").read()) for f, _ in files[:16]]
    on_gpu = gpu_jpeg.decode_nvjpeg(datas, torch.device("cuda"))
    for got, want in zip(on_gpu, pillow_decode(datas)):
        assert got.is_cuda and got.shape == want.shape  # nvJPEG's IDCT may differ from libjpeg's by a few levels
        assert (got.cpu().float() - want.float()).abs().mean() < 1.0
    loader = GpuJpegBatches(str(sample), 64, 12, rank=0, size=1, workers=2, device="cuda", channels_last=True,
                            seed=SEED)
    try:
        x, y = next(loader)
    finally:
        loader.close()
    assert x.is_cuda and y.is_cuda and x.is_contiguous(memory_format=torch.channels_last)
    want_x, want_y, boxes, _ = pillow_path([files[i] for i in epoch_order(len(files), SEED, 0, 0)[:12]], 64)
    assert torch.equal(y.cpu(), want_y)
    assert pixel_check(x.cpu(), want_x, boxes, 64)[1] <= 1.5  # decoder differences on top of the resize's


# scripts/gpu_loader_check.py: the nvjpeg loader with the real torchvision decoder against Pillow, and the dali loader
# where DALI imports. The GPU session's data phase runs it with nvJPEG; `make device-kit` with torchvision's CPU
# decoder and DALI's CPU operators in .venv-gpu-kit (the kit's torchvision over the GPU machine's torch 2.11.0, and
# DALI 2.4.0), which this venv's pinned CPU torch cannot import.
LOADER_CHECK = ROOT / "scripts" / "gpu_loader_check.py"
KIT_PYTHON = ROOT / ".venv-gpu-kit" / "bin" / "python"


def loader_check(python, sample, *extra):
    return subprocess.run([str(python), str(LOADER_CHECK), "--sample", str(sample), "--device", "cpu", "--images",
                           "16", "--batch", "8", *extra], capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.slow
def test_the_loader_check_says_in_one_line_when_torchvision_does_not_import(imagenet_like):
    done = loader_check(sys.executable, imagenet_like)  # this venv has no torchvision
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.count("FAIL") == 1 and "torchvision does not import beside torch" in done.stdout


def kit_has_the_loaders() -> bool:
    return KIT_PYTHON.exists() and subprocess.run([str(KIT_PYTHON), "-c", "import torchvision, nvidia.dali"],
                                                  capture_output=True, timeout=120).returncode == 0


@pytest.mark.skipif(not kit_has_the_loaders(), reason="no .venv-gpu-kit with torchvision and DALI: `make device-kit` "
                    "makes it (several GB of CUDA wheels) and runs this check itself")
def test_the_loader_check_passes_with_the_real_torchvision_and_enforces_its_limits(imagenet_like):
    done = loader_check(KIT_PYTHON, imagenet_like)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok   decode: 16 JPEGs in one call on cpu" in done.stdout and "ok   loader: 2 batches of 8" in done.stdout
    assert "ok   dali: 8 whole images" in done.stdout and "ok   dali loader: 2 batches of 8" in done.stdout
    # libjpeg-turbo on both sides: the same pixels, so a limit of 0 levels (differences must be below it) fails; DALI's
    # resize is not torch's, a hundredth of a level apart on average.
    strict = loader_check(KIT_PYTHON, imagenet_like, "--decode-levels", "0", "--loader-levels", "0",
                          "--dali-levels", "0.001")
    assert strict.returncode == 1 and strict.stdout.count("FAIL") == 3, strict.stdout


@pytest.mark.parametrize("args,says", [(["--sample", "/nonexistent"], "no ImageNet JPEG tree at /nonexistent"),
                                       (["--device", "gpu"], "--device must be auto, cpu, cuda or cuda:N"),
                                       (["--batch", "0"], "--batch: must be at least 1"),
                                       (["--images", "100000"], "need 100000")])
def test_the_loader_check_refuses_bad_input_in_one_line(imagenet_like, args, says):
    argv = [sys.executable, str(LOADER_CHECK), "--sample", str(imagenet_like), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
