"""`bench data make-imagenet-sample DIR`: data sets for real-data cells."""
from __future__ import annotations

from bench.commands import EXIT_OK

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

    made = make_imagenet_sample(args.dir, args.classes, args.per_class, seed=args.seed)
    print(f"{made['images']} images in {made['classes']} classes, layouts: {', '.join(made['layouts'])}: "
          f"{made['dir']}/train/<wnid>/*.JPEG and {made['dir']}/tfrecord/train-*")
    return EXIT_OK
