"""What workloads exist, their versions, and what each refuses. Light on purpose: the control plane reads it without
importing torch.

A workload's version is part of every cell id: bump it when a change alters what is measured.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

WORKLOADS = {
    # framework: script in this folder, version, what it can do
    "pytorch": {
        "script": "resnet50_pytorch.py",
        "version": "1",
        # What `bench doctor` imports to find the framework, and Horovod's module for it (None: rides on another's).
        "imports": "torch",
        "horovod_module": "horovod.torch",
        "data": ("synthetic", "imagenet"),
        "data_layout": ("jpeg",),
        "engines": ("horovod", "native"),
        "precision": ("fp32", "fp16", "bf16"),
        "channels_first_on_cpu": True,
    },
    "tensorflow": {
        "script": "resnet50_tensorflow.py",
        "version": "1",
        "imports": "tensorflow",
        "horovod_module": "horovod.tensorflow",
        "data": ("synthetic", "imagenet"),
        "data_layout": ("jpeg", "tfrecord"),
        "engines": ("horovod",),
        "precision": ("fp32", "fp16", "bf16"),
        "channels_first_on_cpu": False,  # TensorFlow's CPU convolutions are NHWC only
    },
    "keras": {
        "script": "resnet50_keras.py",
        "version": "1",
        # Keras 2 as tf-keras: Horovod 0.28's Keras optimizer does not average under Keras 3 (docs/mpi-flavours.md).
        "imports": "tf_keras",
        "version_label": "tf-keras ",
        "horovod_module": None,  # horovod.tensorflow.keras, built with TensorFlow's
        "needed_for": "Keras 2 for Horovod's Keras integration",
        "data": ("synthetic", "imagenet"),
        "data_layout": ("jpeg", "tfrecord"),
        "engines": ("horovod",),
        "precision": ("fp32", "fp16", "bf16"),
        "min_warmup_steps": 1,  # Horovod's Keras callback broadcasts the weights after the first batch
        "channels_first_on_cpu": False,
    },
}


# What a workload refuses about its settings, once. Each rule reads a workload's capabilities (above), the settings by
# their matrix names, which are also the worker's flags (data, data_layout, precision, engine, warmup_steps,
# channels_last), and the device ("cpu" or "gpu"); it returns why they cannot run together, or None. The worker
# refuses such settings when it starts (exit 2, this text) and the plan skips such a cell with the same text, so it
# is never launched. Checked in this order: the first broken rule is the reason.
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


Rule = Callable[[str, Mapping[str, Any], Mapping[str, Any], str], str | None]
WORKLOAD_RULES: dict[str, Rule] = {
    "data": _data,
    "data_layout": _data_layout,
    "precision": _precision,
    "engine": _engine,
    "min_warmup_steps": _min_warmup_steps,
    "channels_first_on_cpu": _channels_first_on_cpu,
}


def workload_refusal(framework: str, settings: Mapping[str, Any], device: str) -> str | None:
    """Why the `framework` workload refuses these settings on this device ("cpu" or "gpu"), or None."""
    workload = WORKLOADS[framework]
    return next((why for rule in WORKLOAD_RULES.values() if (why := rule(framework, workload, settings, device))),
                None)


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
