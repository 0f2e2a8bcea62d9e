"""What a workload refuses about its settings, declared once. Each rule reads a workload's capabilities
(models/registry/workloads.py), the settings by their matrix names, which are also the worker's flags (data,
data_layout, precision, engine, warmup_steps, channels_last, loader, compile, optimizer_impl, cuda_graphs), and the
device ("cpu" or "gpu"); it returns why they cannot run together, or None. The worker refuses such settings when it
starts (exit 2, this text) and the plan skips such a cell with the same text, so it is never launched. Checked in
the order of WORKLOAD_RULES: the first broken rule is the reason."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from models.registry.workloads import (COMPILE_MODES, GPU_LOADERS, LOADERS, MODEL_WORKLOADS, OPTIMIZER_IMPLS,
                                       TRANSFORMER_WORKLOAD, WORKLOADS, is_transformer, workload_spec)


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
    from models.workloads.transformer.shapes import lookup

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
