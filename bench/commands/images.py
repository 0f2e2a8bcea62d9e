"""`bench images render|list|build|check`: the container images for cluster backends (bench/images/: recipes.py renders
them, build.py builds them, check.py runs a cell inside one)."""
from __future__ import annotations

from bench.commands import EXIT_OK
from bench.errors import BenchInputError

HELP = "container images for cluster backends (docker/rendered): render, list, build, check"
EXIT_FAILED = 1


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    render = sub.add_parser("render", help="write docker/rendered/Dockerfile.<variant> for every variant")
    render.add_argument("out_dir", nargs="?", help="where to write (default docker/rendered)")
    sub.add_parser("list", help="variant, image and the GPU keys that map to it")
    build = sub.add_parser("build", help="build variants: the host's pip settings passed as build secrets and "
                                         "read-only mounts, then the image checked for them")
    check = sub.add_parser("check", help="run a 2-worker PyTorch cell inside built cpu images, as their `bench` user")
    for p in (build, check):
        p.add_argument("names", nargs="+", metavar="VARIANT", help="variants (`bench images list`)")
        p.add_argument("--engine", help="podman or docker (default: the first installed)")
        p.add_argument("--log-dir", default="results/images",
                       help="build logs, builds.jsonl and the check cells' stores (default %(default)s)")
    build.add_argument("--base", help="the base image (default: the variant's public one, e.g. debian:bookworm-slim; "
                                      "scripts/debian_base.sh makes a local one)")
    build.add_argument("--torch-index", dest="torch_index",
                       help="the index of the torch build (default: PyTorch's for the variant); '' = none, when the "
                            "host's pip settings already provide it")
    build.add_argument("--check", action="store_true", help="then run `check` on each cpu variant built")


def run(args) -> int:
    from bench.images import recipes

    if args.action == "render":
        return _render(args, recipes)
    if args.action == "list":
        return _list(recipes)
    return _build_or_check(args, recipes)


def _render(args, recipes) -> int:
    out_dir = args.out_dir or str(recipes.RENDERED_DIR)
    try:
        paths = recipes.render_all(out_dir)
    except OSError as e:
        raise BenchInputError(f"cannot write the rendered Dockerfiles: {e.strerror}", out_dir) from None
    for path in paths:
        print(path)
    return EXIT_OK


def _list(recipes) -> int:
    from bench.catalog import catalog

    for v in recipes.variants():
        gpus = [k for k in catalog() if recipes.cuda_generation(k) == v.generation]
        print(f"{v.id:28} {v.image:34} {' '.join(gpus)}")
    return EXIT_OK


def _build_or_check(args, recipes) -> int:
    from pathlib import Path

    from bench.images.engines import find_engine

    try:
        chosen = [recipes.variant(name) for name in args.names]
    except KeyError as e:
        raise BenchInputError(str(e.args[0])) from None
    if args.action == "check" or getattr(args, "check", False):
        gpu = [v.id for v in chosen if v.generation != "cpu" and args.action == "check"]
        if gpu:
            raise BenchInputError(f"check runs cpu cells; {', '.join(gpu)} are GPU images")
    engine = find_engine(args.engine)
    logs = Path(args.log_dir).resolve()
    failed = 0
    for v in chosen:
        if args.action == "build":
            failed += _build_one(engine, v, args, logs)
        if args.action == "check" or (args.check and v.generation == "cpu"):
            failed += _check_one(engine, v, logs)
    return EXIT_FAILED if failed else EXIT_OK


def _build_one(engine, v, args, logs) -> int:
    from bench.images.build import build, summary_json
    from bench.images.pip_settings import host_pip_settings

    settings = host_pip_settings()
    if settings.local_dirs and not engine.mounts_dirs_at_build():
        raise BenchInputError(f"the host's pip settings name local folders ({', '.join(settings.local_dirs)}), "
                              f"which `{engine.name} build` cannot mount; use podman")
    logs.mkdir(parents=True, exist_ok=True)
    print(f"building {v.image} with {engine.name} (log {logs / (v.id + '.log')})", flush=True)
    try:
        built = build(engine, v, args.base, args.torch_index, settings, logs / f"{v.id}.log")
    except RuntimeError as e:
        print(e, flush=True)
        return 1
    print(built.line(), flush=True)
    with (logs / "builds.jsonl").open("a") as out:
        out.write(summary_json(built) + "\n")
    return 1 if built.leaks else 0


def _check_one(engine, v, logs) -> int:
    import shutil

    from bench.images.check import run_cell

    work = logs / f"check-{v.id}"
    shutil.rmtree(work, ignore_errors=True)
    print(f"checking {v.image}: bench doctor, then a 2-worker PyTorch {v.mpi} cell as `bench` ({work})", flush=True)
    result = run_cell(engine, v, v.image, work)
    print(result.line(), flush=True)
    if not result.ok:
        (work / "container-output.txt").write_text(result.tail)
    return 0 if result.ok else 1
