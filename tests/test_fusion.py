"""Horovod's tensor fusion over one ResNet-50 step (bench/analysis/fusion.py): the architecture's gradients, the loop's
cycle and threshold, and the settings read from a record's environment and Horovod version."""
import re

import pytest

from bench.analysis import fusion as f
from bench.analysis.whatif import RESNET50_PARAMS


def test_the_gradients_are_resnet50s_161_tensors_in_backward_order():
    grads = f.resnet50_gradients(224)
    assert len(grads) == 161 and sum(g.params for g in grads) == RESNET50_PARAMS
    assert [g.name for g in grads[:4]] == ["fc.bias", "fc.weight", "layer4.2.conv3.bn.bias", "layer4.2.conv3.bn.weight"]
    assert grads[-1].name == "conv1.weight" and grads[-1].ready_fraction == pytest.approx(1.0)
    ready = [g.ready_fraction for g in grads]
    assert ready == sorted(ready) and 0 < ready[0] < 0.01
    # The multiply-accumulates per image are ResNet-50's ~4.1 G at 224 px and scale with the pixels.
    macs = sum(m for *_, m in f.resnet50_layers(224))
    assert 4.0e9 < macs < 4.2e9
    assert sum(m for *_, m in f.resnet50_layers(112)) == pytest.approx(macs / 4, rel=0.1)  # odd sizes round up


def test_fusion_takes_tensors_in_order_up_to_the_threshold_and_zero_disables_it():
    assert f.fuse([10, 20, 30, 100, 5], 60) == [[10, 20, 30], [100], [5]]
    assert f.fuse([10, 20, 30], 0) == [[10], [20], [30]]


def test_a_cycle_fuses_what_is_ready_and_operations_run_one_after_another():
    grads = [f.Gradient("a", 10, 0.0), f.Gradient("b", 10, 0.0), f.Gradient("c", 10, 0.5), f.Gradient("d", 10, 1.0)]
    s = f.simulate(grads, 1.0, lambda n: 0.01 + n / 1000, cycle_s=0.1, threshold_bytes=1 << 20, bytes_per_param=1)
    assert [(op.tensors, op.nbytes) for op in s.operations] == [(2, 20), (1, 10), (1, 10)]
    assert [op.start_s for op in s.operations] == pytest.approx([0.0, 0.5, 1.0])
    assert s.after_backward == 1 and s.tail_s == pytest.approx(0.02) and s.busy_s == pytest.approx(0.07)
    # A slow link: what becomes ready while an operation runs goes into the next one.
    slow = f.simulate(grads, 1.0, lambda n: 0.6, cycle_s=0.1, threshold_bytes=1 << 20, bytes_per_param=1)
    assert [op.tensors for op in slow.operations] == [2, 1, 1] and slow.tail_s == pytest.approx(0.8)


def test_a_longer_cycle_or_no_fusion_changes_the_operation_count_as_horovod_would():
    grads = f.resnet50_gradients(64)
    link = lambda n: 1e-3 + n / 1e9  # noqa: E731
    default = f.simulate(grads, 0.7, link)
    assert default.count < 161 and default.count == f.simulate(grads, 0.7, link, cycle_s=1e-4).count
    assert f.simulate(grads, 0.7, link, threshold_bytes=0).count == 161
    assert f.simulate(grads, 0.7, link, cycle_s=0.05).count < default.count / 2
    with pytest.raises(ValueError):
        f.simulate(grads, 0.0, link)


def _documented_runs(script: str, timeout: int):
    """Every `python benchmarks/<script> …` line of docs/scaling-model.md, run as written with this Python from the
    repository root: (the doc's text, each finished run, all checked to exit 0)."""
    import shlex
    import subprocess
    import sys

    from tests.conftest import ROOT

    doc = (ROOT / "docs" / "scaling-model.md").read_text()
    lines = re.findall(rf"^\s*python (benchmarks/{re.escape(script)} .+)$", doc, flags=re.M)
    assert lines, f"the docs show a {script} line"
    runs = []
    for line in lines:
        out = subprocess.run([sys.executable, *shlex.split(line)], cwd=ROOT, capture_output=True, text=True,
                             timeout=timeout)
        assert out.returncode == 0, out.stderr
        runs.append(out)
    return doc, runs


def test_the_documented_fusion_ops_lines_run_and_print_what_the_docs_quote():
    """docs/scaling-model.md's `python benchmarks/fusion_ops.py …` line, run as written (with this Python)."""
    doc, runs = _documented_runs("fusion_ops.py", timeout=120)
    for out in runs:
        count = re.match(r"(\d+) operations a step", out.stdout).group(1)
        assert f"gives {count} operations a step" in doc, out.stdout


def test_on_free_cores_the_shared_loop_is_the_plain_one():
    """Compute at its own pace beside every operation (rates 1): the backward pass takes its own time, whatever the
    operations, and the loop is the plain one (simulate is defined as this case, so the exact operation times of the
    plain loop are pinned by test_a_cycle_fuses_what_is_ready_and_operations_run_one_after_another)."""
    grads = f.resnet50_gradients(64)
    link = lambda n: 2e-3 + n / 1.5e8  # noqa: E731
    plain = f.simulate(grads, 1.07, link)
    shared = f.simulate_shared(grads, 1.07, lambda n: (link(n), 1.0), link, idle_rate=1.0)
    assert [(o.nbytes, o.tensors) for o in shared.operations] == [(o.nbytes, o.tensors) for o in plain.operations]
    assert [o.end_s for o in shared.operations] == pytest.approx([o.end_s for o in plain.operations])
    assert shared.backward_s == pytest.approx(1.07) and shared.tail_s == pytest.approx(plain.tail_s)


def test_shared_cores_slow_the_backward_pass_while_operations_run_and_the_tail_runs_alone():
    grads = [f.Gradient("a", 10, 0.0), f.Gradient("b", 10, 1.0)]
    # One operation of 0.4 s at the start, compute at half pace meanwhile, at 0.8 otherwise: 0.2 of the 1.0 s of
    # backward is done beside it, the other 0.8 takes 1.0 s; the last gradient's operation runs alone after.
    s = f.simulate_shared(grads, 1.0, lambda n: (0.4, 0.5), lambda n: 0.05, idle_rate=0.8, cycle_s=1e-3,
                          bytes_per_param=1)
    assert s.backward_s == pytest.approx(0.4 + 0.8 / 0.8)
    assert [o.start_s for o in s.operations] == pytest.approx([0.0, 1.4])
    assert s.tail_s == pytest.approx(0.05) and s.after_backward == 1
    # The backward pass ends 0.1 s into a 0.4 s operation: the other three quarters run at the operation's time alone.
    late = f.simulate_shared([f.Gradient("a", 10, 0.9), f.Gradient("b", 10, 1.0)], 1.0, lambda n: (0.4, 1.0),
                             lambda n: 0.2, idle_rate=1.0, cycle_s=1e-3, bytes_per_param=1)
    first = late.operations[0]
    assert first.end_s - first.start_s == pytest.approx(0.1 + 0.75 * 0.2)
    with pytest.raises(ValueError):
        f.simulate_shared(grads, 1.0, lambda n: (0.4, 0.5), lambda n: 0.05, idle_rate=0.0)


@pytest.mark.slow
def test_the_documented_gradient_ready_line_runs_and_names_every_stage():
    """docs/scaling-model.md's `python benchmarks/gradient_ready.py …` line, run as written: every stage's measured
    and modelled ready share, both operation counts; every one of the model's 161 parameters is matched to a
    gradient of the model the cells train (models/workloads/resnet50/model_torch.py), or the script exits 1."""
    _, runs = _documented_runs("gradient_ready.py", timeout=300)
    for out in runs:
        shares = dict(re.findall(r"^  (\w+): (\d\.\d+ / \d\.\d+)$", out.stdout, flags=re.M))
        assert list(shares) == ["fc", "layer4", "layer3", "layer2", "layer1", "conv1"], out.stdout
        assert shares["conv1"].endswith("/ 1.000")  # the first layer's weight is the backward pass's last gradient
        assert re.search(r"^measured ready times: \d+ operations", out.stdout, flags=re.M), out.stdout
        assert re.search(r"^multiply-accumulate model: \d+ operations", out.stdout, flags=re.M), out.stdout


def test_gradient_ready_maps_every_parameter_of_the_trained_model():
    from benchmarks.gradient_ready import model_name
    from models.workloads.resnet50.model_torch import ResNet50

    names = [model_name(n) for n, _ in ResNet50().named_parameters()]
    assert sorted(names) == sorted(g.name for g in f.resnet50_gradients(64)) and len(set(names)) == 161


def test_gradient_ready_refuses_a_non_positive_figure_in_one_line_and_exit_2():
    import subprocess
    import sys

    from tests.conftest import ROOT

    out = subprocess.run([sys.executable, "benchmarks/gradient_ready.py", "--threads", "0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == "gradient_ready: --threads must be positive, got 0\n"
