#!/usr/bin/env python3
"""The `nvjpeg` loader with the real torchvision decoder, against Pillow, on a JPEG tree; run with a Python that has
torch, torchvision, Pillow and numpy (the GPU machine's venv after the kit's install; `.venv-gpu-kit` here).

On a GPU this is the session's pre-flight for real-data cells (its data phase runs it): nvJPEG decodes, and the
loader's batches equal the Pillow-decoded ones but for the decoders' differences. On a CPU (`--device cpu`) it runs
the same code with torchvision's CPU decoder (libjpeg-turbo), which proves the torchvision calls themselves - the
batched `decode_jpeg(list, mode=RGB, device=...)` and its fallbacks - against the real library: the CPU test suite
cannot import torchvision beside its pinned CPU torch, so it stands Pillow in for the decoder (tests/test_gpu_loader.py).

Checks, each one line, exit 1 when any fails:
1. decode: the first --images files, decoded in one batched call, have Pillow's shapes, and differ from Pillow's
   pixels by under --decode-levels on average per image (nvJPEG's IDCT and chroma upsampling are not libjpeg's; the
   CPU decoder is libjpeg-turbo, as Pillow's);
2. loader: two batches of the loader (models/data/gpu_jpeg.py) with the real decoder equal, in labels, shapes, memory
   format and layout, those of the same loader and seed with Pillow as the decoder, and their pixels differ by under
   --loader-levels on average (the crop, resize and normalisation are shared; only the decoder differs);
3. rate: the batched decode's images/s on this device (reported, not judged: the cells measure the loader).
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sample", required=True, help="a JPEG tree (train/<class>/*.JPEG), e.g. the session's sample")
    p.add_argument("--device", default="auto", help="cuda, cpu, or auto (cuda when there is one)")
    p.add_argument("--images", type=int, default=64, help="images decoded for check 1 and the rate")
    p.add_argument("--batch", type=int, default=32, help="the loader's batch size for check 2")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--decode-levels", type=float, default=1.0, help="0-255 levels per image, on average")
    p.add_argument("--loader-levels", type=float, default=1.0, help="0-255 levels, on average")
    args = p.parse_args(argv)

    import torch

    try:
        import torchvision
    except ImportError as e:  # e.g. no torchvision built for this torch: the real-data cells fall back to Pillow
        print(f"FAIL torchvision does not import beside torch {torch.__version__}: {e}")
        return 1

    from models.data import gpu_jpeg
    from models.data.imagenet_torch import STD
    from models.data.layout import list_jpeg_tree

    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU"
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, device {device} ({where})")
    files, _ = list_jpeg_tree(args.sample)
    if len(files) < max(args.images, 2 * args.batch):
        print(f"FAIL {args.sample} has {len(files)} JPEGs; the checks need {max(args.images, 2 * args.batch)}")
        return 1
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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
