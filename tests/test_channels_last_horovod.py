"""Channels-last parameters (the GPU layout) under Horovod's DistributedOptimizer, with real processes on CPU:
gradients averaged right and layouts kept (tests/workers/average_channels_last.py)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.launch import LAUNCHERS, LaunchSpec
from bench.launch.runtimes import runtime_for
from tests.conftest import ROOT

pytestmark = pytest.mark.launcher


def two_ranks(worker: str, out: Path, timeout: float) -> list[dict]:
    """tests/workers/`worker` on 2 Horovod ranks under Gloo; each rank's JSON line from `out`, in rank order."""
    spec = LaunchSpec(workers=2, hosts=(("localhost", 2),),
                      program=(sys.executable, str(ROOT / "tests" / "workers" / worker), str(out)),
                      env={"OMP_NUM_THREADS": "1"}, as_root=os.geteuid() == 0)
    launcher = LAUNCHERS["gloo"]
    rendered = launcher.render(spec, launcher.tool_path(runtime_for("gloo", sys.executable)))
    env = {**os.environ, **rendered.env, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    result = subprocess.run(rendered.argv, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    ranks = sorted((json.loads(line) for line in out.read_text().splitlines()), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1]
    return ranks


def test_channels_last_gradients_are_the_ranks_mean_and_keep_their_layout(tmp_path):
    ranks = two_ranks("average_channels_last.py", tmp_path / "result.jsonl", timeout=180)
    for r in ranks:
        assert r["max_grad_spread"] > 1e-4  # the ranks' own gradients differed, so averaging had work to do
        assert r["max_grad_error"] < 1e-6, r
        assert r["conv_grads_channels_last"], r
        assert r["params_equal_across_ranks"], r
        assert r["conv_params_channels_last"], r


def test_worker_model_params_grads_and_momentum_share_strides_for_fused_sgd(tmp_path):
    """models/workloads/resnet50/pytorch_worker.py's build_model, channels-last, 2 Horovod ranks: what CUDA's fused
    SGD requires."""
    ranks = two_ranks("fused_sgd_strides.py", tmp_path / "strides.jsonl", timeout=240)
    for r in ranks:
        assert r["params"] == 161, r  # ResNet-50's parameter tensors
        assert r["conv_channels_last"], r
        assert r["n_mismatched"] == 0, r
