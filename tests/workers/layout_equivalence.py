"""Run under torchrun: the ranks train a fixed global batch for a few steps under one parallel layout
(models/workloads/transformer/layouts.py builds it), then rank 0 saves every parameter gathered in full
(tests/test_layout_equivalence.py compares them with one process trained on the whole batch).

    layout_equivalence.py OUT LAYOUT STEPS [BREAK]

BREAK makes the layout wrong on purpose, the test's proof that a broken layout is caught:
- `tp-rows`: the fused q/k/v and gate/up rows are not reordered, so a rank's column shard mixes heads and halves;
- `pp-swap`: each pipeline rank runs the other stage's blocks (a mis-assigned stage).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from models.workloads import torch_native  # noqa: E402
from models.workloads.transformer import layouts  # noqa: E402
from models.workloads.transformer import mesh_layout  # noqa: E402
from models.workloads.transformer import model as tfm  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from transformer_equivalence import SHAPE, global_batches  # noqa: E402

GLOBAL_BATCH = 4


def shape_for(layout) -> "object":
    """The test shape, with as many layers as the pipeline has stages when that is more than its two."""
    import dataclasses

    return dataclasses.replace(SHAPE, layers=max(SHAPE.layers, layout.pp * layout.v))


def broken(kind: str) -> None:
    if kind == "tp-rows":
        layouts.fused_row_orders = lambda torch, shape, tp: {}  # build looks it up in layouts
    elif kind == "pp-swap":
        original = layouts.Stage.__new__

        def swapped(cls, torch, decoder, first, last, *, is_first, is_last):
            n = len(decoder.blocks)
            return original(cls, torch, decoder, n - last, n - first, is_first=is_first, is_last=is_last)

        layouts.Stage.__new__ = swapped
    elif kind:
        raise SystemExit(f"unknown BREAK {kind!r}")


def main() -> int:
    out, text, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    broken(sys.argv[4] if len(sys.argv) > 4 else "")
    torch.set_num_threads(1)
    comm, _, _ = torch_native.init(torch)
    layout = mesh_layout.read_layout(text)
    shape = shape_for(layout)
    trainer = layouts.build(torch, shape, layout, device=torch.device("cpu"),
                            decoder_factory=lambda: tfm.build(shape, seed=0), grad_accum=1, lr=1e-2,
                            optimizer_impl="default")
    coords = layouts.replica_of(trainer)
    per_replica = GLOBAL_BATCH // layout.dp
    for batch in global_batches(steps):
        mine = batch[coords * per_replica:(coords + 1) * per_replica]
        trainer.step(mine.unsqueeze(0))
    params = trainer.full_parameters()
    if comm.rank == 0:
        torch.save({"params": params, "world": comm.size, "layout": text}, out)
    if trainer.timer:
        trainer.timer.close()
    torch_native.shutdown()
    torch_native.leave(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
