"""The two sides a regression check compares, and the runs a baseline is saved from: a saved baseline file, a run in
the store, or `latest` (the newest run that recorded something)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.checks.baseline import baseline_windows, check_name, is_name, load_baseline, with_cpu_signatures
from bench.core.errors import BenchInputError


@dataclass
class CheckSide:
    """What one side of a check is: a label for people, and window-level rows (cell_id, cell keys, run_id, job,
    repeat, status, samples_per_sec) for bench.analysis.regress.observations."""
    label: str
    windows: pd.DataFrame  # with cpu_features: the CPU feature signature of the record/job, None if not recorded
    # What its records say of their environment (envdiff.environment_of); None: not recorded (a version 1 baseline).
    environment: dict[str, str] | None = None


def open_store_with_runs(store_path: str | Path):
    """The store at `store_path`, which must exist and hold at least one run (the caller closes it)."""
    from bench.store import Store

    store = Store(store_path, read_only=True)
    if not store.runs():
        store.close()
        raise BenchInputError("the store has no runs (run `bench run` first)", str(store_path))
    return store


def resolve_run(store, spec: str) -> str:
    """A run id from `latest` or an id the store has."""
    runs = store.runs()
    if spec == "latest":
        with_records = store.runs_with_records()
        measured = [r for r in runs if r["run_id"] in with_records]
        if not measured:
            raise BenchInputError("the store has no measured run", str(store.path))
        return measured[-1]["run_id"]
    if any(r["run_id"] == spec for r in runs):
        return spec
    raise BenchInputError(f"unknown run '{spec}' (not in the store; `bench status` lists runs)", str(store.path))


def run_windows(store, run_id: str) -> pd.DataFrame:
    """A run's training records (collective cells have no image rates to compare; docs/collectives.md), each with
    its CPU feature signature."""
    from bench.analysis.collectives import training_only

    df = training_only(store.dataframe())
    return with_cpu_signatures(df[df["run_id"] == run_id].reset_index(drop=True))


def resolve_side(spec: str, *, store_path: str | Path, baselines_dir: Path) -> CheckSide:
    """`run:ID`, `baseline:NAME`, a path to a baseline .json, `latest`, a baseline name under baselines_dir, or a
    run id in the store (tried in that order)."""
    kind, _, rest = spec.partition(":")
    if kind == "baseline" and rest:
        return _baseline_side(baselines_dir / f"{check_name(rest)}.json")
    if kind == "run" and rest:
        return _run_side(store_path, rest)
    if spec.endswith(".json") or "/" in spec:
        return _baseline_side(Path(spec))
    if spec != "latest" and is_name(spec) and (baselines_dir / f"{spec}.json").exists():
        return _baseline_side(baselines_dir / f"{spec}.json")
    if spec != "latest" and not Path(store_path).exists():
        raise BenchInputError(f"unknown run or baseline '{spec}' (no {baselines_dir / (spec + '.json')}, "
                              f"no store at {store_path})")
    return _run_side(store_path, spec)


def _baseline_side(path: Path) -> CheckSide:
    doc = load_baseline(path)
    return CheckSide(f"baseline {doc.get('name', path.stem)} ({path})", baseline_windows(doc), doc.get("environment"))


def _run_side(store_path: str | Path, spec: str) -> CheckSide:
    from bench.analysis.envdiff import environment_of
    from bench.core.source_revision import source_text

    store = open_store_with_runs(store_path)
    try:
        run_id = resolve_run(store, spec)
        windows = run_windows(store, run_id)
        run = next((r for r in store.runs() if r["run_id"] == run_id), {})
    finally:
        store.close()
    ok = windows[windows["status"] == "ok"] if "status" in windows else windows
    label = f"run {run_id}" + (" (latest)" if spec == "latest" else "")
    return CheckSide(label, windows, environment_of(ok, [run.get("bench_version") or ""], [source_text(run)]))
