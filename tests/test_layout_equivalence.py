"""Each parallel layout the transformer worker runs (models/workloads/transformer/layouts.py) trains right: its ranks
under torchrun (Gloo, CPU) end three AdamW steps with the parameters, gathered, that one process gets on the whole
global batch; and a layout broken on purpose (a tensor-parallel shard that mixes heads, a pipeline rank running the
other stage's blocks) ends elsewhere, so the comparison can fail."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.launch import TORCHRUN, LaunchSpec
from tests.conftest import ROOT

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.launcher

WORKER = ROOT / "tests" / "workers" / "layout_equivalence.py"
STEPS = 3


def launch(tmp_path: Path, layout: str, ranks: int, broken: str = "") -> dict:
    out = tmp_path / "params.pt"
    program = (sys.executable, str(WORKER), str(out), layout, str(STEPS), *((broken,) if broken else ()))
    spec = LaunchSpec(workers=ranks, hosts=(("localhost", ranks),), program=program, env={"OMP_NUM_THREADS": "1"},
                      as_root=os.geteuid() == 0)
    rendered = TORCHRUN.render(spec, sys.executable)
    bins = str(Path(sys.executable).parent)
    env = {**os.environ, **rendered.env, "PATH": f"{bins}:{os.environ['PATH']}"}
    # a pipeline schedule that hangs on Gloo fails here, not at the suite's timeout
    result = subprocess.run(rendered.argv, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return torch.load(out)


def reference(layout: str) -> dict:
    """One process, the whole global batch each step, no parallelism."""
    sys.path.insert(0, str(WORKER.parent))
    import layout_equivalence as le
    import transformer_equivalence as eq

    from models.workloads.transformer import model as tfm
    from models.workloads.transformer.engines import wrap
    from models.workloads.transformer.mesh_layout import read_layout

    model = tfm.build(le.shape_for(read_layout(layout)), seed=0)
    trainer = wrap(torch, model, "none", device=torch.device("cpu"), lr=1e-2)
    for batch in eq.global_batches(STEPS):
        trainer.step(batch.unsqueeze(0))
    return trainer.full_parameters()


# As tests/test_transformer_engines.py: AdamW moves a weight by up to lr = 1e-2 a step; summing in another order moves
# the result by ~1e-5 (seen here: 2.3e-5 at most, tensor parallel's reduce-scatters). 1e-4 tells rounding from a
# wrong layout, which ends ~0.06 away.
TOLERANCE = 1e-4


def differences(got: dict, want: dict) -> list[str]:
    assert got.keys() == want.keys()
    return [f"{name}: {(got[name] - want[name]).abs().max().item():.2g}" for name in want
            if not torch.allclose(got[name], want[name], rtol=0, atol=TOLERANCE)]


@pytest.mark.parametrize("layout,ranks", [
    ("tp=2", 2),
    ("pp=2,schedule=gpipe,m=2", 2),
    ("pp=2,schedule=1f1b,m=4", 2),
    ("pp=2,schedule=interleaved,v=2,m=4", 2),
    ("dp_replicate=2,dp_shard=2", 4),  # HSDP
    ("dp_shard=2,tp=2", 4),  # FSDP2 × TP
    ("pp=2,tp=2,schedule=1f1b,m=2", 4),  # PP × TP
])
def test_the_ranks_end_where_one_process_on_the_whole_batch_ends(tmp_path, layout, ranks):
    got = launch(tmp_path, layout, ranks)
    assert got["world"] == ranks and got["layout"] == layout
    assert differences(got["params"], reference(layout)) == []


@pytest.mark.parametrize("layout,ranks,broken", [
    ("tp=2", 2, "tp-rows"),
    ("pp=2,schedule=1f1b,m=4", 2, "pp-swap"),
])
def test_a_broken_layout_is_caught(tmp_path, layout, ranks, broken):
    got = launch(tmp_path, layout, ranks, broken)
    wrong = differences(got["params"], reference(layout))
    assert len(wrong) > 0
