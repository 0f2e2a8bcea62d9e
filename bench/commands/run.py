"""`bench run MATRIX`: measure the matrix's runnable cells into the store, resuming past cells already complete."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

from bench.backend_settings.registry import BACKENDS
from bench.commands.shared import add_store_argument, add_where_argument
from bench.core.errors import BenchInputError, RunFailed

HELP = "run the matrix's runnable cells; resumes by default"


def add_arguments(parser) -> None:
    parser.add_argument("matrix")
    parser.add_argument("--backend", choices=tuple(BACKENDS), default=None)
    add_store_argument(parser)
    parser.add_argument("--rerun", action="store_true", help="measure cells again even if the store has them")
    parser.add_argument("--skip-failed", action="store_true",
                        help="resume past failed cells too: a cell whose last attempt failed or timed out is not "
                             "tried again (still counted failed: exit 1)")
    add_where_argument(parser, "`bench plan MATRIX --where ...` shows which")
    parser.add_argument("--timeout", type=float, default=None,
                        help="per-cell timeout in seconds (overrides the matrix)")
    parser.add_argument("--no-probe", action="store_true",
                        help="local backend: no compute probe before co-located multi-worker CPU cells (their "
                             "expected values then fall back to N x the 1-worker rate)")


def run(args) -> int:
    from bench.commands.shared import backend_for
    from bench.planning.matrix import load_matrix
    from bench.planning.plan import plan_cells, select_cells
    from bench.store import Store, check_writable

    if args.rerun and args.skip_failed:
        raise BenchInputError("--rerun measures every cell again and --skip-failed leaves failed ones alone; "
                              "give one of them")
    if args.timeout is not None and args.timeout <= 0:
        raise BenchInputError(f"--timeout must be positive, got {args.timeout:g}")
    matrix = load_matrix(args.matrix)  # all input is checked before anything is written
    store_path = Path(args.store)
    backend = backend_for(args.backend, matrix, store_path.parent, args.timeout)
    if getattr(args, "no_probe", False):
        backend.probe_compute = False
    planned = select_cells(plan_cells(matrix.cells(), backend), args.where)
    if args.where and not any(p.runnable for p in planned):
        from collections import Counter

        from bench.core.redact import redact_text

        # A reason may quote a path or URL from the matrix, as in the run's own skip lines.
        (reason, n), *rest = Counter(redact_text(p.reason) for p in planned).most_common()
        more = f" ({len(rest)} other reasons: `bench plan {args.matrix} --where {args.where} --all`)" if rest else ""
        raise BenchInputError(f"the {len(planned)} cell(s) it selects are all skipped; {n} of them: {reason}{more}",
                              "--where")
    # The results directory and the store are input too: a full or read-only disk, a file that is not a store or
    # one from a newer bench is one line and exit 2 before anything is printed, made or run.
    backend.check(planned)  # the backend's own preconditions (a cluster that answers, a workspace), nothing written
    check_writable(store_path)
    store = Store(store_path)
    try:
        return _run_on(args, matrix, backend, planned, store, store_path)
    finally:
        store.close()


def _run_on(args, matrix, backend, planned, store, store_path: Path) -> int:
    from rich.console import Console

    import bench
    from bench.core.redact import redact_text
    from bench.core.source_revision import of_checkout
    from bench.execution.runner import new_run_id, run_plan
    from bench.store import StoreError

    console = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 120)
    skipped = [p for p in planned if not p.runnable]
    selected = f" selected by --where {args.where}" if args.where else ""
    console.print(f"{matrix.name}: {len(planned)} cells{selected}, {len(planned) - len(skipped)} runnable on "
                  f"{backend.name}, {len(skipped)} skipped", highlight=False)
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
                        source_json=of_checkout().to_json(),
                        plan={"cells": len(planned), "skipped": len(skipped), "skip_reasons": reasons,
                              **({"where": args.where} if args.where else {})})
        summary = run_plan(planned, backend, store, run_id=run_id, rerun=args.rerun,
                           skip_failed=args.skip_failed, console=console)
        store.finish_run(run_id)
    except StoreError as e:  # the run's own bookkeeping row could not be written (disk filled up, say)
        raise RunFailed(f"{store_path}: the store refused a write ({e.reason}); cells already recorded are kept") \
            from None
    if summary.probes_measured or summary.probes_reused or summary.probes_failed:
        share = f"{100 * summary.probe_s / summary.cells_s:.1f}% of" if summary.cells_s else "beside"
        console.print(f"probes (compute and engine): {summary.probes_measured} measured, {summary.probes_reused} "
                      f"reused, {summary.probes_failed} failed; {summary.probe_s:.0f} s, {share} the cells' "
                      f"{summary.cells_s:.0f} s ({store_path.parent / 'probes'})", highlight=False)
    not_retried = f", {summary.not_retried} failed before and not retried" if summary.not_retried else ""
    console.print(f"run {run_id}: {summary.ok} ok, {len(summary.failed)} failed{not_retried}, {summary.resumed} "
                  f"already in the store, {summary.skipped} skipped; store: {store_path}")
    return summary.exit_code
