"""`bench data make-imagenet-sample DIR` and `bench data make-token-sample FILE`: data sets for real-data cells."""
from __future__ import annotations

from bench.commands import EXIT_OK
from bench.core.errors import BenchInputError

HELP = "data sets for real-data cells"


def add_arguments(parser) -> None:
    data = parser.add_subparsers(dest="data_verb", required=True)
    d = data.add_parser("make-imagenet-sample", help="write a small, valid ImageNet sample in both layouts")
    d.add_argument("dir")
    d.add_argument("--classes", type=int, default=10)
    d.add_argument("--per-class", type=int, default=20)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--profile", choices=("small", "imagenet"), default="small",
                   help="small: tiny images for CPU cells (default); imagenet: ImageNet-like pixel and file sizes "
                        "(~400x350 px, ~110 KB), for GPU loader figures (bench/execution/datasets.py)")
    d.add_argument("--layouts", choices=("both", "jpeg"), default="both",
                   help="both: the JPEG tree and TFRecord shards (default); jpeg: the tree alone")
    d.add_argument("--workers", type=int, default=1, help="processes drawing the imagenet profile's images")
    t = data.add_parser("make-token-sample", help="write a token file (nanoGPT's train.bin layout) from local text")
    t.add_argument("file")
    t.add_argument("--from", dest="sources", action="append", default=None, metavar="PATH",
                   help="a text file or a folder of them (repeatable; default: this checkout's README.md and docs/)")
    t.add_argument("--tokens", type=int, default=None, help="write exactly this many (the text repeated if short)")
    t.add_argument("--dtype", choices=("uint16", "uint32"), default="uint16")


def run(args) -> int:
    if args.data_verb == "make-token-sample":
        return token_sample(args)
    from bench.execution.datasets import make_imagenet_sample

    try:
        if args.workers < 1:
            raise BenchInputError(f"--workers must be at least 1, got {args.workers}")
        made = make_imagenet_sample(args.dir, args.classes, args.per_class, seed=args.seed,
                                    tfrecord=args.layouts == "both", profile=args.profile, workers=args.workers)
    except OSError as e:  # a folder that cannot be made or written: the user's path, not a bug
        raise BenchInputError(f"cannot write the sample: {e.strerror or e}", args.dir) from None
    where = f"{made['dir']}/train/<wnid>/*.JPEG" + (
        f" and {made['dir']}/tfrecord/train-*" if "tfrecord" in made["layouts"] else "")
    print(f"{made['images']} images in {made['classes']} classes, layouts: {', '.join(made['layouts'])}: {where}")
    return EXIT_OK


def token_sample(args) -> int:
    from pathlib import Path

    from bench.execution.token_sample import make_token_sample

    if args.tokens is not None and args.tokens < 1:
        raise BenchInputError(f"--tokens must be at least 1, got {args.tokens}")
    root = Path(__file__).resolve().parents[2]
    sources = [Path(s) for s in args.sources] if args.sources else [root / "README.md", root / "docs"]
    out = Path(args.file)
    try:
        made = make_token_sample(out, sources, tokens=args.tokens, dtype=args.dtype)
    except OSError as e:
        raise BenchInputError(f"cannot write the token file: {e.strerror or e}", args.file) from None
    print(f"{made['tokens']:,} tokens ({made['tokenizer']}, vocabulary {made['vocab']}, {made['dtype']}) from "
          f"{len(made['sources'])} files in {out} (what it holds: {out}.json)")
    return EXIT_OK
