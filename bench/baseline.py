"""Baselines and the sources a regression check compares: saved baseline files, stored runs, `latest`.

A baseline file is JSON, small and diff-friendly (sorted keys, one cell per block, cells in cell-id order), meant to
be committed: per cell its id, its settings and its per-job observations (each job's median and its windows, with
the run it came from), plus when, where and with which bench it was made. It may pool several runs of the same
matrix: more jobs make the rank test stronger, and runs made at different times carry the run-to-run noise a later
check will meet.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import re
import socket
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from bench.errors import BenchInputError
from bench.matrix import CELL_KEYS

BASELINE_FORMAT = "bench-baseline"
BASELINE_FORMAT_VERSION = 1
DEFAULT_BASELINES = Path("baselines")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass
class Source:
    """What one side of a check is: a label for people, and window-level rows (cell_id, cell keys, run_id, job,
    repeat, status, images_per_sec) for bench.analysis.regress.observations."""
    label: str
    windows: pd.DataFrame


# --- reading the store ----------------------------------------------------------------------------------------------

def _store(store_path: str | Path):
    from bench.store import Store

    store = Store(store_path, create=False)
    if not store.runs():
        store.close()
        raise BenchInputError("the store has no runs (run `bench run` first)", str(store_path))
    return store


def resolve_run(store, spec: str) -> str:
    runs = store.runs()
    if spec == "latest":
        with_records = {r[0] for r in store.conn.execute("SELECT DISTINCT run_id FROM records")}
        measured = [r for r in runs if r["run_id"] in with_records]
        if not measured:
            raise BenchInputError("the store has no measured run", str(store.path))
        return measured[-1]["run_id"]
    if any(r["run_id"] == spec for r in runs):
        return spec
    raise BenchInputError(f"unknown run '{spec}' (not in the store; `bench status` lists runs)", str(store.path))


def run_windows(store, run_id: str) -> pd.DataFrame:
    df = store.dataframe()
    return df[df["run_id"] == run_id].reset_index(drop=True)


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
    for key in ("ib", "channels_last"):
        if cell.get(key) is not None:
            cell[key] = bool(cell[key])
    return cell


def build_baseline(name: str, windows: pd.DataFrame, runs: list[dict[str, Any]], *, host: str | None = None,
                   bench_version: str | None = None) -> dict[str, Any]:
    """The baseline document from window-level rows of one or more runs (ok windows only)."""
    import bench

    ok = windows[windows["status"] == "ok"]
    if ok.empty:
        raise BenchInputError("nothing to save: the run(s) have no successful measurement")
    cells = []
    for cell_id, g in ok.groupby("cell_id", sort=True):
        jobs = []
        for (run_id, job), j in g.groupby(["run_id", "job"], sort=True):
            j = j.sort_values("repeat")
            rates = [float(x) for x in j["images_per_sec"]]
            jobs.append({"run_id": run_id, "job": int(job), "images_per_sec": statistics.median(rates),
                         "windows": rates})
        cells.append({"cell_id": cell_id, "cell": _cell_settings(g.iloc[0]), "jobs": jobs})
    now = time.time()
    return {
        "format": BASELINE_FORMAT, "format_version": BASELINE_FORMAT_VERSION, "name": name,
        "created_unix": round(now, 3),
        "created": _dt.datetime.fromtimestamp(now, _dt.timezone.utc).isoformat(timespec="seconds"),
        "host": host or socket.gethostname(), "bench_version": bench_version or bench.__version__,
        "runs": [{k: run.get(k) for k in ("run_id", "matrix_name", "matrix_path", "backend", "host",
                                          "bench_version", "started_unix")} for run in runs],
        "cells": cells,
    }


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise BenchInputError(f"bad baseline name '{name}' (letters, digits, '.', '_', '-'; no path)")
    return name


def save_baseline(doc: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)
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
            if not isinstance(job, dict) or not isinstance(job.get("run_id"), str) \
                    or not isinstance(job.get("job"), int) or isinstance(job.get("job"), bool):
                raise _corrupt(path, f"{jw}: needs run_id (text) and job (integer)")
            windows = job.get("windows")
            if not isinstance(windows, list) or not windows or not all(type(w) in (int, float) for w in windows) \
                    or not (min(windows) > 0 and math.isfinite(max(windows))):  # NaN/Infinity never parse
                raise _corrupt(path, f"{jw}.windows: must be a non-empty list of positive numbers")
            if not _positive(job.get("images_per_sec")):
                raise _corrupt(path, f"{jw}.images_per_sec: must be a positive number")
    return doc


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def baseline_windows(doc: dict[str, Any]) -> pd.DataFrame:
    """Window-level rows from a baseline document, the same columns a store run gives. Built column by column: a
    10,000-cell baseline must load in well under a second."""
    import numpy as np

    cell_index, run_ids, jobs, repeats, rates = [], [], [], [], []
    for i, cell in enumerate(doc["cells"]):
        for job in cell["jobs"]:
            windows = job["windows"]
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
    out["images_per_sec"] = np.asarray(rates, dtype=float)
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


# --- sources --------------------------------------------------------------------------------------------------------

def resolve_source(spec: str, *, store_path: str | Path, baselines_dir: Path) -> Source:
    """`run:ID`, `baseline:NAME`, a path to a baseline .json, `latest`, a baseline name under baselines_dir, or a
    run id in the store (tried in that order)."""
    kind, _, rest = spec.partition(":")
    if kind == "baseline" and rest:
        return _baseline_source(baselines_dir / f"{check_name(rest)}.json")
    if kind == "run" and rest:
        return _run_source(store_path, rest)
    if spec.endswith(".json") or "/" in spec:
        return _baseline_source(Path(spec))
    if spec != "latest" and _NAME.match(spec) and (baselines_dir / f"{spec}.json").exists():
        return _baseline_source(baselines_dir / f"{spec}.json")
    if spec != "latest" and not Path(store_path).exists():
        raise BenchInputError(f"unknown run or baseline '{spec}' (no {baselines_dir / (spec + '.json')}, "
                              f"no store at {store_path})")
    return _run_source(store_path, spec)


def _baseline_source(path: Path) -> Source:
    doc = load_baseline(path)
    return Source(f"baseline {doc.get('name', path.stem)} ({path})", baseline_windows(doc))


def _run_source(store_path: str | Path, spec: str) -> Source:
    store = _store(store_path)
    try:
        run_id = resolve_run(store, spec)
        windows = run_windows(store, run_id)
    finally:
        store.close()
    return Source(f"run {run_id}" + (" (latest)" if spec == "latest" else ""), windows)


def save_from_store(name: str, run_specs: list[str], *, store_path: str | Path, baselines_dir: Path,
                    out: Path | None = None) -> tuple[Path, dict[str, Any]]:
    check_name(name)
    store = _store(store_path)
    try:
        run_ids = []
        for spec in run_specs or ["latest"]:
            run_id = resolve_run(store, spec)
            if run_id not in run_ids:
                run_ids.append(run_id)
        df = store.dataframe()
        runs = [r for r in store.runs() if r["run_id"] in run_ids]
    finally:
        store.close()
    windows = df[df["run_id"].isin(run_ids)]
    doc = build_baseline(name, windows, runs)
    path = save_baseline(doc, out or baselines_dir / f"{name}.json")
    return path, doc


# --- the verbs (bench check, bench baseline save|list); cli.py parses, these run ---------------------------------------

def parse_normalize(text: str | None) -> dict[str, str] | None:
    """`none` (absolute images/sec) or `ratio-to:<cell selector>` (see regress.parse_selector)."""
    from bench.analysis.regress import parse_selector

    if text is None or text == "none":
        return None
    kind, sep, rest = text.partition(":")
    if kind != "ratio-to" or not sep or not rest.strip():
        raise BenchInputError(f"--normalize: expected 'none' or 'ratio-to:<key=value,...>', got '{text}'")
    return parse_selector(rest)


def _label(row) -> str:
    ib = "on" if row["ib"] is True or row["ib"] == 1 else "off"
    label = f"{row['gpu']}/{row['framework']}/{row['mpi']}/ib={ib}/{row['gpus']}w"
    if row.get("engine") == "native":
        label += " DDP"
    if row.get("data") == "imagenet":
        label += f" {row.get('data_layout')}"
    return label


def _fmt(x: float, digits: int = 1) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


_STYLE = {"regressed": "bold red", "improved": "green", "unchanged": "", "inconclusive": "yellow",
          "insufficient-data": "dim"}
_MAX_ROWS = 60


def cmd_check(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from bench.analysis.regress import CheckSettings, compare, normalize_ratio_to, observations, summary_counts

    settings = CheckSettings(min_effect=args.min_effect)
    selector = parse_normalize(args.normalize)
    baselines_dir = Path(args.baselines_dir)
    base = resolve_source(args.baseline, store_path=args.store, baselines_dir=baselines_dir)
    cand = resolve_source(args.candidate, store_path=args.store, baselines_dir=baselines_dir)
    b_obs, c_obs = observations(base.windows), observations(cand.windows)
    if b_obs.empty:
        raise BenchInputError(f"the baseline ({base.label}) has no successful measurement")
    if c_obs.empty:
        raise BenchInputError(f"the candidate ({cand.label}) has no successful measurement")
    if selector is not None:
        b_obs = normalize_ratio_to(b_obs, selector, "baseline")
        c_obs = normalize_ratio_to(c_obs, selector, "candidate")
    result = compare(b_obs, c_obs, settings)
    counts = summary_counts(result)

    unit = "× reference" if selector else "img/s"
    console = Console(width=None if sys.stdout.isatty() else 160, soft_wrap=False)
    shown = result if len(result) <= _MAX_ROWS or args.all else result[result["verdict"] != "unchanged"]
    table = Table(title=f"check: {cand.label} against {base.label}", title_justify="left")
    for col, justify in (("cell", "left"), ("cell_id", "left"), ("n b/c", "right"), (f"baseline ({unit})", "right"),
                         (f"candidate ({unit})", "right"), ("ratio", "right"), ("interval", "right"),
                         ("p", "right"), ("verdict", "left"), ("note", "left")):
        table.add_column(col, justify=justify, overflow="fold")
    digits = 3 if selector else 1
    for row in shown.head(_MAX_ROWS if not args.all else len(shown)).to_dict("records"):
        interval = "-" if not math.isfinite(row["ci_low"]) else \
            f"{row['ci_low']:.3f}–{row['ci_high']:.3f} ({row['ci_coverage']:.0%})"
        table.add_row(_label(row), row["cell_id"], f"{row['n_baseline']}/{row['n_candidate']}",
                      _fmt(row["baseline_median"], digits), _fmt(row["candidate_median"], digits),
                      _fmt(row["ratio"], 3), interval, _fmt(row["p_value"], 3),
                      f"[{_STYLE[row['verdict']]}]{row['verdict']}[/]" if _STYLE[row["verdict"]] else row["verdict"],
                      row["note"] or "")
    console.print(table)
    hidden = len(result) - min(len(shown), _MAX_ROWS if not args.all else len(shown))
    if hidden:
        console.print(f"({hidden} more cells not shown, {counts['unchanged']} of all cells unchanged; --all shows "
                      f"every cell)", highlight=False)
    how = f"normalised by {args.normalize[len('ratio-to:'):]}" if selector else "absolute images/sec"
    print(f"check: {len(result)} cells: " + ", ".join(f"{n} {v}" for v, n in counts.items()) +
          f" ({how}; min effect {settings.min_effect:.0%}; one-sided rank test at {settings.alpha:g})")
    return 1 if counts["regressed"] else 0


def cmd_baseline(args) -> int:
    baselines_dir = Path(args.baselines_dir)
    if args.baseline_verb == "save":
        path, doc = save_from_store(args.name, args.run, store_path=args.store, baselines_dir=baselines_dir,
                                    out=Path(args.output) if args.output else None)
        jobs = sum(len(c["jobs"]) for c in doc["cells"])
        print(f"baseline {doc['name']}: {len(doc['cells'])} cells, {jobs} jobs from "
              f"{', '.join(r['run_id'] for r in doc['runs'])} → {path}")
        return 0
    entries = list_baselines(baselines_dir)
    if not entries:
        print(f"no baselines in {baselines_dir}/")
    for e in entries:
        if "error" in e:
            print(f"{e['name']:<24} unreadable: {e['error']}")
        else:
            print(f"{e['name']:<24} {e['cells']:5d} cells {e['jobs']:6d} jobs {e['runs']:3d} runs  {e['created']}  "
                  f"{e['host']}  bench {e['bench_version']}  {e['path']}")
    return 0
