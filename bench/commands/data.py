"""`bench data make-imagenet-sample DIR`: data sets for real-data cells."""
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


def run(args) -> int:
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
