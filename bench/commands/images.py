"""`bench images render|list`: the container images for cluster backends (bench/images.py renders them)."""
from __future__ import annotations

from bench.commands import EXIT_OK

HELP = "container images for cluster backends (docker/rendered)"


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=("render", "list"),
                        help="render: write docker/rendered/Dockerfile.<variant> for every variant; "
                             "list: variant, image and the GPU keys that map to it")
    parser.add_argument("out_dir", nargs="?", help="where `render` writes (default docker/rendered)")


def run(args) -> int:
    from bench import images

    if args.action == "render":
        out_dir = args.out_dir or str(images.RENDERED_DIR)
        try:
            paths = images.render_all(out_dir)
        except OSError as e:
            from bench.errors import BenchInputError

            raise BenchInputError(f"cannot write the rendered Dockerfiles: {e.strerror}", out_dir) from None
        for path in paths:
            print(path)
        return EXIT_OK
    from bench.catalog import catalog

    for v in images.variants():
        gpus = [k for k in catalog() if images.cuda_generation(k) == v.generation]
        print(f"{v.id:28} {v.image:34} {' '.join(gpus)}")
    return EXIT_OK
