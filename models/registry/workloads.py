"""What workloads exist: ResNet-50 per framework, the transformer, and those registered from outside (BENCH_WORKLOADS),
each with its worker script, version and what it can do, and the step settings' vocabularies. Light on purpose: the
control plane reads it without importing torch (what a workload refuses is in rules.py, the engines in engines.py).

A workload's version is part of every cell id: bump it when a change alters what is measured.
"""
from __future__ import annotations

import importlib
import os
from typing import Any, Mapping

from models.registry.collectives import COLLECTIVES

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
    # framework: its worker script (a path under models/), version, what it can do
    "pytorch": {
        "script": "workloads/resnet50/pytorch_worker.py",
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
        "script": "workloads/resnet50/tensorflow_worker.py",
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
        "script": "workloads/resnet50/keras_worker.py",
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


# The transformer language model (models/workloads/transformer/pytorch_worker.py; its configurations in
# models/workloads/transformer/shapes.py). A sample is a sequence of seq_len tokens; its rate is quoted in tokens/s. The
# same capability keys as the image workloads, so the same refusal rules read it; `frameworks`: the cell's `framework`
# it runs under.
TRANSFORMER_WORKLOAD = {
    "name": "transformer_pytorch",
    "script": "workloads/transformer/pytorch_worker.py",
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
             ("--repeats", "repeats"), ("--layout", "layout")),
}
# The image workloads' sample and the rate users quote for them.
for _spec in WORKLOADS.values():
    _spec.update(sample_unit="image", rate_unit="img/s")


def is_transformer(model: str) -> bool:
    """Whether a cell's `model` names a transformer: a configuration of models/workloads/transformer/shapes.py or a
    shape id."""
    from models.workloads.transformer.shapes import CONFIGS, shape_from_id

    return model in CONFIGS or shape_from_id(model) is not None


# Workloads named by a model of their own, added without touching bench/: each module named in BENCH_WORKLOADS
# (comma-separated, importable) holds WORKLOADS = {model name: spec}. A spec has what TRANSFORMER_WORKLOAD has that
# the control plane reads (REQUIRED_KEYS; the step capabilities default to the first value only): its worker script
# (a path, or a name under models/), version, frameworks, engines, the sample and rate units and how many units a
# sample holds (`units_per_sample`: a number, or a function of the cell), the report's title, the worker's argv
# (`argv`), its gradient stream for the what-if model (`gradients`: a function of the cell,
# models/workloads/gradients.py's Gradient list) and, optionally, FLOPs per sample (`flops_per_sample`: a function of
# the cell) for MFU.
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
    from models.workloads.transformer.shapes import lookup

    total = lookup(cell["model"]).params() * TRANSFORMER_WORKLOAD["state_bytes_per_param"]
    return total // int(cell.get("gpus") or 1) if cell.get("engine") == "fsdp2" else total


def _transformer_seq(cell: Mapping[str, Any]) -> int:
    from models.workloads.transformer.shapes import lookup

    seq = cell.get("seq_len")
    return int(seq) if seq and seq == seq else lookup(cell["model"]).seq  # null or NaN: the configuration's context


def _transformer_gradients(cell: Mapping[str, Any]) -> list:
    from models.workloads.gradients import transformer_gradients
    from models.workloads.transformer.shapes import lookup

    return transformer_gradients(lookup(cell["model"]), _transformer_seq(cell))


def _transformer_flops(cell: Mapping[str, Any]) -> int:
    from models.workloads.transformer.shapes import lookup

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


load_plugins()
