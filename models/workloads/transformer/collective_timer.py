"""The timers around a layout step's collectives: `CollectiveTimer` charges each collective call (and its Work's
wait, `_TimedWork`) to the mesh dimension whose process group it ran on, DTensor's functional collectives included;
DDP's bucketed all-reduces, which its C++ reducer launches, through a communication hook (`time_ddp`)."""
from __future__ import annotations

import contextlib
import time


class CollectiveTimer:
    """Seconds each mesh dimension spent in collectives, from timers around them: the process groups' collective
    calls (FSDP2's all-gathers and reduce-scatters, the pipeline's sends and receives, the tied-weight all-reduce) and
    DTensor's functional collectives with their waits, each charged to the dimension whose group it ran on."""

    # FSDP2 in torch 2.13 gathers and reduce-scatters through all_gather_single and reduce_scatter_single
    # (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py); not isend/irecv: P2POp checks them by identity.
    WRAPPED = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_gather_single",
               "reduce_scatter_single", "all_gather", "batch_isend_irecv", "send", "recv", "broadcast")
    FUNCTIONAL = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "wait_tensor")

    def __init__(self, torch, dims_by_group: dict[str, str], world: str = "world"):
        self.torch, self.by_group = torch, dims_by_group  # group name → mesh dimension
        self.world = world  # what a call on no named group is charged to (a 1-D layout: its one dimension)
        self.seconds: dict[str, float] = {}
        self._undo: list = []
        self._pending: dict[int, str] = {}
        self._flights: list[tuple[str, float, float]] = []  # DDP's all-reduces: (dimension, launched, completed)

    def dimension(self, group) -> str:
        if group is None:
            return self.world
        name = getattr(group, "group_name", None) or str(group)
        return self.by_group.get(name, self.world)

    def add(self, dim: str, seconds: float) -> None:
        self.seconds[dim] = self.seconds.get(dim, 0.0) + seconds

    def install(self) -> "CollectiveTimer":
        import torch.distributed as dist

        for name in self.WRAPPED:
            original = getattr(dist, name, None)
            if original is None:
                continue
            self._undo.append((dist, name, original))
            setattr(dist, name, self._timed(original, name))
        return self

    def _timed(self, original, name):
        timer = self

        def timed(*args, **kwargs):
            group = kwargs.get("group")
            if group is None and name == "batch_isend_irecv" and args and args[0]:
                group = getattr(args[0][0], "group", None)
            t0 = time.perf_counter()
            work = original(*args, **kwargs)
            dim = timer.dimension(group)
            timer.add(dim, time.perf_counter() - t0)
            return _TimedWork(work, timer, dim) if work is not None and not isinstance(work, list) else (
                [_TimedWork(w, timer, dim) for w in work] if isinstance(work, list) else work)

        return timed

    @contextlib.contextmanager
    def functional(self):
        """DTensor's functional collectives (tensor parallel), timed from issue to their wait."""
        from torch.utils._python_dispatch import TorchDispatchMode

        timer = self

        class Watch(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                op = func.__name__.split(".")[0]
                if op not in timer.FUNCTIONAL:
                    return func(*args, **(kwargs or {}))
                t0 = time.perf_counter()
                out = func(*args, **(kwargs or {}))
                if op == "wait_tensor":
                    dim = timer._pending.pop(id(args[0]), "tp")
                else:
                    dim = timer.by_group.get(str(args[-1]), "tp")
                    timer._pending[id(out)] = dim
                timer.add(dim, time.perf_counter() - t0)
                return out

        with Watch():
            yield

    def time_ddp(self, model, dim: str) -> None:
        """DDP's gradient all-reduces, which its C++ reducer launches bucket by bucket as the backward pass frees
        them, where no wrapped call sees them: a communication hook launches each bucket's all-reduce as DDP's
        default does (the gradients' mean over the ranks) and notes it from launch to completion. The dimension is
        charged the time while any of them is in flight (the union over the buckets: they overlap the backward
        pass and one another), so it is time the ranks' traffic took, not time a thread waited."""
        import torch.distributed as dist

        launch = dist.distributed_c10d.all_reduce  # not the wrapped one: the launch is inside the interval
        flights = self._flights

        def hook(group, bucket):
            t0 = time.perf_counter()
            tensor = bucket.buffer().div_(dist.get_world_size(group))
            future = launch(tensor, group=group, async_op=True).get_future()

            def done(f):
                flights.append((dim, t0, time.perf_counter()))  # runs before DDP's wait on this future returns
                return f.value()[0]

            return future.then(done)

        model.register_comm_hook(None, hook)

    def take(self) -> dict[str, float]:
        flights = list(self._flights)
        self._flights.clear()  # the same list: the DDP hook appends to it
        spans: dict[str, list[tuple[float, float]]] = {}
        for dim, start, end in flights:
            spans.setdefault(dim, []).append((start, end))
        for dim, intervals in spans.items():
            self.add(dim, covered(intervals))
        out, self.seconds = self.seconds, {}
        return out

    def close(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo = []


def covered(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


class _TimedWork:
    """A collective's Work whose wait() is timed too."""

    def __init__(self, work, timer: CollectiveTimer, dim: str):
        self._work, self._timer, self._dim = work, timer, dim

    def wait(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            self._timer.add(self._dim, time.perf_counter() - t0)

    def __getattr__(self, name):
        return getattr(self._work, name)
