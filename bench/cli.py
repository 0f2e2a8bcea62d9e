"""Thin CLI: parse, call, map errors to exit codes (0 ok, 1 a cell failed, 2 bad input or usage)."""
from __future__ import annotations

import argparse
import json
import shlex
import signal
import socket
import sys
from pathlib import Path

from bench.errors import BenchInputError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (running cells stopped and recorded) but exiting 143."""


def _on_sigterm(signum, frame):
    raise Terminated()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too; keep it to one line)
        raise BenchInputError(f"usage: {message} (see `bench {self.prog.split()[-1]} --help`)"
                              if " " in self.prog else f"usage: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bench", description="Distributed training throughput benchmarks (Horovod ResNet-50).")
    sub = p.add_subparsers(dest="verb", required=True, parser_class=_Parser)

    s = sub.add_parser("plan", help="expand a matrix and show every cell, planned or skipped with the reason")
    s.add_argument("matrix")
    s.add_argument("--format", choices=("table", "json"), default="table")
    s.add_argument("--show-commands", action="store_true", help="add the exact argv and env of each runnable cell")
    s.add_argument("--backend", choices=("local", "slurm", "azureml"), default=None)

    s = sub.add_parser("run", help="run the matrix's runnable cells; resumes by default")
    s.add_argument("matrix")
    s.add_argument("--backend", choices=("local", "slurm", "azureml"), default=None)
    s.add_argument("--store", default="results/bench.db")
    s.add_argument("--rerun", action="store_true", help="measure cells again even if the store has them")
    s.add_argument("--timeout", type=float, default=None, help="per-cell timeout in seconds (overrides the matrix)")

    s = sub.add_parser("status", help="runs in the store and the state of their cells")
    s.add_argument("--store", default="results/bench.db")

    s = sub.add_parser("report", help="write the HTML/Markdown/PNG report from the store")
    s.add_argument("--store", default="results/bench.db")
    s.add_argument("--out", default="reports")
    s.add_argument("--where", default=None, help="cells to report: key=value[,key=v1|v2...], e.g. gpu=V100,mpi=gloo")
    s.add_argument("--prices", default=None, help="YAML: gpu → {price_per_hour_usd, price_read}; overrides catalogue")

    s = sub.add_parser("import", help="load published or exported results into the store, marked with their source")
    s.add_argument("file", help="a `bench export --format csv` file, or a reference CSV (bench/data/reference/)")
    s.add_argument("--store", default="results/bench.db")
    s.add_argument("--source", default=None, help="name the imported records carry (run id import:<source>:...)")

    s = sub.add_parser("export", help="export the store's records")
    s.add_argument("--store", default="results/bench.db")
    s.add_argument("--format", choices=("csv", "json", "parquet"), default="csv")
    s.add_argument("-o", "--output", required=True)

    s = sub.add_parser("doctor", help="what this machine can run")

    s = sub.add_parser("images", help="container images for cluster backends (docker/rendered)")
    s.add_argument("action", choices=("render", "list"))
    s.add_argument("out_dir", nargs="?", help="where `render` writes (default docker/rendered)")

    s = sub.add_parser("data", help="data sets for real-data cells")
    data = s.add_subparsers(dest="data_verb", required=True, parser_class=_Parser)
    d = data.add_parser("make-imagenet-sample", help="write a small, valid ImageNet sample in both layouts")
    d.add_argument("dir")
    d.add_argument("--classes", type=int, default=10)
    d.add_argument("--per-class", type=int, default=20)
    d.add_argument("--seed", type=int, default=0)

    # Regression check (bench/baseline.py runs these; bench/analysis/regress.py decides).
    s = sub.add_parser("check", help="regression verdicts: a candidate run against a baseline; exit 1 on regression")
    s.add_argument("--baseline", required=True, help="baseline name/file, run id, run:ID, baseline:NAME or latest")
    s.add_argument("--candidate", default="latest", help="the same forms (default: latest run in the store)")
    s.add_argument("--store", default="results/bench.db")
    s.add_argument("--baselines-dir", default="baselines")
    s.add_argument("--min-effect", type=float, default=0.05, help="smallest |ratio - 1| called a change (0.05 = 5%%)")
    s.add_argument("--normalize", default="none", help="none, or ratio-to:<key=value,...> (a cell of the same run)")
    s.add_argument("--all", action="store_true", help="list every cell, unchanged ones too")
    s = sub.add_parser("baseline", help="save or list baselines (baselines/NAME.json)")
    bl = s.add_subparsers(dest="baseline_verb", required=True, parser_class=_Parser)
    b = bl.add_parser("save", help="save run(s) from the store as a baseline file")
    b.add_argument("name")
    b.add_argument("--run", action="append", default=[], help="run id or latest (repeat to pool runs; default latest)")
    b.add_argument("--store", default="results/bench.db")
    b.add_argument("--baselines-dir", default="baselines")
    b.add_argument("-o", "--output", help="write here instead of <baselines-dir>/NAME.json")
    b = bl.add_parser("list", help="the saved baselines")
    b.add_argument("--baselines-dir", default="baselines")
    return p


def main(argv: list[str] | None = None) -> int:
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    # Ctrl-C must stop the running cells and record them, even when bench was started with SIGINT ignored (as a
    # shell's background jobs are): Python then installs no KeyboardInterrupt handler of its own.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        args = build_parser().parse_args(argv)
        return VERBS[args.verb](args)
    except BenchInputError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Terminated:
        print("bench: terminated; the running cell was stopped and recorded as interrupted", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("bench: interrupted; the running cell was stopped and recorded as interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def _backend(name: str | None, matrix, results_dir: Path, timeout: float | None = None):
    from bench.backends import make_backend

    return make_backend(name or matrix.spec.backend.name, matrix.spec.backend, results_dir, timeout)


def cmd_plan(args) -> int:
    from bench.matrix import load_matrix
    from bench.plan import plan_cells
    from bench.runner import new_run_id

    matrix = load_matrix(args.matrix)
    backend = _backend(args.backend, matrix, Path("results"))
    planned = plan_cells(matrix.cells(), backend)
    run_id = "RUN_ID" if args.show_commands else new_run_id()
    if args.format == "json":
        rows = []
        for p in planned:
            row = {"cell_id": p.cell_id, **p.cell, "nodes": p.nodes, "status": p.status, "reason": p.reason}
            if args.show_commands and p.runnable:
                row["command"] = backend.describe(p, run_id)
            rows.append(row)
        json.dump(rows, sys.stdout, indent=1)
        print()
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{matrix.name}: {len(planned)} cells, {sum(p.runnable for p in planned)} planned")
    for col in ("cell_id", "gpu", "framework", "mpi", "ib", "gpus", "nodes", "status", "reason"):
        table.add_column(col, overflow="fold")
    for p in planned:
        c = p.cell
        table.add_row(p.cell_id, c["gpu"], c["framework"], c["mpi"], "on" if c["ib"] else "off", str(c["gpus"]),
                      str(p.nodes), p.status, p.reason or "")
    console.print(table)
    if args.show_commands:
        for p in planned:
            if p.runnable:
                console.print(f"\n[bold]{p.cell_id}[/] {p.label()}", highlight=False)
                for key, value in backend.describe(p, run_id).items():
                    console.print(_show(key, value), highlight=False, soft_wrap=True, markup=False)
    return EXIT_OK


def _show(key: str, value) -> str:
    """One part of a cell's launch for `plan --show-commands`: argv and env as shell-quoted text, documents
    (an sbatch script, an Azure ML job YAML) as they are, indented."""
    if key == "argv":
        return "  argv: " + shlex.join(value)
    if key == "env":
        return "  env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(value.items()))
    return f"  {key}:\n" + "\n".join("    " + line for line in str(value).splitlines())


def cmd_run(args) -> int:
    from bench.matrix import load_matrix
    from bench.plan import plan_cells
    from bench.store import Store, check_writable

    if args.timeout is not None and args.timeout <= 0:
        raise BenchInputError(f"--timeout must be positive, got {args.timeout:g}")
    matrix = load_matrix(args.matrix)  # all input is checked before anything is written
    store_path = Path(args.store)
    backend = _backend(args.backend, matrix, store_path.parent, args.timeout)
    planned = plan_cells(matrix.cells(), backend)
    # The results directory and the store are input too: a full or read-only disk, a file that is not a store or
    # one from a newer bench is one line and exit 2 before anything is printed, made or run.
    check = getattr(backend, "check", None)
    if check is not None:  # the backend's own preconditions (a cluster that answers, a workspace), nothing written
        check(planned)
    check_writable(store_path)
    store = Store(store_path)
    try:
        return _run_on(args, matrix, backend, planned, store, store_path)
    finally:
        store.close()


def _run_on(args, matrix, backend, planned, store, store_path: Path) -> int:
    import sqlite3

    from rich.console import Console

    import bench
    from bench.redact import redact_text
    from bench.runner import StoreWriteFailed, new_run_id, run_plan

    console = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 120)
    skipped = [p for p in planned if not p.runnable]
    console.print(f"{matrix.name}: {len(planned)} cells, {len(planned) - len(skipped)} runnable on "
                  f"{backend.name}, {len(skipped)} skipped")
    reasons: dict[str, int] = {}
    for p in skipped:
        reason = redact_text(p.reason)  # a reason may quote a path or URL from the matrix
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:8]:
        console.print(f"  skipped {n:5d}: {reason}", highlight=False)
    if len(reasons) > 8:
        console.print(f"  ... {len(reasons) - 8} more reasons (`bench plan {args.matrix}` lists every cell)")

    run_id = new_run_id()
    backend.prepare(planned, say=lambda text: console.print(redact_text(text), highlight=False))
    try:
        store.begin_run(run_id, matrix_name=matrix.name, matrix_path=str(args.matrix), backend=backend.name,
                        host=socket.gethostname(), bench_version=bench.__version__,
                        plan={"cells": len(planned), "skipped": len(skipped), "skip_reasons": reasons})
        summary = run_plan(planned, backend, store, run_id=run_id, rerun=args.rerun, console=console)
        store.finish_run(run_id)
    except StoreWriteFailed as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except sqlite3.Error as e:  # the run's own bookkeeping row could not be written (disk filled up, say)
        print(f"bench: error: {store_path}: the store refused a write ({e}); cells already recorded are kept",
              file=sys.stderr)
        return EXIT_FAILED
    console.print(f"run {run_id}: {summary.ok} ok, {len(summary.failed)} failed, {summary.resumed} already in the "
                  f"store, {summary.skipped} skipped; store: {store_path}")
    return summary.exit_code


def cmd_status(args) -> int:
    from bench.store import Store

    with Store(args.store, create=False) as store:
        runs = store.runs()
        for run in runs:
            rows = store.records("WHERE run_id = ?", (run["run_id"],))
            cells = {r["cell_id"] for r in rows}
            failed = {r["cell_id"] for r in rows if r["status"] != "ok"}
            print(f"{run['run_id']}  {run['matrix_name']}  {run['backend']}  cells run: {len(cells)}  "
                  f"failed: {len(failed)}  {'finished' if run['finished_unix'] else 'unfinished'}")
        print(f"{len(store.completed_cells())} cell(s) complete in {args.store}")
    return EXIT_OK


def cmd_report(args) -> int:
    from bench.report.render import report_from_store

    paths = report_from_store(args.store, Path(args.out), where=args.where, prices_file=args.prices)
    for path in paths:
        print(path)
    return EXIT_OK


def cmd_export(args) -> int:
    from bench.store import Store

    with Store(args.store, create=False) as store:
        df = store.dataframe()
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.format == "csv":
        df.to_csv(out, index=False)
    elif args.format == "json":
        df.to_json(out, orient="records", lines=True)
    else:
        df.to_parquet(out, index=False)
    print(f"{len(df)} records → {out}")
    return EXIT_OK


def cmd_doctor(args) -> int:
    from bench.doctor import report

    text, code = report()
    print(text)
    return code


def cmd_data(args) -> int:
    from bench.datasets import make_imagenet_sample

    made = make_imagenet_sample(args.dir, args.classes, args.per_class, seed=args.seed)
    print(f"{made['images']} images in {made['classes']} classes, layouts: {', '.join(made['layouts'])}: "
          f"{made['dir']}/train/<wnid>/*.JPEG and {made['dir']}/tfrecord/train-*")
    return EXIT_OK


def cmd_images(args) -> int:
    from bench import images

    return images.main([args.action] + ([args.out_dir] if args.out_dir else []))


def cmd_import(args) -> int:
    from bench.importer import import_file

    batch, n = import_file(args.file, args.store, args.source)
    left = "".join(f"; {k}: {v} row(s) left out" for k, v in batch.left_out.items())
    print(f"{n} records imported from {args.file} ({batch.fmt}) as source '{batch.source}', run(s) "
          f"{', '.join(batch.runs) if len(batch.runs) <= 3 else f'{len(batch.runs)} runs'}{left} → {args.store}")
    return EXIT_OK


VERBS = {"import": cmd_import, "images": cmd_images, "data": cmd_data, "plan": cmd_plan, "run": cmd_run, "status": cmd_status, "report": cmd_report,
         "export": cmd_export,
         "doctor": cmd_doctor,
         "check": lambda args: __import__("bench.baseline", fromlist=["cmd_check"]).cmd_check(args),
         "baseline": lambda args: __import__("bench.baseline", fromlist=["cmd_baseline"]).cmd_baseline(args)}
