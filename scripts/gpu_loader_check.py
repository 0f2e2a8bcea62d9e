#!/usr/bin/env python3
"""The `nvjpeg` loader with the real torchvision decoder, against Pillow, on a JPEG tree, and the `dali` loader where
DALI is installed; run with a Python that has torch, torchvision, Pillow and numpy (the GPU machine's venv after the
kit's install; `.venv-gpu-kit` here, which has DALI too).

On a GPU this is the session's pre-flight for real-data cells (its data phase runs it): nvJPEG decodes, and the
loader's batches equal the Pillow-decoded ones but for the decoders' differences. On a CPU (`--device cpu`) it runs
the same code with torchvision's CPU decoder (libjpeg-turbo), which proves the torchvision calls themselves - the
batched `decode_jpeg(list, mode=RGB, device=...)` and its fallbacks - against the real library: the CPU test suite
cannot import torchvision beside its pinned CPU torch, so it stands Pillow in for the decoder
(tests/test_gpu_loader.py).

Checks, each one line, exit 1 when any fails:
1. decode: the first --images files, decoded in one batched call, have Pillow's shapes, and differ from Pillow's
   pixels by under --decode-levels on average per image (nvJPEG's IDCT and chroma upsampling are not libjpeg's; the
   CPU decoder is libjpeg-turbo, as Pillow's);
2. loader: two batches of the loader (models/data/gpu_jpeg.py) with the real decoder equal, in labels, shapes, memory
   format and layout, those of the same loader and seed with Pillow as the decoder, and their pixels differ by under
   --loader-levels on average (the crop, resize and normalisation are shared; only the decoder differs);
3. rate: the batched decode's images/s on this device (reported, not judged: the cells measure the loader);
where DALI imports (not on the GPU machines lent so far: the kit has no room for its 200 MB wheel):
4. dali: the pipeline of models/data/dali_loader.py with whole-image crops, no mirror and the files in order - every
   other argument as the loader's - gives the labels of those files and, to within --dali-levels on average, the
   nvjpeg path's resize and normalisation of the Pillow-decoded whole images (DALI's own decoder and resize);
5. dali loader: two batches of the loader itself (random crops, flips, shuffled): shapes, dtype, channels-last,
   labels among the tree's, finite; and its images/s over a few batches (reported).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def levels(a, b) -> float:
    """Mean absolute difference of two tensors, in the units they are in."""
    return float((a.detach().cpu().float() - b.detach().cpu().float()).abs().mean())


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def bad_input(message: str) -> int:
    """Bad input: one line, exit 2, nothing run."""
    print(f"gpu_loader_check: {message}", file=sys.stderr)
    return 2


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints its usage too: one line is the project's rule
        sys.exit(bad_input(message))


def main(argv=None) -> int:
    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("--sample", required=True, help="a JPEG tree (train/<class>/*.JPEG), e.g. the session's sample")
    p.add_argument("--device", default="auto", help="cuda, cuda:N, cpu, or auto (cuda when there is one)")
    p.add_argument("--images", type=positive, default=64, help="images decoded for check 1 and the rate")
    p.add_argument("--batch", type=positive, default=32, help="the loader's batch size for check 2")
    p.add_argument("--image-size", type=positive, default=224)
    p.add_argument("--decode-levels", type=float, default=1.0, help="0-255 levels per image, on average")
    p.add_argument("--loader-levels", type=float, default=1.0, help="0-255 levels, on average")
    p.add_argument("--dali-levels", type=float, default=1.0, help="0-255 levels, on average")
    args = p.parse_args(argv)

    import re

    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", args.device):
        return bad_input(f"--device must be auto, cpu, cuda or cuda:N, got '{args.device}'")
    from models.data.layout import DataError, list_jpeg_tree

    try:
        files, _ = list_jpeg_tree(args.sample)
    except DataError as e:
        return bad_input(f"--sample: {e}")
    if len(files) < max(args.images, 2 * args.batch):
        return bad_input(f"--sample {args.sample} has {len(files)} JPEGs; --images {args.images} and --batch "
                         f"{args.batch} need {max(args.images, 2 * args.batch)}")

    import torch

    try:
        import torchvision
    except ImportError as e:  # e.g. no torchvision built for this torch: the real-data cells fall back to Pillow
        print(f"FAIL torchvision does not import beside torch {torch.__version__}: {e}")
        return 1

    from models.data import gpu_jpeg
    from models.data.imagenet_torch import STD

    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU"
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, device {device} ({where})")
    failed = 0

    def report(ok: bool, line: str) -> None:
        nonlocal failed
        failed += not ok
        print(("ok   " if ok else "FAIL ") + line)

    # 1. decode, one batched call, against Pillow.
    datas = [gpu_jpeg.bytes_tensor(gpu_jpeg.read_bytes(f)) for f, _ in files[:args.images]]
    decoded = gpu_jpeg.decode_nvjpeg(datas, device)
    wanted = gpu_jpeg.decode_pillow(datas)
    bad = [i for i, (g, w) in enumerate(zip(decoded, wanted)) if g is None or w is None or g.shape != w.shape
           or g.device.type != device.type or g.dtype != torch.uint8]
    diffs = [levels(g, w) for g, w in zip(decoded, wanted) if g is not None and w is not None and g.shape == w.shape]
    worst = max(diffs, default=float("inf"))
    report(not bad and worst < args.decode_levels,
           f"decode: {len(datas)} JPEGs in one call on {device.type}: {len(bad)} unlike Pillow's in shape, dtype or "
           f"device; pixel difference from Pillow's per image: worst {worst:.3f}, mean "
           f"{sum(diffs) / max(1, len(diffs)):.3f} levels (limit {args.decode_levels})")

    # 2. the loader with the real decoder against the same loader with Pillow's, same seed.
    def two_batches(decode):
        loader = gpu_jpeg.GpuJpegBatches(args.sample, args.image_size, args.batch, rank=0, size=1, workers=4,
                                         device=device, channels_last=True, seed=1, decode=decode)
        try:
            return [tuple(t.to("cpu") for t in next(loader)) for _ in range(2)], loader.bad
        finally:
            loader.close()

    real, real_bad = two_batches(None)
    pil, _ = two_batches(lambda ds: [None if t is None else t.to(device) for t in gpu_jpeg.decode_pillow(ds)])
    std = torch.as_tensor(STD).view(1, 3, 1, 1)
    same = all(torch.equal(ry, py) and rx.shape == px.shape and rx.dtype == torch.float32
               and rx.is_contiguous(memory_format=torch.channels_last) for (rx, ry), (px, py) in zip(real, pil))
    diff = sum(levels(rx * std, px * std) for (rx, _), (px, _) in zip(real, pil)) / len(real)
    report(same and real_bad == 0 and diff < args.loader_levels,
           f"loader: 2 batches of {args.batch} at {args.image_size} px, channels-last: labels, shapes and layout "
           f"{'equal' if same else 'DIFFER'} to the Pillow-decoded loader's, {real_bad} bad images, pixel difference "
           f"{diff:.3f} levels (limit {args.loader_levels})")

    # 3. the batched decode's rate on this device (after the call above warmed it up).
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    rounds = 3
    for _ in range(rounds):
        gpu_jpeg.decode_nvjpeg(datas, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    took = time.perf_counter() - start
    kb = sum(d.numel() for d in datas) / len(datas) / 1024
    print(f"rate: {rounds * len(datas) / took:,.0f} img/s decoding {len(datas)} JPEGs of {kb:.0f} KB on average in "
          f"one call, {rounds} times, on {device.type} (one thread)")
    check_dali(args, device, files, report)
    return 1 if failed else 0


def check_dali(args, device, files, report) -> None:
    """Checks 4 and 5, where DALI imports."""
    import torch

    try:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
    except ImportError:
        print("skip dali: nvidia-dali is not installed here")
        return
    from models.data import dali_loader, gpu_jpeg
    from models.data.imagenet_torch import STD

    device_id = None if device.type == "cpu" else (device.index if device.index is not None else
                                                   torch.cuda.current_device())
    # 4. Area 1 fits no drawn aspect ratio but the image's own, so DALI falls back to its centre crop with the ratio
    # clamped to the range given, which is wide enough to hold every image's: the whole image.
    shard = files[:args.batch]
    params = dali_loader.dali_params(shard, args.batch, args.image_size, True, device_id, 2, 0, 1, 1)
    params["reader"]["random_shuffle"] = False
    params["decoder"].update(random_area=[1.0, 1.0], random_aspect_ratio=[0.01, 100.0])
    params["mirror"]["probability"] = 0.0
    it = DALIGenericIterator([dali_loader.build(params)], ["images", "labels"], reader_name=dali_loader.READER,
                             last_batch_policy=LastBatchPolicy.DROP)
    out = next(it)
    x, y = dali_loader.dali_batch(out[0]["images"], out[0]["labels"], channels_last=True)
    whole = gpu_jpeg.decode_pillow([gpu_jpeg.bytes_tensor(gpu_jpeg.read_bytes(f)) for f, _ in shard])
    want = gpu_jpeg.crop_resize_flip_normalise(
        whole, [gpu_jpeg.CropFlip((0, 0, img.shape[2], img.shape[1]), False) for img in whole], args.image_size, True)
    std = torch.as_tensor(STD).view(1, 3, 1, 1)
    labels_ok = y.cpu().tolist() == [c for _, c in shard]
    layout_ok = (x.shape == want.shape and x.dtype == torch.float32 and x.device.type == device.type
                 and x.is_contiguous(memory_format=torch.channels_last))
    diff = levels(x.cpu() * std, want * std) if x.shape == want.shape else float("inf")
    report(labels_ok and layout_ok and diff < args.dali_levels,
           f"dali: {args.batch} whole images in file order through the loader's pipeline on {device.type}: labels "
           f"{'equal' if labels_ok else 'DIFFER'}, shape, dtype and layout {'right' if layout_ok else 'WRONG'}, "
           f"{diff:.3f} levels from the nvjpeg path's resize and normalisation (limit {args.dali_levels})")

    # 5. The loader itself, then its rate.
    loader = dali_loader.DaliBatches(args.sample, args.image_size, args.batch, rank=0, size=1, workers=4,
                                     device=device, channels_last=True, seed=1)
    classes = {c for _, c in files}
    batches = [next(loader) for _ in range(2)]
    ok = all(bx.shape == (args.batch, 3, args.image_size, args.image_size) and bx.dtype == torch.float32
             and bx.is_contiguous(memory_format=torch.channels_last) and bool(torch.isfinite(bx).all())
             and set(by.cpu().tolist()) <= classes and by.dtype == torch.int64 for bx, by in batches)
    report(ok, f"dali loader: 2 batches of {args.batch} at {args.image_size} px (random crops, flips): shapes, dtype, "
               f"channels-last, labels {'right' if ok else 'WRONG'}")
    rounds = 5
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(rounds):
        next(loader)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    print(f"rate: {rounds * args.batch / (time.perf_counter() - start):,.0f} img/s through the dali loader "
          f"({rounds} batches of {args.batch}, 4 threads) on {device.type}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # its reader (e.g. `| head`) stopped reading: end as a Unix tool ends on SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
