"""`bench import FILE`: published or exported results into the store, marked with their source."""
from __future__ import annotations

from bench.commands import EXIT_OK
from bench.commands.shared import add_store_argument

HELP = "load published or exported results into the store, marked with their source"


def add_arguments(parser) -> None:
    parser.add_argument("file", help="a `bench export --format csv` file, or a reference CSV (bench/data/reference/)")
    add_store_argument(parser)
    parser.add_argument("--source", default=None, help="name the imported records carry (run id import:<source>:...)")


def run(args) -> int:
    from bench.imports.importer import import_file

    batch, n = import_file(args.file, args.store, args.source)
    left = "".join(f"; {k}: {v} row(s) left out" for k, v in batch.left_out.items())
    print(f"{n} records imported from {args.file} ({batch.fmt}) as source '{batch.source}', run(s) "
          f"{', '.join(batch.runs) if len(batch.runs) <= 3 else f'{len(batch.runs)} runs'}{left} → {args.store}")
    return EXIT_OK
