"""`bench baseline save NAME [--run RUN ...]` and `bench baseline list`: baseline files (bench/checks/baseline.py) from
runs in the store."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.commands import EXIT_OK
from bench.commands.shared import add_baselines_dir_argument, add_store_argument

HELP = "save or list baselines (baselines/NAME.json)"


def add_arguments(parser) -> None:
    verbs = parser.add_subparsers(dest="baseline_verb", required=True)
    b = verbs.add_parser("save", help="save run(s) from the store as a baseline file")
    b.add_argument("name")
    b.add_argument("--run", action="append", default=[],
                   help="run id or latest (repeat to pool runs; default latest)")
    add_store_argument(b)
    add_baselines_dir_argument(b)
    b.add_argument("-o", "--output", help="write here instead of <baselines-dir>/NAME.json")
    b = verbs.add_parser("list", help="the saved baselines")
    add_baselines_dir_argument(b)


def save_from_store(name: str, run_specs: list[str], *, store_path: str | Path, baselines_dir: Path,
                    out: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """Saves the runs `run_specs` name (default the latest) as baseline NAME; returns its path and document."""
    from bench.checks.baseline import build_baseline, check_name, save_baseline
    from bench.checks.sides import open_store_with_runs, resolve_run

    check_name(name)
    store = open_store_with_runs(store_path)
    try:
        run_ids = []
        for spec in run_specs or ["latest"]:
            run_id = resolve_run(store, spec)
            if run_id not in run_ids:
                run_ids.append(run_id)
        from bench.analysis.collectives import training_only

        df = training_only(store.dataframe())  # a baseline holds image rates; collective cells have none
        runs = [r for r in store.runs() if r["run_id"] in run_ids]
    finally:
        store.close()
    doc = build_baseline(name, df[df["run_id"].isin(run_ids)], runs)
    path = save_baseline(doc, out or baselines_dir / f"{name}.json")
    return path, doc


def run(args) -> int:
    from bench.checks.baseline import list_baselines

    baselines_dir = Path(args.baselines_dir)
    if args.baseline_verb == "save":
        path, doc = save_from_store(args.name, args.run, store_path=args.store, baselines_dir=baselines_dir,
                                    out=Path(args.output) if args.output else None)
        jobs = sum(len(c["jobs"]) for c in doc["cells"])
        print(f"baseline {doc['name']}: {len(doc['cells'])} cells, {jobs} jobs from "
              f"{', '.join(r['run_id'] for r in doc['runs'])} → {path}")
        return EXIT_OK
    entries = list_baselines(baselines_dir)
    if not entries:
        print(f"no baselines in {baselines_dir}/")
    for e in entries:
        if "error" in e:
            print(f"{e['name']:<24} unreadable: {e['error']}")
        else:
            print(f"{e['name']:<24} {e['cells']:5d} cells {e['jobs']:6d} jobs {e['runs']:3d} runs  {e['created']}  "
                  f"{e['host']}  bench {e['bench_version']}  {e['path']}")
    return EXIT_OK
