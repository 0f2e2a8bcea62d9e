"""Run under a real launcher: each rank trains its slice of a fixed global batch for a few steps with one engine of
models/workloads/transformer/engines.py, then rank 0 saves every parameter in full (tests/test_transformer_engines.py
compares them with one process trained on the whole batch).

    transformer_equivalence.py OUT ENGINE STEPS GRAD_ACCUM

ENGINE `none` joins the ranks through the process group but averages nothing: the test's proof that a broken
averaging is caught.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from models.workloads.transformer import model as tfm  # noqa: E402
from models.workloads.transformer.engines import wrap  # noqa: E402
from models.workloads.transformer.shapes import Shape  # noqa: E402

SHAPE = Shape("llama", layers=2, width=32, heads=4, kv_heads=2, ffn=64, vocab=97, seq=16, tied=True)
GLOBAL_BATCH = 4  # sequences per step, over all ranks


def global_batches(steps: int) -> torch.Tensor:
    """(steps, GLOBAL_BATCH, seq + 1): the same on every rank and in the reference."""
    seeded = torch.Generator().manual_seed(7)
    return torch.randint(0, SHAPE.vocab, (steps, GLOBAL_BATCH, SHAPE.seq + 1), generator=seeded)


def rank_windows(batch: torch.Tensor, rank: int, world: int, grad_accum: int) -> torch.Tensor:
    per_rank = GLOBAL_BATCH // world
    mine = batch[rank * per_rank:(rank + 1) * per_rank]
    return mine.view(grad_accum, per_rank // grad_accum, SHAPE.seq + 1)


def main() -> int:
    out, engine, steps, grad_accum = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(1)
    hvd = None
    if engine == "horovod":
        import horovod.torch as hvd

        hvd.init()
        rank, world = hvd.rank(), hvd.size()
    else:
        from models.workloads import torch_native

        comm, _, _ = torch_native.init(torch)
        rank, world = comm.rank, comm.size
    model = tfm.build(SHAPE, seed=0)
    trainer = wrap(torch, model, engine, hvd=hvd, device=torch.device("cpu"), grad_accum=grad_accum, lr=1e-2,
                   world_size=world)
    for batch in global_batches(steps):
        trainer.step(rank_windows(batch, rank, world, grad_accum))
    params = trainer.full_parameters()
    if rank == 0:
        torch.save({"params": params, "world": world, "engine": trainer.engine}, out)
    if hvd is not None:
        hvd.shutdown()
    else:
        torch_native.shutdown()
        # Past Gloo's exit-time teardown, which can abort a finished rank on a loaded machine ("terminate called
        # without an active exception", seen here in this test): the parameters are saved already.
        torch_native.leave(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
