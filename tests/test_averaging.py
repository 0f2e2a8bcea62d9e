"""Gradient averaging, proved numerically for each framework under each controller with real processes."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.launch import LAUNCHERS, LaunchSpec
from bench.launch.runtimes import runtime_for
from tests.conftest import ROOT

pytestmark = pytest.mark.launcher

WORKERS = {"pytorch": ("average.py",), "tensorflow": ("average_tf.py",), "keras": ("average_keras.py",),
           "keras-fp16": ("average_keras.py", "fp16")}


@pytest.mark.parametrize("framework", sorted(WORKERS))
@pytest.mark.parametrize("flavour,controller", [("gloo", "gloo"), ("openmpi", "mpi")])
def test_two_ranks_end_with_the_averaged_weights(tmp_path, framework, flavour, controller):
    out = tmp_path / "weights.txt"
    worker, *extra = WORKERS[framework]
    spec = LaunchSpec(workers=2, hosts=(("localhost", 2),),
                      program=(sys.executable, str(ROOT / "tests" / "workers" / worker), str(out), *extra),
                      env={"OMP_NUM_THREADS": "1"}, as_root=os.geteuid() == 0)
    launcher = LAUNCHERS[flavour]
    rendered = launcher.render(spec, launcher.tool_path(runtime_for(flavour, sys.executable)))
    env = {**os.environ, **rendered.env, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    result = subprocess.run(rendered.argv, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    rows = sorted(line.split() for line in out.read_text().splitlines())
    assert [r[0] for r in rows] == ["0", "1"]
    assert {r[2] for r in rows} == {controller}
    # mean of gradients 1 and 2 is 1.5; a sum would be 3, no reduction 1 or 2.
    assert [float(r[1]) for r in rows] == [-1.5, -1.5]


@pytest.mark.parametrize("launcher", ["torchrun", "openmpi"])
def test_native_engine_ends_with_the_averaged_weights(tmp_path, launcher):
    from bench.backends.shared.cell_launch import free_port as _free_port
    from bench.launch import TORCHRUN

    out = tmp_path / "weights.txt"
    worker = ROOT / "tests" / "workers" / "average_native.py"
    env = {"OMP_NUM_THREADS": "1"}
    if launcher == "openmpi":
        env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    spec = LaunchSpec(workers=2, hosts=(("localhost", 2),), program=(sys.executable, str(worker), str(out)),
                      env=env, as_root=os.geteuid() == 0)
    rendered = TORCHRUN.render(spec, sys.executable) if launcher == "torchrun" else \
        LAUNCHERS["openmpi"].render(spec, LAUNCHERS["openmpi"].tool_path(runtime_for("openmpi", sys.executable)))
    result = subprocess.run(rendered.argv, env={**os.environ, **rendered.env}, capture_output=True, text=True,
                            timeout=180)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    rows = sorted(line.split() for line in out.read_text().splitlines())
    assert [r[0] for r in rows] == ["0", "1"]
    assert {r[2] for r in rows} == {"torchrun" if launcher == "torchrun" else "mpi"}
    assert [float(r[1]) for r in rows] == [-1.5, -1.5]
