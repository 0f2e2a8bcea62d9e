"""A collective (allreduce, allgather, reduce_scatter, broadcast, sendrecv or pipeline_p2p) over a sweep of message
sizes, through the engine a training cell of the same settings uses.

Horovod (`hvd.allreduce_`, `hvd.allgather`, `hvd.reducescatter` with op Sum, `hvd.broadcast_` from rank 0, under
whichever launcher and controller the cell's MPI flavour or Gloo gives it) or torch.distributed (`--engine native`:
`all_reduce`, `all_gather_single`, `reduce_scatter_tensor`, `broadcast` from rank 0; Gloo on CPU, NCCL on GPU).
reduce_scatter is FSDP's gradient step: each rank's input is the whole message, and it keeps its slice of the sum.
sendrecv is a pipeline's: each rank sends the message to the next rank and receives the previous one's (`irecv` then
`isend`, both posted before either is waited for; torch.distributed only, Horovod has no point-to-point calls).
pipeline_p2p is the same shift as torch.distributed.pipelining's schedules post it: one batch_isend_irecv, the send
first.
Float32 tensors from 4 KiB up to --max-bytes (default:
ResNet-50's fp32 gradients, 102,228,128 bytes), the sizes 4 KiB x 4^k below the largest, then the largest. A size
is nccl-tests' `bytes`: the message for allreduce and broadcast, the gathered output (n slices of bytes/n, one per
rank) for allgather, rounded down to whole float32 slices when n does not divide it (the row holds what was gathered).

Timing, per size: warm-up iterations, then --steps timed ones. Each iteration starts after a barrier (an allreduce of
one element, as the training window opens) and ends when this rank's allreduce has returned (and the device has
synchronised); the iteration's time is the slowest rank's, gathered after the sweep. Median, p10/p90, min and max
over the timed iterations.

Bandwidths use the definitions nccl-tests publishes (its doc/PERFORMANCE.md): algorithm bandwidth algbw = bytes /
time, and bus bandwidth busbw = algbw x factor, 2(n-1)/n for allreduce, (n-1)/n for allgather and reduce_scatter
(whose bytes are each rank's input), 1 for broadcast and sendrecv
(models/registry/collectives.py COLLECTIVES): the rate each link must carry in the ring algorithm, comparable with the
link's own rate whatever n is.

Horovod's tensor fusion (HOROVOD_FUSION_THRESHOLD: 128 MiB and a 1 ms HOROVOD_CYCLE_TIME by default since Horovod
0.21, its changelog, #2468) packs small tensors submitted together into
one buffer; here one tensor is in flight at a time, so fusion has nothing to pack, but every call still waits for
Horovod's background cycle (HOROVOD_CYCLE_TIME): that wait is part of the measured latency, as it is in training.
Both settings are recorded as the worker saw them.

Contention (allreduce on CPU workers; models/workloads/collectives/contention.py): in training the collective runs while
the same cores compute. Each rank times a probe kernel alone, beside the idling engine and beside an allreduce of the
largest size; the row of the largest size carries the slowest rank's ratios (probe rate / alone rate) and the
allreduce's time under that load. The rows of a few smaller sizes (models/workloads/collectives/contention.py,
CONTENDED_SIZES) carry the stretch and the rate during the allreduce too, with no idle rate. The largest size's row also
carries the probe's rate beside a replay of one training step's gradient stream (ResNet-50's 161 gradients submitted at
their ready points; slowest rank) and the stream's tail. GPU workers compute on the device: not measured there.

Correctness (models/workloads/collectives/payload.py): every rank's data follows a formula, and every iteration's result
(warm-up included) is checked against the formula on every rank that receives one (a broadcast's root holds only its
source; the other ranks' buffers are zeroed before each call so a broadcast that delivered nothing is caught); a wrong
value fails the cell naming the size and the first wrong element.
Imports nothing from the control plane.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))  # run from anywhere

from models.measure.common import Comm, import_horovod, local_rank_and_size_from_env, threads_for  # noqa: E402
from models.measure.fail import fail  # noqa: E402
from models.measure.faults import corrupt_sent  # noqa: E402
from models.measure.record import write_record  # noqa: E402
from models.registry.collectives import COLLECTIVES, RESNET50_GRADIENT_BYTES  # noqa: E402
from models.workloads.collectives.contention import Probe, contended_sizes, contention, replay  # noqa: E402
from models.workloads.collectives.payload import ROOT, check, expected, pattern  # noqa: E402

OPS = tuple(COLLECTIVES)
MIN_BYTES = 4096


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", choices=OPS, default="allreduce", help="the collective swept")
    p.add_argument("--engine", choices=("horovod", "native"), default="horovod")
    p.add_argument("--max-bytes", type=int, default=RESNET50_GRADIENT_BYTES, help="largest message (bytes)")
    p.add_argument("--warmup-steps", type=int, default=5, help="untimed iterations per size")
    p.add_argument("--steps", type=int, default=20, help="timed iterations per size")
    p.add_argument("--repeats", type=int, default=3, help="sweeps, one record each")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = cores / local workers")
    p.add_argument("--cell-id", default=None)
    p.add_argument("--run-id", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.max_bytes < MIN_BYTES or args.max_bytes % 4:
        fail(f"--max-bytes must be a multiple of 4 and at least {MIN_BYTES}, got {args.max_bytes}")
    for name in ("steps", "repeats"):
        if getattr(args, name) <= 0:
            fail(f"--{name} must be positive, got {getattr(args, name)}")
    if args.warmup_steps < 0:
        fail("--warmup-steps must be >= 0")
    return args


def sweep_sizes(max_bytes: int) -> list[int]:
    sizes, size = [], MIN_BYTES
    while size < max_bytes:
        sizes.append(size)
        size *= 4
    return [*sizes, max_bytes]


def op_sizes(op: str, max_bytes: int, world: int) -> list[int]:
    """The sweep's sizes as the op moves them: allgather's output (and reduce_scatter's input) is n whole float32
    slices (at least one element each), so a size n does not divide is rounded down to what is moved; sizes that
    round to the same one once."""
    if op not in ("allgather", "reduce_scatter"):
        return sweep_sizes(max_bytes)
    sizes = [4 * world * max(1, size // (4 * world)) for size in sweep_sizes(max_bytes)]
    return list(dict.fromkeys(sizes))


class Engine:
    """The collectives, the barrier and the object gather of whichever engine runs the cell."""

    def __init__(self, args, torch):
        self.torch = torch
        if args.engine == "native":
            from models.workloads import torch_native

            self.comm, local_rank, backend = torch_native.init(torch)
            import torch.distributed as dist

            self.dist, self.hvd, self.backend = dist, None, backend
            # all_gather_into_tensor's new name since torch 2.13 (the old one warns); same call, same semantics.
            self._gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            self.device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
            self._shutdown = torch_native.shutdown
            self._leave = torch_native.leave
        else:
            hvd = import_horovod("horovod.torch")  # stops with the reason under a launcher of several ranks
            if hvd is None:
                fail("the collective sweep needs Horovod (horovod.torch) for engine=horovod")
            hvd.init()
            self.hvd, self.dist, self.backend = hvd, None, "horovod"
            cuda = torch.cuda.is_available()
            self.device = torch.device("cuda", hvd.local_rank()) if cuda else torch.device("cpu")
            if cuda:
                torch.cuda.set_device(self.device)
            token = torch.zeros(1)
            self.comm = Comm(hvd.rank(), hvd.size(), hvd.local_size(),
                             barrier=lambda: hvd.allreduce(token, name="bench.barrier"),
                             allgather_object=hvd.allgather_object,
                             broadcast_object=lambda obj: hvd.broadcast_object(obj, root_rank=0))
            self._shutdown = hvd.shutdown
            self._leave = None

    def allreduce_(self, tensor, name: str) -> None:
        if self.hvd is not None:
            self.hvd.allreduce_(tensor, op=self.hvd.Sum, name=name)
        else:
            self.dist.all_reduce(tensor)
        self._sync()

    def allreduce_async_(self, tensor, name: str):
        """Starts an in-place sum; returns a function that says whether it has completed (and then finishes it)."""
        if self.hvd is not None:
            handle = self.hvd.allreduce_async_(tensor, op=self.hvd.Sum, name=name)

            def done() -> bool:
                if not self.hvd.poll(handle):
                    return False
                self.hvd.synchronize(handle)
                return True
            return done
        work = self.dist.all_reduce(tensor, async_op=True)
        return work.is_completed

    def allgather(self, out, mine, name: str):
        """Every rank's `mine`, concatenated in rank order; returns the tensor holding them (Horovod allocates its
        own output, torch.distributed fills `out`)."""
        if self.hvd is not None:
            out = self.hvd.allgather(mine, name=name)
        else:
            self._gather_single(out, mine)
        self._sync()
        return out

    def reduce_scatter(self, out, mine, name: str):
        """The sum over ranks of `mine`, this rank's slice of it (the rank-th of n equal ones): Horovod's
        reducescatter with op Sum (its default averages), or torch.distributed's reduce_scatter_tensor into `out`."""
        if self.hvd is not None:
            out = self.hvd.reducescatter(mine, op=self.hvd.Sum, name=name)
        else:
            self.dist.reduce_scatter_tensor(out, mine)
        self._sync()
        return out

    def broadcast_(self, tensor, name: str) -> None:
        if self.hvd is not None:
            self.hvd.broadcast_(tensor, root_rank=ROOT, name=name)
        else:
            self.dist.broadcast(tensor, src=ROOT)
        self._sync()

    def sendrecv(self, out, mine, name: str):
        """`mine` to the next rank, the previous rank's into `out` (a ring shift); returns `out`. One rank sends to
        nobody: its own data is what it would have received."""
        rank, world = self.comm.rank, self.comm.size
        if world == 1:
            out.copy_(mine)
        else:
            # Both posted before either wait (two blocking calls in the same order on every rank would deadlock), the
            # receive first: over Gloo's TCP, with every rank's send posted before its receive, 4-16 MiB reached 0.48
            # of a link shaped to 500 Mbit/s on the emulated nodes, with the receive first 0.95
            # (docs/lab/2026-12-06-sendrecv-shaped.md).
            received = self.dist.irecv(out, src=(rank - 1) % world)
            sent = self.dist.isend(mine, dst=(rank + 1) % world)
            received.wait()
            sent.wait()
        self._sync()
        return out

    def pipeline_p2p(self, out, mine, name: str):
        """sendrecv's ring shift as a pipeline schedule posts it: the send and the receive in one batch_isend_irecv,
        the send first, both waited (torch.distributed.pipelining's fused `fwd_sends + bwd_recvs`); returns `out`."""
        rank, world = self.comm.rank, self.comm.size
        if world == 1:
            out.copy_(mine)
        else:
            ops = [self.dist.P2POp(self.dist.isend, mine, (rank + 1) % world),
                   self.dist.P2POp(self.dist.irecv, out, (rank - 1) % world)]
            for work in self.dist.batch_isend_irecv(ops):
                work.wait()
        self._sync()
        return out

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def shutdown(self) -> None:
        self._shutdown()

    def leave(self, code: int) -> int:
        """Ends the worker: under the native engine straight to the kernel (torch_native.leave: Gloo's thread
        teardown can abort a finished process at exit), otherwise returns the code for sys.exit."""
        if self._leave is not None:
            self._leave(code)
        return code


def time_size(engine: Engine, torch, op: str, size: int, args) -> tuple[list[float], list[float]]:
    """This rank's timed iterations at one size: wall seconds, and the CPU seconds the engine's own threads spent
    meanwhile (the process's CPU time less this calling thread's, which only waits for the result: in training it
    computes instead), every result checked."""
    comm, device = engine.comm, engine.device
    n = size // 4  # the result's elements
    sent = n // comm.size if op == "allgather" else n
    base = pattern(torch, sent, comm.rank, device)
    corrupt_sent(base, size, comm.rank)  # a test hook (models/measure/faults.py): inert unless set
    want = expected(torch, op, n, comm.size, device, comm.rank)
    work = torch.empty_like(base)
    # torch.distributed gathers (or scatters the sum) into this; Horovod allocates its own output on every call.
    out_elems = {"allgather": n, "reduce_scatter": n // comm.size, "sendrecv": n, "pipeline_p2p": n}.get(op)
    out = torch.empty(out_elems, dtype=torch.float32, device=device) if out_elems and engine.hvd is None else None
    name = f"bench.{op}.{size}"
    times, cpu = [], []
    for i in range(args.warmup_steps + args.steps):
        if op == "broadcast" and comm.rank != ROOT:
            work.zero_()  # not the pattern: a broadcast that delivered nothing fails the check
        else:
            work.copy_(base)
        if out is not None:
            out.zero_()  # last iteration's gather must not pass for this one's
        comm.barrier()
        c0, t0 = time.process_time() - time.thread_time(), time.perf_counter()
        if op == "allreduce":
            engine.allreduce_(work, name=name)
            result = work
        elif op == "allgather":
            result = engine.allgather(out, work, name=name)
        elif op == "reduce_scatter":
            result = engine.reduce_scatter(out, work, name=name)
        elif op == "sendrecv":
            result = engine.sendrecv(out, work, name=name)
        elif op == "pipeline_p2p":
            result = engine.pipeline_p2p(out, work, name=name)
        else:
            engine.broadcast_(work, name=name)
            result = work
        elapsed, used = time.perf_counter() - t0, time.process_time() - time.thread_time() - c0
        if op != "broadcast" or comm.rank != ROOT:  # the root's buffer is the source: the receivers judge it
            check(result, want, op, size, comm.rank)
        if i >= args.warmup_steps:
            times.append(elapsed)
            cpu.append(used)
    return times, cpu


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def size_row(op: str, size: int, per_rank: list[list[float]], world: int,
             cpu_per_rank: list[list[float]] | None = None, contended: list[dict] | None = None,
             replayed: list[dict] | None = None) -> dict:
    """One size of the sweep: the slowest rank's time per iteration, and nccl-tests' bandwidths at the median; the
    busiest rank's engine CPU seconds per iteration, median (what the collective costs the cores beside the caller:
    an engine that polls while it waits spends about its wall time, one that sleeps far less). `contended`: each
    rank's contention() at this size; the row takes the slowest rank's (a step ends when the slowest rank's does)."""
    slowest = [max(ts) for ts in zip(*per_rank)]
    busiest = [max(cs) for cs in zip(*cpu_per_rank)] if cpu_per_rank else None
    median = statistics.median(slowest)
    algbw = size / median
    return {"op": op, "bytes": size, "iterations": len(slowest), "time_median_s": median,
            "time_p10_s": quantile(slowest, 0.1), "time_p90_s": quantile(slowest, 0.9),
            "time_min_s": min(slowest), "time_max_s": max(slowest),
            "algbw_bytes_per_s": algbw, "busbw_bytes_per_s": algbw * COLLECTIVES[op]["bus_factor"](world),
            "cpu_time_median_s": statistics.median(busiest) if busiest else None,
            "idle_compute_ratio": (min(c["idle"] for c in contended)
                                   if contended and None not in [c["idle"] for c in contended] else None),
            "contended_compute_ratio": min(c["during"] for c in contended) if contended else None,
            "contended_time_median_s": max(c["time"] for c in contended) if contended else None,
            "contended_stretch": max(c["stretch"] for c in contended) if contended else None,
            # Beside a replay of a step's gradient stream (the largest size's row carries it): each replay's slowest
            # rank's probe rate and latest end of the stream after the replayed backward pass, medians over replays
            # (a step waits for its slowest rank, whichever it is that step: the median of each rank's own rate
            # would miss the steps the other rank was the slower).
            "replay_compute_ratio": (statistics.median(min(rs) for rs in zip(*[r["rates"] for r in replayed]))
                                     if replayed else None),
            "replay_tail_s": (statistics.median(max(ts) for ts in zip(*[r["tails"] for r in replayed]))
                              if replayed else None)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.engine not in COLLECTIVES[args.op].get("engines", (args.engine,)):
        fail(f"{args.op} runs through engine {', '.join(COLLECTIVES[args.op]['engines'])} only "
             f"({COLLECTIVES[args.op]['engines_why']}), not {args.engine}")
    import torch

    # The probe's rate alone is taken before the engine starts: its background loop shares the cores from then on.
    measure_contention = args.op == "allreduce" and not torch.cuda.is_available()
    if measure_contention:
        torch.set_num_threads(threads_for(args, local_rank_and_size_from_env()[1]))
        probe = Probe(torch)
        alone = probe.rate()
    engine = Engine(args, torch)
    comm = engine.comm
    torch.set_num_threads(threads_for(args, comm.local_size))
    op = args.op
    sizes = op_sizes(op, args.max_bytes, comm.size)
    base = {"kind": "measurement", "cell_id": args.cell_id, "run_id": args.run_id, "status": "ok",
            "framework": "pytorch", "workload": op, "workload_version": COLLECTIVES[op]["version"],
            "engine": args.engine, "device": engine.device.type, "world_size": comm.size,
            "local_size": comm.local_size, "threads_per_worker": torch.get_num_threads(),
            "warmup_steps": args.warmup_steps, "measured_steps": args.steps}
    if comm.rank == 0:
        from models.probes.envprobe import probe_torch

        base["env_probe"] = {**probe_torch(engine.hvd),
                             "collective_backend": engine.backend,
                             **{k: os.environ[k] for k in ("HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME")
                                if k in os.environ}}
    host = socket.gethostname()
    for repeat in range(args.repeats):
        start = time.time()
        mine = {size: time_size(engine, torch, op, size, args) for size in sizes}
        contended = ({size: contention(engine, torch, probe, alone, size, args, idle=size == sizes[-1])
                      for size in contended_sizes(sizes)} if measure_contention else {})
        replayed = replay(engine, torch, probe, alone, args) if measure_contention and comm.size > 1 else None
        comm.barrier()
        end = time.time()
        gathered = comm.allgather_object({"host": host, "times": mine, "contended": contended, "replay": replayed})
        if comm.rank == 0:
            rows = [size_row(op, size, [g["times"][size][0] for g in gathered], comm.size,
                             [g["times"][size][1] for g in gathered],
                             [g["contended"][size] for g in gathered] if size in contended else None,
                             [g["replay"] for g in gathered] if size == sizes[-1] and replayed else None)
                    for size in sizes]
            write_record({**base, "repeat": repeat, "start_unix": start, "end_unix": end, "collective": rows},
                         args.out)
            top = rows[-1]
            print(f"bench worker: repeat {repeat}: {op} of {top['bytes']} bytes over {comm.size} workers: "
                  f"{top['time_median_s'] * 1e3:.2f} ms median, busbw {top['busbw_bytes_per_s'] / 1e9:.3f} GB/s",
                  flush=True)
    engine.shutdown()
    return engine.leave(0)


if __name__ == "__main__":
    sys.exit(main())
