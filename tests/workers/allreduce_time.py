"""Times a large allreduce across the ranks: the link speed check of the emulated cluster (docs/backends.md).

Usage: allreduce_time.py horovod|native MEGABYTES ITERATIONS
One untimed allreduce first (connections, buffers), then ITERATIONS timed ones, each between barriers so the slowest
rank bounds it; only rank 0's own clock is read. Rank 0 prints one line per iteration and a summary with the median:
algbw = bytes / time, busbw = algbw * 2(n-1)/n (the bytes each rank's link really carries in a ring allreduce).
Every rank prints `host <rank> <hostname>` so the caller can check where the ranks ran.
"""
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

engine, megabytes, iterations = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
if engine not in ("horovod", "native") or not 0 < megabytes <= 1024 or not 1 <= iterations <= 20:
    sys.exit("usage: allreduce_time.py horovod|native MEGABYTES(<=1024) ITERATIONS(1-20)")
data = torch.ones(int(megabytes * 1e6) // 4, dtype=torch.float32)

if engine == "horovod":
    import horovod.torch as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    token = torch.zeros(1)

    def barrier():
        hvd.allreduce(token, name="barrier")

    def allreduce(i):
        return hvd.allreduce(data, name=f"data{i}", op=hvd.Sum)
else:
    import torch.distributed as dist

    from models.workloads import torch_native

    comm, _, _ = torch_native.init(torch)
    rank, size = comm.rank, comm.size
    barrier = comm.barrier

    def allreduce(i):
        out = data.clone()
        dist.all_reduce(out)
        return out

print(f"host {rank} {socket.gethostname()}", flush=True)
out = allreduce(-1)
assert float(out[0]) == size, f"allreduce sum is {float(out[0])}, expected {size}"
times = []
for i in range(iterations):
    barrier()
    start = time.perf_counter()
    allreduce(i)
    barrier()
    times.append(time.perf_counter() - start)
    if rank == 0:
        print(f"iteration {i} {times[-1]:.4f} s", flush=True)
if rank == 0:
    median = statistics.median(times)
    algbw = data.numel() * 4 / median / 1e9
    busbw = algbw * 2 * (size - 1) / size
    print(f"allreduce {engine} ranks={size} bytes={data.numel() * 4} median_s={median:.4f} "
          f"algbw_GBps={algbw:.3f} busbw_GBps={busbw:.3f} busbw_Gbitps={busbw * 8:.2f}", flush=True)
if engine == "horovod":
    hvd.shutdown()
else:
    torch_native.shutdown()
