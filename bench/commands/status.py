"""`bench status`: the runs in the store and the state of their cells, and for each measured multi-worker cell its
expected value, verdict and slow rank, and where its step time went (bench/analysis/expected.py)."""
from __future__ import annotations

from bench.commands import EXIT_OK, add_store_argument

HELP = "runs in the store, the state of their cells, and whether each cell's figure is as expected"


def add_arguments(parser) -> None:
    add_store_argument(parser)


def run(args) -> int:
    from bench.store import Store

    with Store(args.store, create=False) as store:
        for run_ in store.runs():
            rows = store.records(run_id=run_["run_id"])
            cells = {r["cell_id"] for r in rows}
            failed = {r["cell_id"] for r in rows if r["status"] != "ok"}
            print(f"{run_['run_id']}  {run_['matrix_name']}  {run_['backend']}  cells run: {len(cells)}  "
                  f"failed: {len(failed)}  {'finished' if run_['finished_unix'] else 'unfinished'}")
        print(f"{len(store.completed_cells())} cell(s) complete in {args.store}")
        lines = expected_lines(store.dataframe(record_json=False), store.collectives(), store.rank_windows())
    if lines:
        print("\nexpected vs measured (latest complete run of each cell):")
        print("\n".join(lines))
    return EXIT_OK


def expected_lines(records, collectives, ranks) -> list[str]:
    """One line per multi-worker cell (expected value, verdict, slow rank) and one per cell with a breakdown."""
    from bench.analysis.collectives import fit_stacks, training_only
    from bench.analysis.expected import breakdowns, expected_cells, windows_of
    from bench.analysis.scaling import cell_summary, latest_complete, scaling, split_imported

    measured = split_imported(records)[0]
    if measured.empty:
        return []
    all_ok = latest_complete(measured)
    ok = training_only(all_ok)
    if ok.empty:
        return []
    table = scaling(cell_summary(ok))
    sweeps = collectives.merge(all_ok[["cell_id", "run_id"]].drop_duplicates(), on=["cell_id", "run_id"]) \
        if collectives is not None and not collectives.empty else collectives
    fits = fit_stacks(sweeps.to_dict("records")) if sweeps is not None and not sweeps.empty else {}
    windows = windows_of(ranks, ok)
    out = [f"  {e.cell_id}  {e.workers} workers: {e.describe()}" for e in expected_cells(table, fits, windows)]
    for b in breakdowns(table, windows, fits):
        parts = ", ".join(f"{p} {s:.3f}" + (" (modelled)" if b.sources[p] == "modelled" else "")
                          for p, s in b.parts.items())
        out.append(f"  {b.cell_id}  step {b.step_s:.3f} s: {parts}")
    return out
