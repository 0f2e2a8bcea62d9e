"""ImageNet JPEG tree decoded on the GPU: nvJPEG through torchvision.io.decode_jpeg, augmentation in torch.

    host     this rank's shard (files[rank::size], as the Pillow path), reshuffled each epoch from `seed`, read as
             raw bytes by a thread pool (no decoding), whole batches queued ahead (`ByteReader`)
    device   one thread: batched decode (`decode_nvjpeg`), then per image the Pillow path's random-resized-crop box
             and flip draws (models/data/augment.py, the same sequence of draws from the same kind of generator),
             crop + antialiased bilinear resize, then batched: stack, flip, ImageNet mean/std, memory format
             (`crop_resize_flip_normalise`). On CUDA it runs on its own stream, so the next batch is decoded while
             the current one trains; the consumer's stream waits on an event.

Everything after decoding is plain torch and runs on any device; torchvision is imported only inside
`decode_nvjpeg` (the CPU venv has none: tests stand Pillow in for the decoder). A file that cannot be read or
decoded is skipped and counted, and more than 1% bad is an error, as in the Pillow path.
"""
from __future__ import annotations

import atexit
import queue
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

from models.data.augment import random_resized_crop_box
from models.data.imagenet_torch import MEAN, STD
from models.data.layout import DataError, list_jpeg_tree, too_many_bad

_POLL_S = 0.1  # how often blocked queue operations look at the stop flag


# --- host side: which files, in which order, as bytes -----------------------------------------------------------
def shard_files(files: Sequence[tuple[str, int]], rank: int, size: int) -> list[tuple[str, int]]:
    """This rank's share: every size-th file from the rank's offset (what the Pillow path takes)."""
    return list(files[rank::size])


def epoch_order(n: int, seed: int, rank: int, epoch: int) -> list[int]:
    """A permutation of range(n) for this epoch: the same for the same (seed, rank, epoch), new each epoch."""
    order = list(range(n))
    random.Random(f"bench-order:{seed}:{rank}:{epoch}").shuffle(order)
    return order


def batch_plan(n: int, batch_size: int, seed: int, rank: int) -> Iterator[tuple[int, list[int]]]:
    """Endless (epoch, indices) batches; each epoch covers every index at most once and drops the short tail
    (the Pillow path's drop_last). Raises ValueError at once when n cannot fill one batch."""
    if batch_size <= 0 or n < batch_size:
        raise ValueError(f"{n} items cannot fill a batch of {batch_size}")
    return _batches(n, batch_size, seed, rank)


def _batches(n: int, batch_size: int, seed: int, rank: int) -> Iterator[tuple[int, list[int]]]:
    epoch = 0
    while True:
        order = epoch_order(n, seed, rank, epoch)
        for start in range(0, n - batch_size + 1, batch_size):
            yield epoch, order[start:start + batch_size]
        epoch += 1


def augment_seed(seed: int, rank: int) -> str:
    """Seed of the crop/flip generator of (seed, rank): `random.Random(augment_seed(...))`."""
    return f"bench-augment:{seed}:{rank}"


def read_bytes(path: str) -> bytes | None:
    """The file's exact bytes, or None when it cannot be read (counted as a bad image)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def bytes_tensor(data: bytes) -> torch.Tensor:
    """1-D uint8 CPU tensor over a copy of `data` (what decode_jpeg takes)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


@dataclass
class RawBatch:
    epoch: int
    datas: list[torch.Tensor | None]  # None: the file could not be read (or was empty)
    labels: list[int]
    paths: list[str]


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


class _Stage:
    """A daemon thread filling a bounded queue; errors travel through the queue to the consumer."""

    def __init__(self, name: str, depth: int):
        self.queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def produce(self):  # pragma: no cover - overridden
        raise NotImplementedError

    def _run(self) -> None:
        try:
            for item in self.produce():
                if not self._put(item):
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which raises it
            self._put(_Failed(e))

    def _put(self, item) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def get(self):
        while True:
            try:
                item = self.queue.get(timeout=_POLL_S)
            except queue.Empty:
                if not self.thread.is_alive() and self.queue.empty():
                    raise RuntimeError(f"{self.thread.name} stopped") from None
                continue
            if isinstance(item, _Failed):
                raise item.error
            return item

    def close(self) -> None:
        self.stop.set()
        self.join()

    def join(self) -> None:
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=5)


class ByteReader(_Stage):
    """This shard's files as batches of raw bytes, `prefetch` batches ahead, read by `threads` threads."""

    def __init__(self, files: Sequence[tuple[str, int]], batch_size: int, seed: int, rank: int, threads: int,
                 prefetch: int = 4):
        super().__init__("bench-jpeg-read", prefetch)
        self.files, self.batch_size, self.seed, self.rank = list(files), batch_size, seed, rank
        self.threads = max(1, threads)
        self.plan = batch_plan(len(self.files), batch_size, seed, rank)  # ValueError now if the shard is too small

    def produce(self):
        with ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="bench-jpeg-read") as pool:
            for epoch, indices in self.plan:
                if self.stop.is_set():
                    return
                paths = [self.files[i][0] for i in indices]
                datas = [bytes_tensor(d) if d else None for d in pool.map(read_bytes, paths)]
                yield RawBatch(epoch, datas, [self.files[i][1] for i in indices], paths)

    def __next__(self) -> RawBatch:
        return self.get()


# --- device side: decode, then augment ------------------------------------------------------------------------------
def decode_nvjpeg(datas: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
    """Decodes JPEG bytes to uint8 RGB (3, H, W) tensors on `device` with nvJPEG, the whole list in one call.

    torchvision returns nothing when one image of a batch fails, so a failed batch is decoded again one image at a
    time: nvJPEG, then the CPU decoder (which also reads what nvJPEG refuses, e.g. CMYK JPEGs or a PNG named .JPEG),
    and None for what neither can read."""
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg

    if not datas:
        return []
    try:
        return list(decode_jpeg(datas, mode=ImageReadMode.RGB, device=device))
    except RuntimeError:
        pass
    out: list[torch.Tensor | None] = []
    for data in datas:
        try:
            out.append(decode_jpeg(data, mode=ImageReadMode.RGB, device=device))
            continue
        except RuntimeError:
            pass
        try:
            out.append(decode_image(data, mode=ImageReadMode.RGB).to(device))
        except RuntimeError:
            out.append(None)
    return out


def decode_pillow(datas: list[torch.Tensor]) -> list[torch.Tensor | None]:
    """decode_nvjpeg's contract with Pillow on the CPU: JPEG bytes -> uint8 RGB (3, H, W) tensors, None for what does
    not decode. The reference nvJPEG is checked against (scripts/gpu_loader_check.py, tests/test_gpu_loader.py)."""
    import io

    import numpy as np
    from PIL import Image

    out: list[torch.Tensor | None] = []
    for data in datas:
        try:
            with Image.open(io.BytesIO(data.numpy().tobytes())) as img:
                out.append(torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1).contiguous())
        except OSError:
            out.append(None)
    return out


@dataclass(frozen=True)
class CropFlip:
    box: tuple[int, int, int, int]  # (left, top, right, bottom), as random_resized_crop_box gives it
    flip: bool


def draw_crop_flips(shapes: Sequence[tuple[int, int]], rng: random.Random) -> list[CropFlip]:
    """For images of (height, width), the draws the Pillow path makes (augment.train_transform), in its order:
    the crop box, then the flip, image after image."""
    out = []
    for height, width in shapes:
        box = random_resized_crop_box(width, height, rng)
        out.append(CropFlip(box, rng.random() < 0.5))
    return out


def crop_resize_flip_normalise(images: Sequence[torch.Tensor], params: Sequence[CropFlip], image_size: int,
                               channels_last: bool, mean: torch.Tensor | None = None,
                               std: torch.Tensor | None = None) -> torch.Tensor:
    """uint8 (3, H, W) images, one crop/flip each -> float32 (N, 3, S, S), normalised, in the memory format asked.

    Crop then resize with bilinear antialiasing (Pillow's BILINEAR filter when shrinking), rounded to whole levels
    as Pillow's 8-bit output is; Pillow resizes the box in place and so samples a pixel or two beyond the box edge,
    which crop-then-resize cannot: the outer rows and columns may differ by a few levels."""
    if len(images) != len(params):
        raise ValueError(f"{len(images)} images but {len(params)} crop/flip draws")
    device = images[0].device
    if mean is None:
        mean = torch.as_tensor(MEAN, device=device).view(1, 3, 1, 1)
    if std is None:
        std = torch.as_tensor(STD, device=device).view(1, 3, 1, 1)
    resized = []
    for img, p in zip(images, params):
        left, top, right, bottom = p.box
        crop = img[None, :, top:bottom, left:right].float()
        resized.append(F.interpolate(crop, size=(image_size, image_size), mode="bilinear", align_corners=False,
                                     antialias=True))
    x = torch.cat(resized).round_().clamp_(0, 255)
    flips = torch.tensor([p.flip for p in params], dtype=torch.bool).to(device, non_blocking=True)
    x = torch.where(flips.view(-1, 1, 1, 1), x.flip(-1), x)
    x = (x - mean) / std
    return x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


# --- the loader -----------------------------------------------------------------------------------------------------
@dataclass
class Prepared:
    images: torch.Tensor | None  # None: every image of the batch was bad
    labels: torch.Tensor | None
    read: int  # images the batch was drawn from
    bad: int
    event: object = None  # torch.cuda.Event on CUDA: the batch is ready when it has fired


Decoder = Callable[[list[torch.Tensor]], list["torch.Tensor | None"]]


class _DeviceStage(_Stage):
    """Decode and augment, one batch ahead of the consumer, on its own CUDA stream where there is one."""

    def __init__(self, owner: "GpuJpegBatches", depth: int):
        super().__init__("bench-jpeg-device", depth)
        self.owner = owner

    def produce(self):
        o = self.owner
        if o.device.type == "cuda":
            with torch.cuda.device(o.device), torch.cuda.stream(o.stream):
                while not self.stop.is_set():
                    yield o.prepare(next(o.reader))
        else:
            while not self.stop.is_set():
                yield o.prepare(next(o.reader))


class GpuJpegBatches:
    """Endless batches from this rank's shard, decoded on the device; `next()` returns (images, labels) there:
    float32 (N, 3, S, S) normalised images in the memory format asked, int64 labels, as imagenet_torch.Batches."""

    kind = "nvjpeg"

    def __init__(self, root: str, image_size: int, batch_size: int, rank: int, size: int, workers: int,
                 device: torch.device | str, channels_last: bool, seed: int = 0, decode: Decoder | None = None,
                 prefetch: int = 4):
        files, _ = list_jpeg_tree(root)
        shard = shard_files(files, rank, size)
        if len(shard) < batch_size:
            raise DataError(f"rank {rank}'s shard has {len(shard)} images, fewer than one batch of {batch_size}")
        self.device = torch.device(device)
        self.image_size, self.channels_last = image_size, channels_last
        self.decode: Decoder = decode or (lambda datas: decode_nvjpeg(datas, self.device))
        self.rng = random.Random(augment_seed(seed, rank))
        self.mean = torch.as_tensor(MEAN, device=self.device).view(1, 3, 1, 1)
        self.std = torch.as_tensor(STD, device=self.device).view(1, 3, 1, 1)
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self.workers = max(1, workers)  # reader threads
        self.seen = self.bad = 0
        self.reader = ByteReader(shard, batch_size, seed, rank, self.workers, prefetch)
        self.stage = _DeviceStage(self, depth=1)
        self.reader.start()
        self.stage.start()
        atexit.register(self.close)  # stop the threads before CUDA is torn down at exit

    def prepare(self, raw: RawBatch) -> Prepared:
        """Decode and augment one batch of bytes (on the device stage's thread and stream)."""
        readable = [i for i, d in enumerate(raw.datas) if d is not None]
        decoded = self.decode([raw.datas[i] for i in readable]) if readable else []
        keep = [(i, img) for i, img in zip(readable, decoded) if img is not None]
        bad = len(raw.datas) - len(keep)
        if not keep:
            return Prepared(None, None, len(raw.datas), bad)
        images = [img for _, img in keep]
        params = draw_crop_flips([tuple(img.shape[-2:]) for img in images], self.rng)
        x = crop_resize_flip_normalise(images, params, self.image_size, self.channels_last, self.mean, self.std)
        y = torch.tensor([raw.labels[i] for i, _ in keep], dtype=torch.int64).to(self.device, non_blocking=True)
        event = None
        if self.stream is not None:
            event = torch.cuda.Event()
            event.record(self.stream)
        return Prepared(x, y, len(raw.datas), bad, event)

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            batch: Prepared = self.stage.get()
            self.seen += batch.read
            self.bad += batch.bad
            if too_many_bad(self.bad, self.seen):
                raise DataError(f"{self.bad} of {self.seen} images could not be decoded (over 1%)")
            if batch.images is None:
                continue
            if batch.event is not None:  # the consumer's stream waits for the device stage's work, and owns it
                current = torch.cuda.current_stream(self.device)
                current.wait_event(batch.event)
                batch.images.record_stream(current)
                batch.labels.record_stream(current)
            return batch.images, batch.labels

    def close(self) -> None:
        """Stops the reader and device threads (also at exit)."""
        self.stage.stop.set()
        self.reader.stop.set()
        self.stage.join()
        self.reader.join()
        atexit.unregister(self.close)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
