"""Two Gloo ranks (spawned here) take one FSDP2 step of a 2-layer model under the layout worker's CollectiveTimer and
print, as JSON, each rank's seconds per mesh dimension: FSDP2's gathers and reduce-scatters must land on dp_shard.
Run as a script by tests/test_collective_timer.py."""
import os
import sys

import torch
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rank_main(rank: int, port: int, queue) -> None:
    sys.path.insert(0, ROOT)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from models.workloads.transformer.collective_timer import CollectiveTimer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp_shard",))
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    timer = CollectiveTimer(torch, {mesh.get_group("dp_shard").group_name: "dp_shard"}).install()
    model(torch.randn(4, 8)).sum().backward()
    queue.put({"rank": rank, "seconds": dict(timer.seconds)})
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    from tests.workers.two_ranks import run_two

    run_two(rank_main, int(sys.argv[1]))
