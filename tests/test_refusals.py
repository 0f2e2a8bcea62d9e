"""What a worker refuses, the plan refuses.

Every place the worker code (models/) gives up is found here by reading the source, and must be one of:
- a workload rule declared in models/registry/rules.py (WORKLOAD_RULES): the worker refuses with its text and the plan
  skips the cell with the same text, so it is never launched;
- a bound the matrix's validation enforces (the matrix is rejected, with the file and line);
- a hardware rule of the catalogue (the plan skips the cell);
- about something no cell setting decides (the data set's contents, the launcher, the measurement itself).
A new refusal that is none of these fails `test_every_refusal_in_the_worker_code_is_declared` until it is.
"""
from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from bench.backends.local.backend import LocalBackend
from bench.core.errors import BenchInputError
from bench.planning.matrix import load_matrix_text
from bench.planning.plan import plan_cells
from models.measure import allocator
from models.measure.common import parse_args
from models.registry.rules import WORKLOAD_RULES, workload_refusal
from models.registry.workloads import WORKLOADS
from tests.conftest import ROOT

RULES = "the workload rules of models/registry/rules.py (tests below walk each one)"


def _plan_skips(axes: str, words: str):
    return ("plan", axes, words)


def _matrix_rejects(*workloads: str):
    return ("matrix", workloads)


def _no_setting(why: str):
    return ("elsewhere", why)


# Each refusal in models/, by the source text of its message (not its file: modules move, messages stay).
REFUSALS = {
    # The declared rules.
    "refusal": ("rules", RULES),
    # Bounds the matrix's schema enforces (bench/planning/matrix.py): such a matrix never plans.
    "f\"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}\"":
        _matrix_rejects("batch_per_gpu: 0", "image_size: 0", "steps: 0", "repeats: 0"),
    "f'--{name} must be positive, got {getattr(args, name)}'": _matrix_rejects("steps: 0", "repeats: 0"),
    "'--warmup-steps must be >= 0'": _matrix_rejects("warmup_steps: -1"),
    # The worker reads a layout's text form itself (models/ never imports bench/); the matrix checks it with
    # bench/layouts' parser first.
    "f'layout {text!r}: unknown key {key!r}'": _matrix_rejects("layout: 'tp=2,colour=red'"),
    "f'--max-bytes must be a multiple of 4 and at least {MIN_BYTES}, got {args.max_bytes}'":
        _matrix_rejects("max_message_bytes: 4094", "max_message_bytes: 4098"),
    # The collective's engines (models/registry/collectives.py): the plan skips a sendrecv cell under Horovod.
    "f\"{args.op} runs through engine {', '.join(COLLECTIVES[args.op]['engines'])} only "
    "({COLLECTIVES[args.op]['engines_why']}), not {args.engine}\"":
        _plan_skips("{gpu: [cpu], model: [sendrecv], mpi: [gloo], engine: [horovod]}",
                    "Horovod has no point-to-point send and receive"),
    # The catalogue's hardware rule: bf16 needs a GPU of compute capability 8.0 or newer.
    "f'bf16 is not supported on {device_name}'":
        _plan_skips("{gpu: [V100], precision: [bf16]}", "bf16 on V100"),
    # Not decided by a setting.
    "'--data imagenet needs --data-dir'": _no_setting("the backend passes the data set it found when planning"),
    "f'dataset directory {args.data_dir} does not exist'":
        _no_setting("where the data set is: the backends' reach rules check it before planning a real-data cell"),
    "f\"{FAULT_VAR}: unknown fault kind {kind!r} (known: {', '.join(cls.KINDS)})\"":
        _no_setting("fault injection, set by tests only"),
    "f'{FAULT_VAR}: slow needs 0 < frac < 1, got {frac:g}'":
        _no_setting("fault injection, set by tests and benchmarks/ab_power.py only"),
    "f'bench fault injection: raised at step {self.step}' + (f': {say}' if say else '')":
        _no_setting("fault injection, set by tests only"),
    "'the collective sweep needs Horovod (horovod.torch) for engine=horovod'":
        _no_setting("what is installed on the node (`bench doctor` reports it)"),
    "f'{module} cannot be imported in the environment {sys.prefix}: its Horovod was built without this binding, or "
    "does not load; `make run` builds it (scripts/install.sh). ImportError: {why}'":
        _no_setting("what the environment's Horovod build has: the local and hosts backends' plan skips a pair its "
                    "environment lacks (bench/launch/bindings.py), tests/test_bindings.py"),
    "f'{op} of {size} bytes returned a wrong value on rank {rank}: element {i} is {float(result[i])}, "
    "expected {float(want[i])}'": _no_setting("a wrong result of a collective: the measurement itself failed"),
    "f'allreduce of replayed gradient {gradients[i].name} ({t.numel() * 4} bytes) returned a wrong value on rank "
    "{comm.rank}: expected {comm.size} everywhere'":
        _no_setting("a wrong result of a replayed gradient's reduction: the measurement itself failed"),
    "'the input pipeline ran dry (every image undecodable?)'": _no_setting("the data set's contents"),
    "f\"unknown phase {phase!r} (known: {', '.join(PHASES)})\"":
        _no_setting("a worker's own mark of a step phase (models/measure/phases.py): a programming error, "
                    "no cell setting"),
    "str(e)": _no_setting("relays a DataError or a GpuPlanError, each classified where it is raised"),
    "f'local rank {local_rank} has no GPU: this node shows {device_count} (one worker per GPU; fewer workers per "
    "node, or check CUDA_VISIBLE_DEVICES)'":
        _no_setting("the GPUs a node shows against the workers the launcher puts on it"),
    "f\"rank {rank}'s shard has {count} images, fewer than one batch of {batch_size}\"":
        _no_setting("the data set's size"),
    # Guards of pure GPU arithmetic (models/gpu/power.py, models/gpu/cuda_timing.py): the worker always passes timed,
    # non-empty windows and its own readings; these fire only on a programming error.
    "f'need the same steps timed both ways, got {len(wall_s)} wall and {len(event_s)} event times'":
        _no_setting("a programming error: the loop times every step both ways"),
    "'step times must be positive'": _no_setting("a programming error: a timed step takes time"),
    "\"no rank's check\"": _no_setting("a programming error: every rank reports a window"),
    "f'no readings bracket t={t}'": _no_setting("internal: window_energy checks the bracketing first"),
    "f'empty window [{t0}, {t1}]'": _no_setting("a programming error: the meter's window has a duration"),
    "f'images must be positive, got {images}'": _no_setting("a programming error: an ok window has samples"),
    "f\"rank {rank}'s shard has {len(shard)} images, fewer than one batch of {batch_size}\"":
        _no_setting("the data set's size"),
    "f'unknown data layout {layout!r} (jpeg or tfrecord)'":
        _no_setting("unreachable from a cell: the matrix and the worker's flags allow jpeg and tfrecord only"),
    "f'{self.bad} of {self.consumed} images could not be decoded (over 1%)'": _no_setting("the data set's contents"),
    "f'{self.bad} of {self.seen} images could not be decoded (over 1%)'": _no_setting("the data set's contents"),
    "f'no TFRecord shards (train-*) under {folder}'": _no_setting("the data set's contents"),
    "f'{len(shards)} TFRecord shards cannot be split across {size} ranks'":
        _no_setting("the data set's shard count against the cell's workers: known only where the data set is"),
    "f'no ImageNet JPEG tree at {root} (expected {root}/train/<wnid>/*.JPEG)'": _no_setting("the data set's contents"),
    "f'no JPEG files under {train}'": _no_setting("the data set's contents"),
    "'window was never opened and closed'": _no_setting("the measurement itself"),
    "'no rank reported'": _no_setting("the measurement itself"),
    "f'empty measured window ({samples} samples)'": _no_setting("the measurement itself"),
    "f'measured window has no duration ({window_s!r} s)'": _no_setting("the measurement itself"),
    "f\"the native engine needs one of {', '.join(names)} from its launcher (torchrun, mpirun)\"":
        _no_setting("the launcher's environment, which bench renders"),
    "'the native engine needs MASTER_PORT from its launcher'": _no_setting("the launcher's environment"),
    "f'loader={requested}: this worker has no GPU JPEG decoders (models/data/loaders.py is missing)'":
        _no_setting("what the worker's tree holds (models/workloads/resnet50/step_settings.py: a tree without "
                    "models/data/loaders.py)"),
    # The loaders (models/data/loaders.py): the `loader` key's values are the matrix's, a GPU loader on a CPU cell is
    # a workload rule (models/registry/rules.py, "loader=... needs a GPU"); what is installed is the node's.
    'f"unknown loader {requested!r} (one of: {\', \'.join(LOADERS)})"': _matrix_rejects("loader: fast"),
    'f"loader {requested} decodes on a GPU; this worker\'s device is {device_type}"':
        _plan_skips("{gpu: [cpu], data: [imagenet], loader: [nvjpeg]}", "loader=nvjpeg needs a GPU"),
    "'loader dali: NVIDIA DALI is not installed (pip install nvidia-dali-cuda130, or loader nvjpeg / auto)'":
        _no_setting("what the node has installed (auto picks what is there)"),
    "'loader nvjpeg: torchvision does not import here (it decodes with torchvision.io.decode_jpeg)'":
        _no_setting("what the node has installed (auto picks what is there)"),
    "f'DALI pipeline failed: {str(e).strip().splitlines()[0]}'": _no_setting("the data set's contents"),
    "f'{n} items cannot fill a batch of {batch_size}'":
        _no_setting("the data set's size against the batch: known only where the data set is"),
    "f'{len(images)} images but {len(params)} crop/flip draws'": _no_setting("an internal check of the loader"),
    "f'{self.thread.name} stopped'": _no_setting("an internal check of the loader's threads"),
    # models/workloads/resnet50/flops.py is run by hand and by the tests to write bench/data/model_flops.yaml; no cell
    # runs it.
    'f"no model {model_name!r} (known: {\', \'.join(MODELS)})"':
        _no_setting("models/workloads/resnet50/flops.py's own command line"),
    "f'{total} FLOPs do not split evenly over {BATCH} images'": _no_setting("an internal check of the FLOP count"),
    "'; '.join(problems)": _no_setting("models/workloads/resnet50/flops.py --check: the table against a fresh count"),
    # The transformer workload (models/workloads/transformer/pytorch_worker.py, `why_not`): its setting rules are the
    # registry's (the plan's), and fp16 on a CPU, which the catalogue's hardware rule skips in its own words ("fp16 on
    # cpu").
    "why_not": ("rules", RULES),
    "'--warmup-steps and --seq-len must be >= 0'": _no_setting("the transformer script's own flags"),
    "'--data tokens needs --tokens-file'": _no_setting("the transformer script's own flags"),
    "why": _no_setting("the token file's size and id width (models/data/tokens.py): the data set's contents"),
    "f'{path}: {len(self.tokens)} tokens, fewer than one window of {seq + 1}'": _no_setting("the data set's size"),
    "f\"token id {int(windows.max())} is outside the model's vocabulary of {self.vocab}\"":
        _no_setting("the data set's contents against the model's vocabulary"),
    "f'engine={args.engine}: {e}'": _no_setting("the launcher's environment (relays the native engine's)"),
    "f\"transformer shape: {'; '.join(problems)}\"":
        _no_setting("a transformer shape's numbers (models/workloads/transformer/shapes.py)"),
    "f\"transformer shape: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})\"":
        _no_setting("a transformer shape's keys"),
    "f\"transformer shape: missing {', '.join(missing)}\"": _no_setting("a transformer shape's keys"),
    "f\"unknown transformer {name!r} (known: {', '.join(CONFIGS)}, or a shape id such as "
    "{shape_id(CONFIGS['tiny'])})\"":
        _no_setting("the transformer's name"),
    # A workload registered from outside bench/ (BENCH_WORKLOADS): the registration itself, before any cell.
    "f\"{PLUGIN_VAR}: {module_name}'s workload {model!r} lacks {', '.join(missing)}\"":
        _no_setting("a registered workload's declaration (tests/test_registered_workload.py)"),
    "f\"{PLUGIN_VAR}: {module_name}'s workload {model!r} takes a name bench already uses\"":
        _no_setting("a registered workload's declaration"),
}


def refusal_sites() -> dict[str, list[str]]:
    """message source -> ["file:line", ...]: every `fail(...)`, `parser.error(...)`, `sys.exit(<non-zero constant>)`
    and `raise E(...)` in models/."""
    sites: dict[str, list[str]] = {}
    for path in sorted((ROOT / "models").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            message = None
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name in ("fail", "error"):
                    message = ast.unparse(node.args[0])
                elif name in ("exit", "_exit") and isinstance(node.args[0], ast.Constant):
                    # fail() itself ends with sys.exit(2): the refusals are its callers, found above.
                    if node.args[0].value not in (0, 2, None):
                        message = ast.unparse(node.args[0])
            elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                message = ast.unparse(node.exc.args[0]) if node.exc.args else ast.unparse(node.exc)
            if message is not None:
                sites.setdefault(message, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return sites


def test_every_refusal_in_the_worker_code_is_declared():
    sites = refusal_sites()
    undeclared = {m: where for m, where in sites.items() if m not in REFUSALS}
    assert not undeclared, (
        "worker code refuses something the plan does not know about; if a cell setting decides it, declare it in "
        "models/registry/rules.py WORKLOAD_RULES (the plan then skips such cells with the same text), otherwise add it "
        f"to REFUSALS here with the reason: {undeclared}")
    gone = set(REFUSALS) - set(sites)
    assert not gone, f"declared refusals no longer in models/ (remove them here): {gone}"


def test_the_scan_finds_a_refusal_it_was_not_told_about(tmp_path, monkeypatch):
    """The scan above must be able to fail: a new refusal in a worker module is found."""
    fake_root = tmp_path / "repo"
    (fake_root / "models").mkdir(parents=True)
    (fake_root / "models" / "w.py").write_text(
        "def main(args):\n"
        "    if args.threads > 8:\n"
        "        fail('--threads over 8 is not supported')\n"
        "    if args.batch_size % 2:\n"
        "        raise ValueError('odd batch')\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake_root)
    assert refusal_sites() == {"'--threads over 8 is not supported'": ["models/w.py:3"],
                               "'odd batch'": ["models/w.py:5"]}


@pytest.mark.parametrize("message", [m for m, (kind, *_) in REFUSALS.items() if kind == "matrix"])
def test_bounds_the_worker_checks_are_rejected_by_the_matrix(message):
    for setting in REFUSALS[message][1]:
        with pytest.raises(BenchInputError):
            load_matrix_text(f"name: t\nworkload: {{{setting}}}\naxes: {{gpu: [cpu]}}\n")


@pytest.mark.parametrize("message", [m for m, (kind, *_) in REFUSALS.items() if kind == "plan"])
def test_hardware_the_worker_checks_is_skipped_by_the_plan(message):
    _, axes, words = REFUSALS[message]
    [cell] = plan_cells(load_matrix_text(f"name: t\naxes: {axes}\n").cells(), None)
    assert cell.status == "skipped" and words in cell.reason


def test_the_workers_flags_take_every_value_the_matrix_can_hold(monkeypatch):
    """The worker's parser (argparse `choices`) is a refusal too: it must never refuse a value the plan lets through."""
    from typing import get_args

    from bench.planning.matrix import Workload

    monkeypatch.setattr(allocator, "state", allocator.state)
    for field, flag in (("precision", "--precision"), ("engine", "--engine"), ("data_layout", "--data-layout")):
        for value in get_args(Workload.model_fields[field].annotation):
            assert getattr(parse_args("worker", [flag, value, "--no-hold-freed-memory"]), field) == value
    for value in get_args(Workload.model_fields["data"].annotation):
        args = parse_args("worker", ["--data", value, "--data-dir", str(ROOT), "--no-hold-freed-memory"])
        assert args.data == value


# --- the declared rules ------------------------------------------------------------------------------------------
# For each rule, a cell that breaks it (axes), the words its reason must hold, and, for a rule no registered workload
# breaks today, the narrower capability a workload would declare to break it.
BREAKERS = {
    "data": ("{gpu: [cpu], framework: [pytorch], data: [imagenet]}", "reads only synthetic data",
             ("pytorch", "data", ("synthetic",))),
    "data_layout": ("{gpu: [cpu], framework: [pytorch], data: [imagenet], data_layout: [tfrecord]}",
                    "data_layout=tfrecord: the pytorch workload reads ImageNet as jpeg only", None),
    "precision": ("{gpu: [cpu], framework: [tensorflow], precision: [bf16]}",
                  "precision=bf16: not implemented by the tensorflow workload",
                  ("tensorflow", "precision", ("fp32",))),
    "engine": ("{gpu: [cpu], framework: [tensorflow], engine: [native]}",
               "engine=native: the tensorflow workload runs under horovod only", None),
    "min_warmup_steps": ("{gpu: [cpu], framework: [keras], warmup_steps: [0]}",
                         "warmup_steps=0: the keras workload needs at least 1", None),
    "channels_first_on_cpu": ("{gpu: [cpu], framework: [tensorflow, keras], channels_last: [false]}",
                              "TensorFlow runs channels_first (NCHW) convolutions only on a GPU", None),
    # The step settings (models/workloads/resnet50/step_settings.py).
    "loader": ("{gpu: [cpu], framework: [tensorflow, keras], data: [imagenet], loader: [pil, nvjpeg, dali]}",
               "needs framework pytorch (the", None),
    "loader_on_gpu": ("{gpu: [cpu], framework: [pytorch], data: [imagenet], loader: [nvjpeg, dali]}",
                      "needs a GPU (it decodes the JPEGs on the device)", None),
    "compile": ("{gpu: [cpu], framework: [tensorflow, keras], compile: [default, reduce-overhead, max-autotune]}",
                "needs framework pytorch (torch.compile;", None),
    "optimizer_impl": ("{gpu: [cpu], framework: [tensorflow, keras], optimizer_impl: [foreach, fused]}",
                       "needs framework pytorch (torch.optim.SGD's kernels;", None),
    "cuda_graphs": ("{gpu: [cpu], framework: [tensorflow, keras], cuda_graphs: [true]}",
                    "cuda_graphs=true needs framework pytorch", None),
    "cuda_graphs_with_compile": ("{gpu: [cpu], framework: [pytorch], cuda_graphs: [true], compile: [default]}",
                                 "torch.compile makes its own CUDA graphs", None),
    "cuda_graphs_on_gpu": ("{gpu: [cpu], framework: [pytorch], cuda_graphs: [true]}", "cuda_graphs needs a GPU",
                           None),
    # The transformer's (models/workloads/transformer/pytorch_worker.py refuses it with its own flag's words:
    # test_transformer_worker).
    "positions": ("{gpu: [cpu], framework: [pytorch], model: [gpt2-124m], seq_len: [2048]}",
                  "seq_len=2048: gpt2-124m has 1024 learned positions", None),
    "fsdp2_precision": ("{gpu: [H100], framework: [pytorch], model: [tiny], engine: [fsdp2], precision: [fp16]}",
                        "precision=fp16 with engine=fsdp2", None),
    "fused_fsdp2_on_cpu": ("{gpu: [cpu], framework: [pytorch], model: [tiny], engine: [fsdp2], "
                           "optimizer_impl: [fused]}", "fused AdamW takes no sharded CPU tensors", None),
}
# Rules whose worker is not an image worker's (models/measure/common.py's parser): the plan's side is checked here, the
# worker's in tests/test_transformer_worker.py.
TRANSFORMER_RULES = ("positions", "fsdp2_precision", "fused_fsdp2_on_cpu")


def test_every_rule_has_a_cell_that_breaks_it():
    assert set(BREAKERS) == set(WORKLOAD_RULES)


def _worker_argv(planned, backend) -> list[str]:
    """The worker's own argv (python, script, flags) in what bench renders for the cell."""
    argv = list(backend.describe(planned, "R")["argv"])
    script = WORKLOADS[planned.cell["framework"]]["script"]
    return argv[next(i for i, a in enumerate(argv) if a.endswith(f"/{script}")) - 1:]


def _worker_refusal(planned, backend, device: str) -> str | None:
    """What the worker refuses, given the flags bench renders for the cell (parsed by the worker's own parser) and
    the device it would find."""
    flags = _worker_argv(planned, backend)[2:]
    args = parse_args("worker", [*flags, "--no-hold-freed-memory"])  # (no mallopt in the test process)
    return workload_refusal(planned.cell["framework"], vars(args), device)


@pytest.mark.parametrize("rule", list(BREAKERS))
def test_a_cell_that_breaks_a_rule_is_skipped_with_the_workers_text(rule, tmp_path, monkeypatch):
    axes, words, narrower = BREAKERS[rule]
    if narrower:
        framework, capability, values = narrower
        monkeypatch.setitem(WORKLOADS[framework], capability, values)
    monkeypatch.setattr(allocator, "state", allocator.state)
    (tmp_path / "inet").mkdir()
    backend = LocalBackend(tmp_path, 60, imagenet_dir=str(tmp_path / "inet"))
    cells = plan_cells(load_matrix_text(f"name: t\naxes: {axes}\n").cells(), backend)
    assert cells
    for planned in cells:
        assert planned.status == "skipped", planned.cell
        assert words in planned.reason
        if rule in TRANSFORMER_RULES:
            assert workload_refusal(planned.cell["framework"], planned.cell, "cpu") == planned.reason
            continue
        assert WORKLOAD_RULES[rule](planned.cell["framework"], WORKLOADS[planned.cell["framework"]], planned.cell,
                                    "cpu") == planned.reason
        assert _worker_refusal(planned, backend, "cpu") == planned.reason


def test_channels_first_is_refused_on_cpu_only():
    def reason(gpu):
        [cell] = plan_cells(load_matrix_text(
            f"name: t\naxes: {{gpu: [{gpu}], framework: [tensorflow], channels_last: [false]}}\n").cells(), None)
        return cell.reason

    assert "channels_first (NCHW)" in reason("cpu")
    assert reason("V100") is None
    [torch_cell] = plan_cells(load_matrix_text(
        "name: t\naxes: {gpu: [cpu], framework: [pytorch], channels_last: [false]}\n").cells(), None)
    assert torch_cell.status == "planned"  # PyTorch runs NCHW on a CPU (the CPU cells of matrix.yaml do)


# --- the worker really refuses, with the plan's text ---------------------------------------------------------
@pytest.mark.workload
@pytest.mark.parametrize("axes", [
    "{gpu: [cpu], framework: [tensorflow], channels_last: [false]}",
    "{gpu: [cpu], framework: [keras], warmup_steps: [0]}",
    "{gpu: [cpu], framework: [pytorch], data: [imagenet], data_layout: [tfrecord]}",
    "{gpu: [cpu], framework: [pytorch], cuda_graphs: [true]}",
    "{gpu: [cpu], framework: [pytorch], data: [imagenet], loader: [nvjpeg]}",
])
def test_the_worker_refuses_a_skipped_cell_with_the_same_reason(axes, tmp_path):
    (tmp_path / "inet").mkdir()
    backend = LocalBackend(tmp_path, 60, imagenet_dir=str(tmp_path / "inet"))
    [planned] = plan_cells(load_matrix_text(
        f"name: t\nworkload: {{batch_per_gpu: 2, image_size: 32, steps: 1, repeats: 1, threads: 1}}\n"
        f"axes: {axes}\n").cells(), backend)
    assert planned.status == "skipped"
    script_and_flags = _worker_argv(planned, backend)[1:]
    result = subprocess.run([sys.executable, *script_and_flags], capture_output=True, text=True, timeout=600,
                            cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == f"bench worker: error: {planned.reason}"
