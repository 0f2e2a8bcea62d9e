"""`bench status`: the runs in the store and the state of their cells, for each measured multi-worker cell its
expected value, verdict and slow rank, and where its step time went (bench/analysis/expected.py), and for each GPU
cell its MFU beside the power and energy per image its workers sampled (bench/analysis/mfu.py)."""
from __future__ import annotations

from bench.commands import EXIT_OK
from bench.commands.lines import expected_lines, mfu_lines, probe_entries
from bench.commands.shared import add_store_argument

HELP = "runs in the store, the state of their cells, and whether each cell's figure is as expected"


def add_arguments(parser) -> None:
    add_store_argument(parser)


def run(args) -> int:
    from bench.analysis.mfu import with_power
    from bench.analysis.missing import text
    from bench.core.source_revision import source_text
    from bench.report.power import power_records
    from bench.store import Store

    with Store(args.store, read_only=True) as store:
        for run_ in store.runs():
            rows = store.records(run_id=run_["run_id"])
            cells = {r["cell_id"] for r in rows}
            failed = {r["cell_id"] for r in rows if r["status"] != "ok"}
            print(f"{run_['run_id']}  {text(run_['matrix_name'], missing='(no matrix name)')}  "
                  f"{text(run_['backend'], missing='(no backend recorded)')}  cells run: {len(cells)}  "
                  f"failed: {len(failed)}  {'finished' if run_['finished_unix'] else 'unfinished'}"
                  + (f"  source {source}" if (source := source_text(run_)) else ""))
        print(f"{len(store.completed_cells())} cell(s) complete in {args.store}")
        records = store.dataframe(record_json=False)
        lines = expected_lines(records, store.collectives(), store.rank_windows(), probe_entries(args.store))
        gpu_lines = mfu_lines(with_power(records, power_records(store, records)))
    if lines:
        print("\nexpected vs measured (latest complete run of each cell):")
        print("\n".join(lines))
    if gpu_lines:
        print("\nMFU (model FLOPs ÷ dense peak), power and energy (latest complete run of each GPU cell):")
        print("\n".join(gpu_lines))
    return EXIT_OK
