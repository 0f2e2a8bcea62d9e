"""`bench data make-imagenet-sample DIR`: data sets for real-data cells."""
from __future__ import annotations

from bench.commands import EXIT_OK
from bench.errors import BenchInputError

HELP = "data sets for real-data cells"


def add_arguments(parser) -> None:
    data = parser.add_subparsers(dest="data_verb", required=True)
    d = data.add_parser("make-imagenet-sample", help="write a small, valid ImageNet sample in both layouts")
    d.add_argument("dir")
    d.add_argument("--classes", type=int, default=10)
    d.add_argument("--per-class", type=int, default=20)
    d.add_argument("--seed", type=int, default=0)


def run(args) -> int:
    from bench.datasets import make_imagenet_sample

    try:
        made = make_imagenet_sample(args.dir, args.classes, args.per_class, seed=args.seed)
    except OSError as e:  # a folder that cannot be made or written: the user's path, not a bug
        raise BenchInputError(f"cannot write the sample: {e.strerror or e}", args.dir) from None
    print(f"{made['images']} images in {made['classes']} classes, layouts: {', '.join(made['layouts'])}: "
          f"{made['dir']}/train/<wnid>/*.JPEG and {made['dir']}/tfrecord/train-*")
    return EXIT_OK
