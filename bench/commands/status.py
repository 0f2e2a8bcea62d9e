"""`bench status`: the runs in the store and the state of their cells, and for each measured multi-worker cell its
expected value, verdict and slow rank, and where its step time went (bench/analysis/expected.py)."""
from __future__ import annotations

from bench.commands import EXIT_OK
from bench.commands.shared import add_store_argument, expected_lines

HELP = "runs in the store, the state of their cells, and whether each cell's figure is as expected"


def add_arguments(parser) -> None:
    add_store_argument(parser)


def run(args) -> int:
    from bench.analysis.missing import text
    from bench.store import Store

    with Store(args.store, create=False) as store:
        for run_ in store.runs():
            rows = store.records(run_id=run_["run_id"])
            cells = {r["cell_id"] for r in rows}
            failed = {r["cell_id"] for r in rows if r["status"] != "ok"}
            print(f"{run_['run_id']}  {text(run_['matrix_name'], missing='(no matrix name)')}  "
                  f"{text(run_['backend'], missing='(no backend recorded)')}  cells run: {len(cells)}  "
                  f"failed: {len(failed)}  {'finished' if run_['finished_unix'] else 'unfinished'}")
        print(f"{len(store.completed_cells())} cell(s) complete in {args.store}")
        lines = expected_lines(store.dataframe(record_json=False), store.collectives(), store.rank_windows())
    if lines:
        print("\nexpected vs measured (latest complete run of each cell):")
        print("\n".join(lines))
    return EXIT_OK
