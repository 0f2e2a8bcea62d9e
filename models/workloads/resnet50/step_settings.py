"""The PyTorch worker's step settings (docs/gpu.md, "Step settings"): the SGD kernel, torch.compile, CUDA graphs and
the JPEG loader of a real-data cell.

Every choice is made here from plain facts, so each branch runs in a unit test on a machine with no GPU
(tests/test_step_settings.py); the worker (models/workloads/resnet50/pytorch_worker.py) passes torch in and makes the
CUDA calls. Imports no framework and nothing from bench.

What CUDA graphs can capture depends on who averages the gradients:

- Horovod (`engine: horovod`): its DistributedOptimizer hands each gradient to Horovod's background thread as the
  backward pass makes it, and that thread runs the allreduce (NCCL on a stream Horovod owns) and tells the Python
  side when it is done: none of it can be recorded in a graph of this thread's stream. So the model's forward and
  backward are captured (torch.cuda.make_graphed_callables: one graph each, replayed inside autograd), and the loss,
  the allreduce and the optimizer step stay outside, eager. The gradients come out of the backward graph all at
  once, so the allreduce no longer overlaps the backward pass.
- PyTorch DDP (`engine: native`) and a single process without an engine: DDP's allreduce runs on this thread's
  NCCL stream, which a graph can hold (PyTorch's CUDA-graphs notes: DDP built on a side stream, 11 eager warm-up
  iterations first, NCCL's async error handling off), so the whole step is captured: forward, loss, backward with
  its allreduce, and the SGD update, replayed as one graph on static input tensors that each batch is copied into.
- AMP fp16 under any engine: the GradScaler reads whether a gradient overflowed on the host every step (and skips
  the update when one did), a host synchronisation no graph can hold; forward and backward are captured, as under
  Horovod. bf16 and fp32 need no scaler.

Batches of another shape than the one captured (a real-data batch that lost undecodable images) run eagerly.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

# optimizer_impl → the torch.optim.SGD kernel it runs. `default` is the workload's own choice: the fused kernel (one
# pass for momentum and weight decay), which the PyTorch worker used before the setting existed.
SGD_KERNELS = {"default": "fused", "fused": "fused", "foreach": "foreach"}
DDP_GRAPH_WARMUP = 11  # PyTorch's notes: DDP needs 11 eager iterations before a capture that includes it
GRAPH_WARMUP = 3  # torch.cuda.make_graphed_callables' default


class LoaderError(RuntimeError):
    """The JPEG loader asked for is not in this worker's tree; the worker refuses with its text."""


def sgd_kernel(optimizer_impl: str) -> str:
    """The SGD kernel `optimizer_impl` runs (what the record says): fused or foreach."""
    return SGD_KERNELS[optimizer_impl]


def sgd_options(optimizer_impl: str) -> dict[str, bool]:
    """torch.optim.SGD's keyword for the kernel."""
    return {sgd_kernel(optimizer_impl): True}


def compiled(torch, model, mode: str):
    """The model under torch.compile in `mode`, or the model itself for `off`."""
    return model if mode == "off" else torch.compile(model, mode=mode)


def graph_scope(requested: bool, cuda: bool, engine: str, grad_scaler: bool) -> str | None:
    """What of the step CUDA graphs capture (the module docstring says why): None (no capture: not asked, or no GPU),
    "fwd+bwd" or "step". `engine`: horovod, native (DDP) or none (a single process without Horovod)."""
    if not requested or not cuda:
        return None
    if engine == "horovod" or grad_scaler:
        return "fwd+bwd"
    return "step"


def graph_warmup(engine: str) -> int:
    """Eager steps a whole-step capture runs first (on a side stream)."""
    return DDP_GRAPH_WARMUP if engine == "native" else GRAPH_WARMUP


class StaticBatch:
    """The input tensors a captured graph reads: copies of a sample batch (same shape, dtype, device and memory
    format), refilled in place by each step's batch, since a graph replays on the addresses it was captured with."""

    def __init__(self, sample: Sequence[Any]):
        self.tensors = tuple(t.clone() for t in sample)  # clone keeps the memory format (channels-last strides)

    def fits(self, batch: Sequence[Any]) -> bool:
        return len(batch) == len(self.tensors) and all(
            b.shape == s.shape and b.dtype == s.dtype for b, s in zip(batch, self.tensors))

    def load(self, batch: Sequence[Any]) -> tuple:
        for static, new in zip(self.tensors, batch):
            if static.data_ptr() != new.data_ptr():
                static.copy_(new, non_blocking=True)
        return self.tensors


def by_shape(shape: tuple[int, ...], graphed: Callable, eager: Callable) -> Callable:
    """A forward that replays the graph for inputs of the captured shape and runs eagerly otherwise."""
    def forward(x, *rest):
        return (graphed if tuple(x.shape) == shape else eager)(x, *rest)

    return forward


def graph_forward_backward(torch, module, sample_x, autocast: Callable[[], Any] = contextlib.nullcontext) -> None:
    """Replaces `module.forward` by CUDA graphs of its forward and backward (torch.cuda.make_graphed_callables) for
    inputs shaped like `sample_x`. Under `autocast`, which must not cache casts (make_graphed_callables refuses)."""
    eager = module.forward
    with autocast():
        torch.cuda.make_graphed_callables(module, (sample_x,))
    module.forward = by_shape(tuple(sample_x.shape), module.forward, eager)


def on_side_stream(torch, make: Callable[[], Any]) -> Any:
    """`make()` on a fresh CUDA stream that waits for the current one, and the current stream then waits for it: what
    a whole-step capture holding DDP needs DDP to be built on (PyTorch's CUDA-graphs notes)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        made = make()
    torch.cuda.current_stream().wait_stream(side)
    return made


def graph_whole_step(torch, body: Callable[[Any], Any], zero_grad: Callable[[], None], static: StaticBatch,
                     warmup: int) -> Callable[[], Any]:
    """Captures `body` (forward, loss, backward, update; returns the loss) on `static`'s tensors in one CUDA graph,
    after `warmup` eager steps on a side stream; returns the replay, which returns the loss tensor the graph writes."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            zero_grad()
            body(static.tensors)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    zero_grad()  # to None: the capture allocates the gradients in its own pool and each replay writes them afresh
    with torch.cuda.graph(graph):
        loss = body(static.tensors)

    def replay():
        graph.replay()
        return loss

    return replay


def whole_step(replay: Callable[[], Any], eager_step: Callable[[Any], Any],
               static: StaticBatch) -> Callable[[Any], Any]:
    """The step of a whole-step capture: a batch of the captured shape is copied into the static tensors (captured
    from the default batch, so None needs no copy) and the graph replays; any other batch runs the eager step."""
    def train_step(batch=None):
        if batch is None:  # the default (synthetic) batch: the static tensors hold a copy of it already
            return replay()
        if not static.fits(batch):
            return eager_step(batch)
        static.load(batch)
        return replay()

    return train_step


# --- the JPEG loader of a real-data cell ------------------------------------------------------------------------------
def gpu_loaders():
    """models.data.loaders (the GPU JPEG decoders and the resolution of `auto`) when this tree has it, else None."""
    try:
        from models.data import loaders
    except ModuleNotFoundError as e:
        if e.name != "models.data.loaders":
            raise  # the module is there and something it imports is not: that is its own error
        return None
    return loaders


def resolve_loader(requested: str, device_type: str, loaders: Any = None) -> str:
    """The loader a real-data cell runs: `loaders.resolve_loader`'s answer where the GPU loaders exist (auto: DALI if
    importable, else nvJPEG, on a GPU; Pillow on a CPU), else Pillow, the one decoder this tree then has."""
    if loaders is not None:
        return loaders.resolve_loader(requested, device_type)
    if requested in ("auto", "pil"):
        return "pil"
    raise LoaderError(f"loader={requested}: this worker has no GPU JPEG decoders (models/data/loaders.py is missing)")
