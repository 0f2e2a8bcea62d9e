"""`bench export -o FILE`: the store's records as CSV, JSON lines or Parquet, each followed by what is derived from
it (bench/analysis/mfu.py's EXPORT_COLUMNS: FLOPs per image, the peak and its format, MFU, mean watts per GPU and
joules per image; empty on a CPU record); `--table collectives` the collective sweeps' rows instead (one per message
size per repeat)."""
from __future__ import annotations

from bench.commands import EXIT_OK
from bench.commands.shared import add_store_argument

HELP = "export the store's records"


def add_arguments(parser) -> None:
    add_store_argument(parser)
    parser.add_argument("--format", choices=("csv", "json", "parquet"), default="csv")
    parser.add_argument("--table", choices=("records", "collectives"), default="records",
                        help="records (one row per measured repeat) or collectives (one row per message size)")
    parser.add_argument("-o", "--output", required=True)


def run(args) -> int:
    from pathlib import Path

    from bench.analysis.mfu import export_columns
    from bench.analysis.missing import CSV_MISSING, csv_ready, json_lines
    from bench.core.errors import BenchInputError
    from bench.store import Store

    with Store(args.store, read_only=True) as store:
        df = export_columns(store.dataframe()) if args.table == "records" else store.collectives()
    out = Path(args.output)
    if args.format == "parquet":
        try:
            import pyarrow  # noqa: F401  (pandas' parquet engine)
        except ImportError:
            raise BenchInputError("--format parquet needs pyarrow: pip install '.[parquet]'") from None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if args.format == "csv":  # a missing value is an empty field; in JSON, null (bench/analysis/missing.py)
            csv_ready(df).to_csv(out, index=False, na_rep=CSV_MISSING)
        elif args.format == "json":
            out.write_text(json_lines(df), encoding="utf-8")
        else:
            df.to_parquet(out, index=False)
    except OSError as e:
        raise BenchInputError(f"cannot write {out}: {e.strerror or e}", "-o") from None
    print(f"{len(df)} {'records' if args.table == 'records' else 'collective rows'} → {out}")
    return EXIT_OK
