"""What changed between two sides' recorded environments, most likely to move throughput first (pure: no I/O).

`environment_of` flattens a side's records (record_json: env_probe, launch_env, workload settings) into
"what" → value, the value every record of the side agrees on, or "a | b" when its records differ. `diff_environments`
keeps the entries whose values differ and orders them by RELEVANCE: the source revision and the files under bench/
and models/ that differ (a change of code is the first thing to look at), framework and library versions, then MPI,
NCCL/CUDA, the CPU, cores/affinity/quota, the kernel, tuning environment variables, bench and workload versions,
workload settings. An entry one side did not record (an older bench) is left out rather than shown as a change, and
so is a variable whose value every run draws afresh (PER_RUN_ENV, TEMPORARY_PATH).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

# (prefix of a "what", rank): the first prefix that matches decides; lower ranks are shown first.
RELEVANCE: tuple[tuple[str, int], ...] = (
    ("source revision", -2), ("source", -1),
    ("package torch", 0), ("package horovod", 0), ("package tensorflow", 0), ("package numpy", 0),
    ("package mpi4py", 0), ("package", 1), ("framework", 0), ("horovod", 0),
    ("MPI library", 2), ("horovod controller", 2), ("transport", 2),
    ("NCCL", 3), ("CUDA", 3), ("GPU", 3),
    ("CPU model", 4), ("CPU features", 4), ("CPU microcode", 4), ("torch CPU", 4),
    ("CPU quota", 5), ("CPU affinity", 5), ("cores", 5), ("threads", 5),
    ("kernel", 6), ("python", 6), ("allocator", 6),
    ("env ", 7),
    ("bench version", 8), ("workload version", 8),
    ("workload", 9),
)


_PACKAGES_RECORDED, _ENV_RECORDED = "_packages recorded", "_tuning env recorded"
# Variables whose value is drawn afresh for every run or job, never a change anyone made: rendezvous ports and
# addresses (Horovod's Gloo, torch's MASTER_*), per-job tokens and ids. A `bench ab` of two git refs listed
# `env HOROVOD_GLOO_RENDEZVOUS_PORT: 26387 | 27819 → 14126 | …` as what changed, instead of the code.
PER_RUN_ENV = re.compile(r"(_PORT|_RENDEZVOUS_ADDR|^MASTER_ADDR|_TOKEN|_RUN_ID|_JOB_ID)$")
# A value under a temporary folder (a job's scratch directory) is per run too, whatever the variable.
TEMPORARY_PATH = re.compile(r"(^|[:=\s])/tmp/")


@dataclass(frozen=True)
class Change:
    what: str
    before: str   # side A / the baseline
    after: str    # side B / the candidate
    rank: int

    def line(self) -> str:
        """One line of text: "what: before → after", or "what: after" for an entry that is a list of its own
        (the files that differ between two sources)."""
        return f"{self.what}: {self.after}" if self.before == "" else f"{self.what}: {self.before} → {self.after}"


def rank_of(what: str) -> int:
    for prefix, rank in RELEVANCE:
        if what.startswith(prefix):
            return rank
    return 10


def _text(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return str(v)


def flatten_record(rec: dict) -> dict[str, str]:
    """One record (the parsed record_json) → "what" → text, for the things that can move throughput."""
    probe = rec.get("env_probe") or {}
    out: dict[str, str] = {}

    def put(what: str, value: Any) -> None:
        if value is not None:
            out[what] = _text(value)

    if isinstance(probe.get("packages"), dict):
        out[_PACKAGES_RECORDED] = "yes"
        for name, version in probe["packages"].items():
            put(f"package {name}", version)
    put("framework version", probe.get("framework_version"))
    put("horovod version", probe.get("horovod_version"))
    put("horovod controller", probe.get("horovod_controller"))
    put("MPI library", probe.get("mpi_library"))
    put("transport (effective)", rec.get("effective_transport"))
    put("NCCL", probe.get("nccl"))
    put("CUDA", probe.get("cuda"))
    gpu = probe.get("gpu")
    if isinstance(gpu, dict):
        put("GPU model", gpu.get("model"))
        put("GPU driver", gpu.get("driver"))
    cpu = probe.get("cpu") or {}
    put("CPU model", cpu.get("model_name") or probe.get("cpu_model"))
    put("CPU microcode", cpu.get("microcode"))
    features = cpu.get("features")
    if isinstance(features, dict):
        put("CPU features", " ".join(sorted(f for f, on in features.items() if on)) or "none")
    put("torch CPU capability", probe.get("torch_cpu_capability"))
    quota = probe.get("cpu_quota")
    if isinstance(quota, dict):
        out["CPU quota"] = "none" if quota.get("cpus") is None else f"{quota['cpus']:g} CPUs"
    put("CPU affinity", probe.get("cpu_affinity"))
    put("cores (cpu_count)", probe.get("cpu_count"))
    put("threads per worker", rec.get("threads_per_worker"))
    # What the step settings resolved to (the cell holds the request: `loader: auto` decodes where the fastest
    # decoder is, so the same cell can run Pillow on one machine and nvJPEG on another).
    put("workload loader (resolved)", rec.get("loader"))
    put("workload SGD kernel", rec.get("optimizer_impl"))
    put("workload CUDA graphs captured", rec.get("cuda_graphs"))
    put("torch threads", probe.get("torch_threads"))
    platform = probe.get("platform")
    if platform:
        out["kernel"] = platform.split("-with-")[0].removeprefix("Linux-")
    put("python", probe.get("python"))
    put("allocator", probe.get("malloc"))
    if isinstance(probe.get("tuning_env"), dict):
        out[_ENV_RECORDED] = "yes"
    env = {**(probe.get("tuning_env") or {}), **(rec.get("launch_env") or {})}
    for name, value in env.items():
        if not PER_RUN_ENV.search(name) and not TEMPORARY_PATH.search(str(value)):
            put(f"env {name}", value)
    put("workload version", rec.get("workload_version"))
    cell = rec.get("cell") or {}
    for key in ("batch_per_gpu", "image_size", "precision", "warmup_steps", "steps", "repeats", "channels_last",
                "data", "engine"):
        put(f"workload {key}", cell.get(key))
    return out


def environment_of(records: Iterable[dict], bench_versions: Iterable[str] = (),
                   sources: Iterable[str] = ()) -> dict[str, str]:
    """A side's records (parsed record_json dicts, or a DataFrame with a record_json column) → "what" → value; a
    value the records disagree on is "a | b" (sorted). `bench_versions` and `sources` (SourceRevision.text() of
    each run, bench/core/source_revision.py) come from the runs table."""
    if hasattr(records, "columns"):
        records = [json.loads(t) for t in records["record_json"].dropna()] if "record_json" in records else []
    seen: dict[str, set[str]] = {}
    for rec in records:
        if rec.get("status", "ok") != "ok":
            continue
        for what, value in flatten_record(rec).items():
            seen.setdefault(what, set()).add(value)
    versions = {v for v in bench_versions if v}
    if versions:
        seen["bench version"] = versions
    revisions = {s for s in sources if s}
    if revisions:
        seen["source revision"] = revisions
    return {what: " | ".join(sorted(values)) for what, values in seen.items()}


def _absent(side: dict[str, str], what: str) -> str | None:
    """What a missing entry means on a side that recorded its kind: a package not installed, a variable unset."""
    if what.startswith("package ") and _PACKAGES_RECORDED in side:
        return "not installed"
    if what.startswith("env ") and _ENV_RECORDED in side:
        return "unset"
    return None


SOURCE_FILES = "source files that differ (bench/, models/)"


def files_change(files: list[str] | None, shown: int = 12) -> list[Change]:
    """The files that differ between two sources (bench/source_revision.differing_files) as one entry, first in
    what changed; nothing when there are none or they are unknown."""
    if not files:
        return []
    more = f" and {len(files) - shown} more" if len(files) > shown else ""
    return [Change(SOURCE_FILES, "", ", ".join(files[:shown]) + more, rank_of(SOURCE_FILES))]


def diff_environments(a: dict[str, str], b: dict[str, str], files: list[str] | None = None) -> list[Change]:
    """The entries whose values differ, most relevant first (then by name); `files`, the source files that differ
    between the two sides, right after the source revision. An entry one side lacks counts only where that side
    recorded its kind (packages, tuning variables); otherwise it was not recorded there."""
    changes = files_change(files)
    for what in sorted(a.keys() | b.keys()):
        if what.startswith("_"):
            continue
        before = a.get(what, _absent(a, what))
        after = b.get(what, _absent(b, what))
        if before is not None and after is not None and before != after:
            changes.append(Change(what, before, after, rank_of(what)))
    return sorted(changes, key=lambda c: (c.rank, c.what))
