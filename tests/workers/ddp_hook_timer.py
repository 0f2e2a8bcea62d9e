"""Two Gloo ranks (spawned here) train the same small model three SGD steps twice, each rank on its own batch: under
DDP's own all-reduce, and under the layout worker's timing hook (CollectiveTimer.time_ddp). Prints, as JSON, each
rank's largest parameter difference between the two and its dp_replicate seconds: the hook must average as DDP does
and charge its time. With argv[2] == "broken", the hook sums without dividing (what a wrong hook would do).
Run as a script by tests/test_collective_timer.py."""
import os
import sys

import torch
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def train(rank: int, timer=None, broken: bool = False) -> list:
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    model = DDP(module, bucket_cap_mb=0.001)  # several buckets: their all-reduces overlap one another
    if timer is not None:
        timer.time_ddp(model, "dp_replicate")
        if broken:  # the hook's mean becomes a sum: its division by the world size divides by 1
            dist.get_world_size = lambda group=None: 1
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(100 + rank)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(8, 16, generator=data)).square().mean().backward()
        optimizer.step()
    return [p.detach().clone() for p in module.parameters()]


def rank_main(rank: int, port: int, broken: bool, queue) -> None:
    sys.path.insert(0, ROOT)
    from models.workloads.transformer.collective_timer import CollectiveTimer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    plain = train(rank)
    timer = CollectiveTimer(torch, {}, world="dp_replicate")
    hooked = train(rank, timer, broken)
    seconds = timer.take()
    diff = max(float((a - b).abs().max()) for a, b in zip(plain, hooked))
    queue.put({"rank": rank, "max_difference": diff, "seconds": seconds})
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    from tests.workers.two_ranks import run_two

    run_two(rank_main, int(sys.argv[1]), len(sys.argv) > 2 and sys.argv[2] == "broken")
