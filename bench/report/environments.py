"""The environments a report covers, from a sample of record JSON (parsing every record would be most of the
report's time): one row per distinct host, CPU, framework, Horovod, controller, MPI library and GPU."""
from __future__ import annotations

import json

import pandas as pd

from bench.analysis.missing import is_missing, text
from models.probes.cpufeatures import cpu_line

ENV_SAMPLE = 200  # record_json parsed for the environments table: a sample, never every record
NOT_RECORDED = "not recorded"  # a record made without the environment probe (or before it recorded this)
ENV_COLUMNS = ["host", "cpu", "framework", "horovod", "controller", "MPI library loaded", "gpu", "records"]


def _cpu_cell(env: dict) -> str:
    """'N × <model name> (vendor family F model M stepping S, microcode …); AMX: yes, AVX-512 BF16: yes, …', and
    torch's kernel level where recorded; records made before the CPU probe show the model name alone."""
    model = cpu_line(env.get("cpu") if isinstance(env.get("cpu"), dict) else None) or env.get("cpu_model")
    if is_missing(model) and is_missing(env.get("cpu_count")):
        return NOT_RECORDED
    line = f"{text(env.get('cpu_count'), missing='?')} × {text(model, missing='CPU model not recorded')}"
    if env.get("torch_cpu_capability"):
        line += f"; torch kernels: {env['torch_cpu_capability']}"
    return line


def environments(record_json: list[str]) -> list[dict[str, str]]:
    seen: dict[tuple, dict] = {}
    for raw in record_json:
        env = json.loads(raw).get("env_probe", {}) if raw else {}
        gpu = env.get("gpu") or {}
        row = {
            "host": text(env.get("hostname"), missing=NOT_RECORDED), "cpu": _cpu_cell(env),
            "framework": NOT_RECORDED if is_missing(env.get("framework")) else
                         f"{env['framework']} {text(env.get('framework_version'), missing='(version not recorded)')}",
            "horovod": f"{env.get('horovod_version')} ("
                       + ", ".join(k for k, v in (env.get("horovod_built") or {}).items() if v) + ")"
                       if env.get("horovod_version") else "not used",
            "controller": env.get("horovod_controller") or
                          (f"DDP ({env['torch_distributed_backend']})" if env.get("torch_distributed_backend")
                           else "none"), "MPI library loaded": env.get("mpi_library") or "—",
            "gpu": f"{text(gpu.get('count'), missing='?')}× "
                   f"{text(gpu.get('model'), missing='GPU model not recorded')} "
                   f"(driver {text(gpu.get('driver'), missing='not recorded')})" if gpu else "none",
        }
        key = tuple(row.values())
        seen.setdefault(key, {**row, "records": 0})["records"] += 1
    return list(seen.values())


def sample_record_json(ok: pd.DataFrame, limit: int = ENV_SAMPLE) -> list[str]:
    """The newest record of each (gpu, framework, mpi, engine), then evenly spread others, up to `limit`."""
    if ok.empty or "record_json" not in ok:
        return []
    order = ok.sort_values("written_unix") if "written_unix" in ok else ok
    first = order.groupby(["gpu", "framework", "mpi", "engine"], dropna=False, sort=False).tail(1)
    rest = order.drop(first.index)
    room = max(0, limit - len(first))
    if room and len(rest):
        rest = rest.iloc[:: max(1, len(rest) // room)].head(room)
    else:
        rest = rest.iloc[0:0]
    return [*first["record_json"].head(limit), *rest["record_json"]]
