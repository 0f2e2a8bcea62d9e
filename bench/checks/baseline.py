"""Baseline files: their format, building one from stored windows, saving, loading and listing them.

A baseline file is JSON, small and diff-friendly (sorted keys, one cell per block, cells in cell-id order), meant to
be committed: per cell its id, its settings and its per-job observations (each job's median and its windows, with
the run it came from), plus when, where and with which bench it was made. It may pool several runs of the same
matrix: more jobs make the rank test stronger, and runs made at different times carry the run-to-run noise a later
check will meet.

Format versions: 1, the cells and where they came from; 2 adds `environment`, what the saved runs' records say of
their environment (bench/analysis/envdiff.environment_of: "what" → value, e.g. "package torch" → "2.13.0"), so that
`bench check` can say what changed between a baseline file and a candidate run. Version 1 files still load (no
environment: "what changed" is then not known).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import re
import socket
import statistics
import time
from pathlib import Path
from typing import Any

import pandas as pd

from bench.cells.keys import BOOL_KEYS, CELL_KEYS
from bench.core.errors import BenchInputError
from models.probes.cpufeatures import signature

BASELINE_FORMAT = "bench-baseline"
BASELINE_FORMAT_VERSION = 2
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def is_name(text: str) -> bool:
    """Whether `text` can be a baseline's name (and so a file baselines/NAME.json)."""
    return bool(_NAME.match(text))


# --- baseline files -------------------------------------------------------------------------------------------------

def _plain(value: Any) -> Any:
    """A cell value as plain JSON (numpy/pandas scalars and NA → int, bool, str, None)."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if hasattr(value, "item"):
        value = value.item()
    return value


def _cell_settings(row: pd.Series) -> dict[str, Any]:
    cell = {k: _plain(row[k]) for k in CELL_KEYS}
    for key in BOOL_KEYS:
        if cell.get(key) is not None:
            cell[key] = bool(cell[key])
    return cell


def record_cpu_signature(record_json: Any) -> str | None:
    """The CPU feature signature (models/probes/cpufeatures.signature) a record's env_probe holds; None for records made
    before the probe read CPU flags, or without their JSON."""
    if not isinstance(record_json, str) or not record_json:
        return None
    try:
        cpu = (json.loads(record_json).get("env_probe") or {}).get("cpu") or {}
    except (ValueError, AttributeError):
        return None
    return signature(cpu.get("features")) if isinstance(cpu, dict) else None


def with_cpu_signatures(windows: pd.DataFrame) -> pd.DataFrame:
    """Window rows with a `cpu_features` column (signature or None), from record_json where the rows have it."""
    if "cpu_features" in windows:
        return windows
    source = windows["record_json"] if "record_json" in windows else pd.Series(None, index=windows.index)
    return windows.assign(cpu_features=source.map(record_cpu_signature).astype(object))


def build_baseline(name: str, windows: pd.DataFrame, runs: list[dict[str, Any]], *, host: str | None = None,
                   bench_version: str | None = None) -> dict[str, Any]:
    """The baseline document from window-level rows of one or more runs (ok windows only)."""
    import bench

    ok = with_cpu_signatures(windows[windows["status"] == "ok"])
    if ok.empty:
        raise BenchInputError("nothing to save: the run(s) have no successful measurement")
    cells = []
    for cell_id, g in ok.groupby("cell_id", sort=True):
        jobs = []
        for (run_id, job), j in g.groupby(["run_id", "job"], sort=True):
            j = j.sort_values("repeat")
            rates = [float(x) for x in j["samples_per_sec"]]
            entry = {"run_id": run_id, "job": int(job), "samples_per_sec": statistics.median(rates), "windows": rates}
            cpu = next((x for x in j["cpu_features"] if isinstance(x, str)), None)
            if cpu:  # optional: baselines saved before it load as 'features not recorded'
                entry["cpu_features"] = cpu
            jobs.append(entry)
        cells.append({"cell_id": cell_id, "cell": _cell_settings(g.iloc[0]), "jobs": jobs})
    from bench.analysis.envdiff import environment_of
    from bench.core.source_revision import source_text

    now = time.time()
    return {
        "format": BASELINE_FORMAT, "format_version": BASELINE_FORMAT_VERSION, "name": name,
        "created_unix": round(now, 3),
        "created": _dt.datetime.fromtimestamp(now, _dt.timezone.utc).isoformat(timespec="seconds"),
        "host": host or socket.gethostname(), "bench_version": bench_version or bench.__version__,
        "runs": [{k: run.get(k) for k in ("run_id", "matrix_name", "matrix_path", "backend", "host",
                                          "bench_version", "started_unix")} for run in runs],
        "cells": cells,
        # Flattened rather than the raw records: one entry per fact, whatever the number of cells (files stay small
        # and a reviewer reads a changed library version in the file's diff).
        "environment": environment_of(ok, [run.get("bench_version") or "" for run in runs],
                                      [source_text(run) for run in runs]),
    }


def check_name(name: str) -> str:
    if not is_name(name):
        raise BenchInputError(f"bad baseline name '{name}' (letters, digits, '.', '_', '-'; no path)")
    return name


def save_baseline(doc: dict[str, Any], path: Path) -> Path:
    """Written whole or not at all (a temporary file renamed over it); a path that cannot be written is bad input."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise BenchInputError(f"cannot write the baseline: {e.strerror or e}", str(path)) from None
    return path


def _corrupt(path: Path, why: str) -> BenchInputError:
    return BenchInputError(f"corrupt baseline file: {why}", str(path))


def load_baseline(path: Path) -> dict[str, Any]:
    """Reads and validates a baseline file; anything wrong is one BenchInputError line naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BenchInputError("no such baseline file", str(path)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise _corrupt(path, f"cannot read it ({e})") from None
    try:
        doc = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"{c} is not allowed")))
    except ValueError as e:
        raise _corrupt(path, f"not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != BASELINE_FORMAT:
        raise _corrupt(path, f"not a bench baseline (format must be '{BASELINE_FORMAT}')")
    version = doc.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise _corrupt(path, "format_version missing or not a positive integer")
    if version > BASELINE_FORMAT_VERSION:
        raise BenchInputError(f"baseline format {version} is newer than this bench understands "
                              f"({BASELINE_FORMAT_VERSION}); upgrade bench", str(path))
    environment = doc.get("environment")
    if environment is not None and not (isinstance(environment, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in environment.items())):
        raise _corrupt(path, "'environment' must be an object of text values")
    cells = doc.get("cells")
    if not isinstance(cells, list) or not cells:
        raise _corrupt(path, "'cells' must be a non-empty list")
    for i, cell in enumerate(cells):
        where = f"cells[{i}]"
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_id"), str) or not cell["cell_id"]:
            raise _corrupt(path, f"{where}: needs a cell_id")
        if not isinstance(cell.get("cell"), dict) or set(cell["cell"]) - set(CELL_KEYS):
            raise _corrupt(path, f"{where}.cell: must be an object of cell keys")
        jobs = cell.get("jobs")
        if not isinstance(jobs, list) or not jobs:
            raise _corrupt(path, f"{where}.jobs: must be a non-empty list")
        for k, job in enumerate(jobs):
            jw = f"{where}.jobs[{k}]"
            if isinstance(job, dict) and "images_per_sec" in job and "samples_per_sec" not in job:
                # Baselines saved before the workload was an axis: the same per-job median under its old name.
                job["samples_per_sec"] = job.pop("images_per_sec")
            if not isinstance(job, dict) or not isinstance(job.get("run_id"), str) \
                    or not isinstance(job.get("job"), int) or isinstance(job.get("job"), bool):
                raise _corrupt(path, f"{jw}: needs run_id (text) and job (integer)")
            windows = job.get("windows")
            if not isinstance(windows, list) or not windows or not all(type(w) in (int, float) for w in windows) \
                    or not (min(windows) > 0 and math.isfinite(max(windows))):  # NaN/Infinity never parse
                raise _corrupt(path, f"{jw}.windows: must be a non-empty list of positive numbers")
            if not _positive(job.get("samples_per_sec")):
                raise _corrupt(path, f"{jw}.samples_per_sec: must be a positive number")
            if "cpu_features" in job and not isinstance(job["cpu_features"], str):
                raise _corrupt(path, f"{jw}.cpu_features: must be text ('+flag -flag ...')")
    return doc


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def baseline_windows(doc: dict[str, Any]) -> pd.DataFrame:
    """Window-level rows from a baseline document, the same columns a store run gives. Built column by column: a
    10,000-cell baseline must load in well under a second."""
    import numpy as np

    cell_index, run_ids, jobs, repeats, rates, cpus = [], [], [], [], [], []
    for i, cell in enumerate(doc["cells"]):
        for job in cell["jobs"]:
            windows = job["windows"]
            cpus += [job.get("cpu_features")] * len(windows)
            cell_index += [i] * len(windows)
            run_ids += [job["run_id"]] * len(windows)
            jobs += [job["job"]] * len(windows)
            repeats += range(len(windows))
            rates += windows
    settings = pd.DataFrame([{"cell_id": c["cell_id"], **{k: c["cell"].get(k) for k in CELL_KEYS}}
                             for c in doc["cells"]])
    out = settings.iloc[np.asarray(cell_index, dtype=np.int64)].reset_index(drop=True)
    out["run_id"] = run_ids
    out["job"] = np.asarray(jobs, dtype=np.int64)
    out["repeat"] = np.asarray(repeats, dtype=np.int64)
    out["status"] = "ok"
    out["samples_per_sec"] = np.asarray(rates, dtype=float)
    out["cpu_features"] = pd.Series(cpus, dtype=object)
    return out


def list_baselines(directory: Path) -> list[dict[str, Any]]:
    """One entry per *.json in the directory: name, cells, jobs, runs, created, host, or the error if unreadable."""
    out = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            doc = load_baseline(path)
        except BenchInputError as e:
            out.append({"name": path.stem, "path": str(path), "error": str(e)})
            continue
        out.append({"name": doc.get("name", path.stem), "path": str(path), "cells": len(doc["cells"]),
                    "jobs": sum(len(c["jobs"]) for c in doc["cells"]), "runs": len(doc.get("runs", [])),
                    "created": doc.get("created", "?"), "host": doc.get("host", "?"),
                    "bench_version": doc.get("bench_version", "?")})
    return out
