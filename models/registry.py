"""What workloads exist, their versions, and what each refuses. Light on purpose: the control plane reads it without
importing torch.

A workload's version is part of every cell id: bump it when a change alters what is measured.
"""
from __future__ import annotations

import importlib
import os
from typing import Any, Callable, Mapping

# The step settings (docs/gpu.md, "Step settings"), by their matrix values; the matrix's schema takes its vocabulary
# from here. `loader`: who decodes a real-data cell's JPEGs (auto: the fastest there is, resolved by the worker and
# recorded; pil: Pillow in DataLoader workers, what bench did before the key; nvjpeg, dali: on the GPU). `compile`:
# torch.compile's mode, or off. `optimizer_impl`: which torch.optim.SGD kernel runs the update (default: the
# workload's own choice, which for PyTorch is the fused kernel bench has always used).
LOADERS = ("auto", "pil", "nvjpeg", "dali")
GPU_LOADERS = ("nvjpeg", "dali")  # decode on the device: a GPU cell only
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")
OPTIMIZER_IMPLS = ("default", "foreach", "fused")
# What a worker's CUDA graphs captured, as its record says (docs/gpu.md, "CUDA graphs"): the model's forward and
# backward (make_graphed_callables), or the whole step with the update (and DDP's allreduce).
CUDA_GRAPH_SCOPES = ("fwd+bwd", "step")

WORKLOADS = {
    # framework: script in this folder, version, what it can do
    "pytorch": {
        "script": "resnet50_pytorch.py",
        "version": "1",
        # What `bench doctor` imports to find the framework, and Horovod's module for it (None: rides on another's).
        "imports": "torch",
        "horovod_module": "horovod.torch",
        # The Horovod extension its horovod engine loads (bench/launch/bindings.py checks the build has it).
        "horovod_binding": "torch",
        "data": ("synthetic", "imagenet"),
        "data_layout": ("jpeg",),
        "engines": ("horovod", "native"),
        "precision": ("fp32", "fp16", "bf16"),
        "channels_first_on_cpu": True,
        # The step settings it implements (each a matrix key; a workload without one takes its first value only).
        "loaders": LOADERS,
        "compile": COMPILE_MODES,
        "optimizer_impl": OPTIMIZER_IMPLS,
        "cuda_graphs": True,
    },
    "tensorflow": {
        "script": "resnet50_tensorflow.py",
        "version": "1",
        "imports": "tensorflow",
        "horovod_module": "horovod.tensorflow",
        "horovod_binding": "tensorflow",
        "data": ("synthetic", "imagenet"),
        "data_layout": ("jpeg", "tfrecord"),
        "engines": ("horovod",),
        "precision": ("fp32", "fp16", "bf16"),
        "channels_first_on_cpu": False,  # TensorFlow's CPU convolutions are NHWC only
        "loaders": ("auto",),  # tf.data decodes
        "compile": ("off",),
        "optimizer_impl": ("default",),
        "cuda_graphs": False,
    },
    "keras": {
        "script": "resnet50_keras.py",
        "version": "1",
        # Keras 2 as tf-keras: Horovod 0.28's Keras optimizer does not average under Keras 3 (docs/mpi-flavours.md).
        "imports": "tf_keras",
        "version_label": "tf-keras ",
        "horovod_module": None,  # horovod.tensorflow.keras, built with TensorFlow's
        "horovod_binding": "tensorflow",
        "needed_for": "Keras 2 for Horovod's Keras integration",
        "data": ("synthetic", "imagenet"),
        "data_layout": ("jpeg", "tfrecord"),
        "engines": ("horovod",),
        "precision": ("fp32", "fp16", "bf16"),
        "min_warmup_steps": 1,  # Horovod's Keras callback broadcasts the weights after the first batch
        "channels_first_on_cpu": False,
        "loaders": ("auto",),  # tf.data decodes
        "compile": ("off",),
        "optimizer_impl": ("default",),
        "cuda_graphs": False,
    },
}


# The engines that average gradients, and who starts them: Horovod's own ranks, or a torch.distributed process group
# (DDP: `native`; FSDP2) that torchrun or an MPI launcher's rank variables start. `label`: how tables name it.
# `traffic`: the bytes each worker moves per step, over a ring allreduce of the gradients (2(n-1)/n of them): DDP and
# Horovod allreduce the gradients (1x); FSDP2 all-gathers the parameters in forward and again in backward and
# reduce-scatters the gradients, (n-1)/n each: 3(n-1)/n, 1.5x (the what-if model's first-order count).
# `forward_traffic`: the part of `traffic` each block's forward pass waits for, FSDP2's forward all-gathers (0.5x:
# one gather of the parameters); the rest moves during backward, where gradients become ready.
# `gradient_traffic`: the part of `traffic` that is the gradients' (what the engine probe, models/engine_probe.py,
# leaves out and the expected value adds back): all of it for DDP and Horovod; FSDP2's reduce-scatter, 0.5x (its
# probe keeps the parameters' gathers: sharded as in the cell, gradient sync off).
# `sweep`: whose collective sweep (models/collectives.py --engine) measures the path that traffic takes: FSDP2's
# gathers and reduce-scatters go over the same torch.distributed process group as DDP's allreduce.
ENGINES = {
    "horovod": {"label": "Horovod", "torch_distributed": False, "tag": "", "traffic": 1.0, "forward_traffic": 0.0,
                "gradient_traffic": 1.0, "sweep": "horovod"},
    "native": {"label": "DDP", "torch_distributed": True, "tag": "ddp", "traffic": 1.0, "forward_traffic": 0.0,
               "gradient_traffic": 1.0, "sweep": "native"},
    "fsdp2": {"label": "FSDP2", "torch_distributed": True, "tag": "fsdp2", "traffic": 1.5, "forward_traffic": 0.5,
              "gradient_traffic": 0.5, "sweep": "native"},
}
TORCH_DISTRIBUTED_ENGINES = tuple(name for name, e in ENGINES.items() if e["torch_distributed"])


# The transformer language model (models/transformer_pytorch.py; its configurations in models/transformer_shapes.py).
# A sample is a sequence of seq_len tokens; its rate is quoted in tokens/s. The same capability keys as the image
# workloads, so the same refusal rules read it; `frameworks`: the cell's `framework` it runs under.
TRANSFORMER_WORKLOAD = {
    "name": "transformer_pytorch",
    "script": "transformer_pytorch.py",
    "version": "1",
    "frameworks": ("pytorch",),
    "imports": "torch",
    "horovod_module": "horovod.torch",
    "data": ("synthetic", "tokens"),  # the worker reads token files; the matrix does not name them yet
    "data_layout": ("jpeg",),
    "engines": ("horovod", "native", "fsdp2"),
    "precision": ("fp32", "fp16", "bf16"),
    "channels_first_on_cpu": True,
    "loaders": ("auto",),
    "compile": COMPILE_MODES,
    "optimizer_impl": OPTIMIZER_IMPLS,  # torch.optim.AdamW's kernels, by the same names as SGD's
    "cuda_graphs": False,
    "sample_unit": "sequence",
    "rate_unit": "tokens/s",
    # What training holds per parameter whatever the precision (autocast keeps fp32 weights): the weight, its
    # gradient and AdamW's two moments, 4 bytes each. FSDP2 shards it over the workers; DDP and Horovod keep all of it
    # on every GPU. Activations come on top (the plan's memory rule is a lower bound).
    "state_bytes_per_param": 16,
    # The report's section for these cells, and the worker's flags: (flag, cell key) pairs, a bool key as --flag or
    # --no-flag, a null one left out (the worker's default); every workload's argv ends with --threads, --cell-id,
    # --run-id and --out (bench/backends/shared/cell_launch.py).
    "title": "Transformer language models (tokens/s)",
    "argv": (("--model", "model"), ("--engine", "engine"), ("--seq-len", "seq_len"), ("--batch-size", "batch_per_gpu"),
             ("--grad-accum", "grad_accum"), ("--precision", "precision"),
             ("--activation-checkpointing", "activation_checkpointing"), ("--compile", "compile"),
             ("--optimizer-impl", "optimizer_impl"), ("--warmup-steps", "warmup_steps"), ("--steps", "steps"),
             ("--repeats", "repeats")),
}
# The image workloads' sample and the rate users quote for them.
for _spec in WORKLOADS.values():
    _spec.update(sample_unit="image", rate_unit="img/s")


def is_transformer(model: str) -> bool:
    """Whether a cell's `model` names a transformer: a configuration of models/transformer_shapes.py or a shape id."""
    from models.transformer_shapes import CONFIGS, shape_from_id

    return model in CONFIGS or shape_from_id(model) is not None


# Workloads named by a model of their own, added without touching bench/: each module named in BENCH_WORKLOADS
# (comma-separated, importable) holds WORKLOADS = {model name: spec}. A spec has what TRANSFORMER_WORKLOAD has that
# the control plane reads (REQUIRED_KEYS; the step capabilities default to the first value only): its worker script
# (a path, or a name under models/), version, frameworks, engines, the sample and rate units and how many units a
# sample holds (`units_per_sample`: a number, or a function of the cell), the report's title, the worker's argv
# (`argv`), its gradient stream for the what-if model (`gradients`: a function of the cell, models/gradients.py's
# Gradient list) and, optionally, FLOPs per sample (`flops_per_sample`: a function of the cell) for MFU.
PLUGIN_VAR = "BENCH_WORKLOADS"
REQUIRED_KEYS = ("script", "version", "frameworks", "engines", "sample_unit", "rate_unit", "title", "argv",
                 "gradients")
_PLUGIN_DEFAULTS = {"data": ("synthetic",), "data_layout": ("jpeg",), "precision": ("fp32",),
                    "channels_first_on_cpu": True, "loaders": ("auto",), "compile": ("off",),
                    "optimizer_impl": ("default",), "cuda_graphs": False, "units_per_sample": 1}
MODEL_WORKLOADS: dict[str, dict[str, Any]] = {}


def load_plugins(names: str | None = None) -> None:
    """Registers the workloads of the modules named in BENCH_WORKLOADS (or `names`); a spec without a required key is
    an error naming the module, the model and the key."""
    for module_name in filter(None, (names if names is not None else os.environ.get(PLUGIN_VAR, "")).split(",")):
        module = importlib.import_module(module_name.strip())
        for model, spec in getattr(module, "WORKLOADS", {}).items():
            missing = [k for k in REQUIRED_KEYS if k not in spec]
            if missing:
                raise ValueError(f"{PLUGIN_VAR}: {module_name}'s workload {model!r} lacks {', '.join(missing)}")
            if model == "resnet50" or model in COLLECTIVES or is_transformer(model):
                raise ValueError(f"{PLUGIN_VAR}: {module_name}'s workload {model!r} takes a name bench already uses")
            MODEL_WORKLOADS[model] = {**_PLUGIN_DEFAULTS, "name": model, **spec}


def known_model(model: str) -> bool:
    """A matrix `model` value: ResNet-50, a transformer, a collective, or a registered workload."""
    return model == "resnet50" or model in COLLECTIVES or is_transformer(model) or model in MODEL_WORKLOADS


def workload_spec(model: str, framework: str) -> dict[str, Any] | None:
    """What measures a training cell of this `model` under this `framework`: ResNet-50's worker per framework, the
    transformer's one worker, a registered workload (None: no such workload; collectives are not workloads, see
    COLLECTIVES)."""
    if model in MODEL_WORKLOADS:
        return MODEL_WORKLOADS[model]
    if is_transformer(model):
        return TRANSFORMER_WORKLOAD
    if model == "resnet50":
        return WORKLOADS.get(framework)
    return None


def training_state_bytes(cell: Mapping[str, Any]) -> int | None:
    """A transformer cell's weights, gradients and optimizer state per GPU (None for other workloads)."""
    if not is_transformer(cell.get("model", "resnet50")):
        return None
    from models.transformer_shapes import lookup

    total = lookup(cell["model"]).params() * TRANSFORMER_WORKLOAD["state_bytes_per_param"]
    return total // int(cell.get("gpus") or 1) if cell.get("engine") == "fsdp2" else total


def _transformer_seq(cell: Mapping[str, Any]) -> int:
    from models.transformer_shapes import lookup

    seq = cell.get("seq_len")
    return int(seq) if seq and seq == seq else lookup(cell["model"]).seq  # null or NaN: the configuration's context


def _transformer_gradients(cell: Mapping[str, Any]) -> list:
    from models.gradients import transformer_gradients
    from models.transformer_shapes import lookup

    return transformer_gradients(lookup(cell["model"]), _transformer_seq(cell))


def _transformer_flops(cell: Mapping[str, Any]) -> int:
    from models.transformer_shapes import lookup

    return lookup(cell["model"]).flops_per_sequence(_transformer_seq(cell))


# What the control plane asks of a model-named workload, the transformer's as a registered one's: a sequence is
# seq_len tokens, its gradient stream by layer part, FLOPs per sequence by 6N + 12LHQT (docs/transformer.md).
TRANSFORMER_WORKLOAD.update(units_per_sample=_transformer_seq, gradients=_transformer_gradients,
                            flops_per_sample=_transformer_flops)


def units_per_sample(cell: Mapping[str, Any]) -> int:
    """What one sample of the cell is worth in the unit users quote: a transformer's sequence is seq_len tokens
    (null: its configuration's context), an image is one image, a registered workload's as it says."""
    spec = workload_spec(cell.get("model", "resnet50"), cell.get("framework") or "pytorch") or {}
    per = spec.get("units_per_sample", 1)
    return int(per(cell) if callable(per) else per)


# What a workload refuses about its settings, once. Each rule reads a workload's capabilities (above), the settings by
# their matrix names, which are also the worker's flags (data, data_layout, precision, engine, warmup_steps,
# channels_last, loader, compile, optimizer_impl, cuda_graphs), and the device ("cpu" or "gpu"); it returns why they
# cannot run together, or None. The worker refuses such settings when it starts (exit 2, this text) and the plan
# skips such a cell with the same text, so it is never launched. Checked in this order: the first broken rule is the
# reason.
def _data(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    if s["data"] not in w["data"]:
        return f"data={s['data']}: the {name} workload reads only {', '.join(w['data'])} data so far"
    return None


def _data_layout(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    if s["data"] == "imagenet" and s["data_layout"] not in w["data_layout"]:
        return (f"data_layout={s['data_layout']}: the {name} workload reads ImageNet as "
                f"{', '.join(w['data_layout'])} only")
    return None


def _precision(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    if s["precision"] not in w["precision"]:
        return f"precision={s['precision']}: not implemented by the {name} workload"
    return None


def _engine(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    if s["engine"] not in w["engines"]:
        return f"engine={s['engine']}: the {name} workload runs under {', '.join(w['engines'])} only"
    return None


def _min_warmup_steps(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    if s["warmup_steps"] < w.get("min_warmup_steps", 0):
        return (f"warmup_steps={s['warmup_steps']}: the {name} workload needs at least {w['min_warmup_steps']} "
                f"(Horovod broadcasts the initial weights after the first batch)")
    return None


def _channels_first_on_cpu(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    if not s["channels_last"] and device == "cpu" and not w["channels_first_on_cpu"]:
        return ("channels_last=false on cpu: TensorFlow runs channels_first (NCHW) convolutions only on a GPU; "
                "use channels_last on CPU")
    return None


def _able(capability: str, value: Any) -> str:
    """The workloads whose `capability` holds `value`, as a reason's words: "framework pytorch"."""
    able = [name for name, w in WORKLOADS.items()
            if (value in w[capability] if isinstance(w[capability], tuple) else w[capability])]
    return f"framework {' or '.join(able)}" if able else "a workload that implements it"


def _loader(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    # Synthetic cells read no input: the loader is ignored there, as loader_workers and data_layout are.
    loader = s.get("loader", LOADERS[0])
    if s["data"] == "imagenet" and loader not in w["loaders"]:
        return (f"loader={loader} needs {_able('loaders', loader)} (the {name} workload decodes ImageNet its own "
                f"way: loader=auto)")
    return None


def _loader_on_gpu(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    loader = s.get("loader", LOADERS[0])
    if s["data"] == "imagenet" and loader in GPU_LOADERS and device == "cpu":
        return f"loader={loader} needs a GPU (it decodes the JPEGs on the device)"
    return None


def _compile(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    mode = s.get("compile", COMPILE_MODES[0])
    if mode not in w["compile"]:
        return (f"compile={mode} needs {_able('compile', mode)} (torch.compile; the {name} workload compiles its own "
                f"way)")
    return None


def _optimizer_impl(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    impl = s.get("optimizer_impl", OPTIMIZER_IMPLS[0])
    if impl not in w["optimizer_impl"]:
        return (f"optimizer_impl={impl} needs {_able('optimizer_impl', impl)} (torch.optim.SGD's kernels; the {name} "
                f"workload has its own optimizer)")
    return None


def _cuda_graphs(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    if s.get("cuda_graphs") and not w["cuda_graphs"]:
        return f"cuda_graphs=true needs {_able('cuda_graphs', True)} (the {name} workload captures no CUDA graphs)"
    return None


def _cuda_graphs_on_gpu(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    if s.get("cuda_graphs") and device == "cpu":
        return "cuda_graphs needs a GPU"
    return None


def _cuda_graphs_with_compile(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    mode = s.get("compile", COMPILE_MODES[0])
    if s.get("cuda_graphs") and mode != COMPILE_MODES[0]:
        return (f"cuda_graphs=true with compile={mode}: torch.compile makes its own CUDA graphs "
                f"(compile=reduce-overhead); set one or the other")
    return None


def _positions(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    model, seq = s.get("model", "resnet50"), s.get("seq_len")
    if not seq or not is_transformer(model):
        return None
    from models.transformer_shapes import lookup

    shape = lookup(model)
    if shape.style == "gpt2" and seq > shape.seq:
        return f"seq_len={seq}: {model} has {shape.seq} learned positions (GPT-2 style cannot train longer)"
    return None


def _fsdp2_precision(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    if s.get("engine") == "fsdp2" and s["precision"] == "fp16":
        return "precision=fp16 with engine=fsdp2: bench's FSDP2 cells train bf16 or fp32 (no sharded loss scaler)"
    return None


def _fused_fsdp2_on_cpu(name: str, w: Mapping[str, Any], s: Mapping[str, Any], device: str) -> str | None:
    if s.get("engine") == "fsdp2" and s.get("optimizer_impl") == "fused" and device == "cpu":
        return "optimizer_impl=fused with engine=fsdp2 on a CPU: fused AdamW takes no sharded CPU tensors"
    return None


Rule = Callable[[str, Mapping[str, Any], Mapping[str, Any], str], str | None]
WORKLOAD_RULES: dict[str, Rule] = {
    "data": _data,
    "data_layout": _data_layout,
    "precision": _precision,
    "engine": _engine,
    "min_warmup_steps": _min_warmup_steps,
    "channels_first_on_cpu": _channels_first_on_cpu,
    "loader": _loader,
    "loader_on_gpu": _loader_on_gpu,
    "compile": _compile,
    "optimizer_impl": _optimizer_impl,
    "cuda_graphs": _cuda_graphs,
    "cuda_graphs_with_compile": _cuda_graphs_with_compile,
    "cuda_graphs_on_gpu": _cuda_graphs_on_gpu,
    "positions": _positions,
    "fsdp2_precision": _fsdp2_precision,
    "fused_fsdp2_on_cpu": _fused_fsdp2_on_cpu,
}


def workload_refusal(framework: str, settings: Mapping[str, Any], device: str) -> str | None:
    """Why the workload that measures `settings["model"]` (ResNet-50 when absent) under `framework` refuses these
    settings on this device ("cpu" or "gpu"), or None."""
    model = settings.get("model", "resnet50")
    if model in MODEL_WORKLOADS or is_transformer(model):
        workload = workload_spec(model, framework)
        name = "transformer" if workload is TRANSFORMER_WORKLOAD else model
        if framework not in workload["frameworks"]:
            return f"model={model}: the {name} runs under framework {' or '.join(workload['frameworks'])} only"
    else:
        name, workload = framework, WORKLOADS[framework]
    return next((why for rule in WORKLOAD_RULES.values() if (why := rule(name, workload, settings, device))), None)


# Cell kinds beside ResNet-50 training (the cell key `model`): a collective sweep, run by the same engine and launcher
# a training cell of the same settings uses. Not a framework: its cells name the framework whose binding runs it.
# One worker program runs every op (`--op`). `bus_factor` is nccl-tests' bus bandwidth factor (its
# doc/PERFORMANCE.md), busbw = algbw x factor over n ranks: the share of the message each link carries in the ring
# algorithm, so busbw compares with a link's rate whatever n is. The one table of them: the worker and the record's
# validation both read it.
COLLECTIVES = {
    "allreduce": {
        "script": "collectives.py",
        "version": "1",
        "frameworks": ("pytorch",),  # horovod.torch or torch.distributed move the tensors
        "bus_factor": lambda n: 2 * (n - 1) / n,  # reduce-scatter then allgather: 2(n-1)/n of the message per link
        "bus_formula": "2(n-1)/n",
    },
    "allgather": {
        "script": "collectives.py",
        "version": "1",
        "frameworks": ("pytorch",),
        "bus_factor": lambda n: (n - 1) / n,  # each rank receives the n-1 slices it does not hold
        "bus_formula": "(n-1)/n",
    },
    # Each rank's input is the whole message (n slices); it receives its slice of the sum: FSDP's gradient traffic.
    "reduce_scatter": {
        "script": "collectives.py",
        "version": "1",
        "frameworks": ("pytorch",),
        "bus_factor": lambda n: (n - 1) / n,  # each rank sends the n-1 slices it does not keep
        "bus_formula": "(n-1)/n",
    },
    "broadcast": {
        "script": "collectives.py",
        "version": "1",
        "frameworks": ("pytorch",),
        "bus_factor": lambda n: 1.0,  # every link carries the whole message once
        "bus_formula": "1",
    },
}

# ResNet-50's fp32 gradients, 25,557,032 parameters x 4 bytes: what one training step reduces, and the default
# largest message of a collective sweep.
RESNET50_GRADIENT_BYTES = 25_557_032 * 4


load_plugins()
