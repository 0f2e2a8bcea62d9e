"""Each engine that trains the transformer averages right: two ranks under a real launcher end their steps with the
parameters one process gets on their batches concatenated (AdamW, three steps, with and without gradient
accumulation). A run whose ranks average nothing ends elsewhere, so the comparison can fail."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.launch import LAUNCHERS, TORCHRUN, LaunchSpec
from bench.launch.runtimes import runtime_for
from tests.conftest import ROOT

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.launcher

WORKER = ROOT / "tests" / "workers" / "transformer_equivalence.py"
STEPS = 3


def launch(tmp_path: Path, engine: str, launcher: str, grad_accum: int = 1) -> dict:
    from bench.backends.shared.cell_launch import free_port

    out = tmp_path / "params.pt"
    env = {"OMP_NUM_THREADS": "1"}
    if launcher != "torchrun" and engine != "horovod":
        env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    # The flavour's own environment: MPICH and Intel MPI ranks run in the MPICH-ABI venv, its Horovod built for it.
    runtime = runtime_for(launcher, sys.executable) if launcher != "torchrun" else None
    python = runtime.python if runtime else sys.executable
    if not Path(python).exists():
        pytest.skip(f"no {launcher} environment at {python}: make install builds it (scripts/install.sh)")
    spec = LaunchSpec(workers=2, hosts=(("localhost", 2),),
                      program=(python, str(WORKER), str(out), engine, str(STEPS), str(grad_accum)),
                      env=env, as_root=os.geteuid() == 0)
    if launcher == "torchrun":
        rendered = TORCHRUN.render(spec, sys.executable)
    else:
        rendered = LAUNCHERS[launcher].render(spec, LAUNCHERS[launcher].tool_path(runtime))
    bins = ":".join((*(runtime.bin_dirs if runtime else ()), str(Path(sys.executable).parent)))
    env = {**os.environ, **(runtime.env if runtime else {}), **rendered.env, "PATH": f"{bins}:{os.environ['PATH']}"}
    result = subprocess.run(rendered.argv, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return torch.load(out)


def reference() -> dict:
    """One process, the whole global batch each step, no averaging."""
    sys.path.insert(0, str(WORKER.parent))
    import transformer_equivalence as eq

    from models.workloads.transformer import model as tfm
    from models.workloads.transformer.engines import wrap

    model = tfm.build(eq.SHAPE, seed=0)
    trainer = wrap(torch, model, "none", device=torch.device("cpu"), lr=1e-2)
    for batch in eq.global_batches(STEPS):
        trainer.step(batch.unsqueeze(0))
    return trainer.full_parameters()


# Each AdamW step moves a weight by up to lr = 1e-2; summing the gradients in another order moves the result by up to
# ~1e-5 (seen: 9e-6 after three steps). 1e-4, 1% of one step's move, tells rounding from a wrong average.
TOLERANCE = 1e-4


def differences(got: dict, want: dict) -> list[str]:
    assert got.keys() == want.keys()
    return [f"{name}: {(got[name] - want[name]).abs().max().item():.2g}" for name in want
            if not torch.allclose(got[name], want[name], rtol=0, atol=TOLERANCE)]


@pytest.mark.parametrize("engine,launcher,grad_accum", [
    ("native", "torchrun", 1),
    ("native", "openmpi", 2),
    ("fsdp2", "torchrun", 1),
    ("fsdp2", "torchrun", 2),
    ("horovod", "gloo", 1),
    ("horovod", "openmpi", 2),
    ("horovod", "mpich", 1),
    ("horovod", "intelmpi", 2),
])
def test_two_ranks_end_where_one_process_on_the_whole_batch_ends(tmp_path, engine, launcher, grad_accum):
    if engine == "horovod":
        pytest.importorskip("horovod.torch", reason="Horovod is built by make install (scripts/build_horovod.sh)")
    got = launch(tmp_path, engine, launcher, grad_accum)
    assert got["world"] == 2 and got["engine"] == engine
    assert differences(got["params"], reference()) == []


def test_ranks_that_do_not_average_are_caught(tmp_path):
    got = launch(tmp_path, "none", "torchrun")
    assert len(differences(got["params"], reference())) > 0
