"""`bench images render|list|build|check|push`: the container images for cluster backends (bench/images/: recipes.py
and mpijob.py render them, build.py builds them, check.py runs a cell inside one, push.py pushes them to a registry)."""
from __future__ import annotations

from bench.commands import EXIT_OK
from bench.core.errors import BenchInputError
from bench.images.push import DEFAULT_LOG_DIR

HELP = "container images for cluster backends (docker/rendered): render, list, build, check, push"
EXIT_FAILED = 1


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    render = sub.add_parser("render", help="write docker/rendered/Dockerfile.<variant> for every variant and "
                                           "Dockerfile.<variant>-mpijob for its MPIJob layer")
    render.add_argument("out_dir", nargs="?", help="where to write (default docker/rendered)")
    sub.add_parser("list", help="variant, image and the GPU keys that map to it; then the MPIJob layers")
    build = sub.add_parser("build", help="build variants: the host's pip settings passed as build secrets and "
                                         "read-only mounts, then the image checked for them; <variant>-mpijob: its "
                                         "MPIJob layer (sshd), FROM the default image, built first when both are named")
    check = sub.add_parser("check", help="run a 2-worker PyTorch cell inside built cpu images, as their `bench` user")
    push = sub.add_parser("push", help="tag built images REGISTRY/<name>:<tag>, push them, record each digest in "
                                       "<log-dir>/pushed.json")
    push.add_argument("registry", metavar="REGISTRY", help="host[:port][/path], no scheme, e.g. ghcr.io/org")
    for p in (build, check, push):
        p.add_argument("names", nargs="+", metavar="VARIANT",
                       help="variants or their MPIJob layers, <variant>-mpijob (`bench images list`)")
        p.add_argument("--engine", help="podman or docker (default: the first installed)")
        p.add_argument("--log-dir", default=str(DEFAULT_LOG_DIR),
                       help="build and push logs, builds.jsonl, pushed.json and the check cells' stores "
                            "(default %(default)s)")
    build.add_argument("--base", help="the base image of the default variants (default: the variant's public one, e.g. "
                                      "debian:bookworm-slim; scripts/debian_base.sh makes a local one); an MPIJob "
                                      "layer's base is always its default image")
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
    if args.action == "push":
        return _push(args)
    return _build_or_check(args, recipes)


def _render(args, recipes) -> int:
    from bench.images import mpijob

    out_dir = args.out_dir or str(recipes.RENDERED_DIR)
    try:
        paths = recipes.render_all(out_dir) + mpijob.render_all(out_dir)
    except OSError as e:
        raise BenchInputError(f"cannot write the rendered Dockerfiles: {e.strerror}", out_dir) from None
    for path in paths:
        print(path)
    return EXIT_OK


def _list(recipes) -> int:
    from bench.facts.catalog import catalog
    from bench.images import mpijob

    rows = [(v.id, v.image, " ".join(k for k in catalog() if recipes.cuda_generation(k) == v.generation))
            for v in recipes.variants()]
    rows += [(layer.id, layer.image, f"MPIJob layer: sshd on port {mpijob.SSH_PORT}") for layer in mpijob.layers()]
    id_width, image_width = (max(len(row[i]) for row in rows) for i in (0, 1))
    for vid, image, what in rows:
        print(f"{vid:{id_width}} {image:{image_width}} {what}")
    return EXIT_OK


def _named(names: list[str]) -> list:
    """The variants and MPIJob layers named, default images first (a layer is built FROM one); exit 2 for a name
    that is neither."""
    from bench.images.mpijob import MpiJobLayer, image_named

    try:
        chosen = [image_named(name) for name in names]
    except KeyError as e:
        raise BenchInputError(str(e.args[0])) from None
    chosen = list(dict.fromkeys(chosen))  # each once
    return sorted(chosen, key=lambda c: isinstance(c, MpiJobLayer))


def _build_or_check(args, recipes) -> int:
    from pathlib import Path

    from bench.images.build import image_exists
    from bench.images.engines import find_engine
    from bench.images.mpijob import MpiJobLayer

    chosen = _named(args.names)
    if args.action == "check":
        gpu = [c.id for c in chosen if _variant(c).generation != "cpu"]
        if gpu:
            raise BenchInputError(f"check runs cpu cells; {', '.join(gpu)} are GPU images")
    engine = find_engine(args.engine)
    if args.action == "build":
        missing = [c for c in chosen if isinstance(c, MpiJobLayer) and c.base not in chosen and
                   not image_exists(engine, c.base.image)]
        if missing:
            _engine_runs(engine)
            raise BenchInputError(f"{missing[0].id} is built FROM {missing[0].base.image}, which {engine.name} does "
                                  f"not have: name {missing[0].base.id} too, or build it first")
    logs = Path(args.log_dir).resolve()
    failed: set[str] = set()
    for c in chosen:
        if args.action == "build":
            if isinstance(c, MpiJobLayer) and c.base.id in failed:
                print(f"{c.image}: not built, as its default image {c.base.image} failed", flush=True)
                failed.add(c.id)
                continue
            if _build_one(engine, c, args, logs):
                failed.add(c.id)
        if args.action == "check" or (args.check and _variant(c).generation == "cpu"):
            if _check_one(engine, c, logs):
                failed.add(c.id)
    return EXIT_FAILED if failed else EXIT_OK


def _engine_runs(engine) -> None:
    """An image the engine does not list may be an engine that does not run: that is the line to print then."""
    from bench.images.build import engine_problem

    problem = engine_problem(engine)
    if problem:
        raise BenchInputError(f"{engine.name} does not run here: {problem}")


def _variant(chosen):
    """The default variant of a variant or of an MPIJob layer."""
    return getattr(chosen, "base", chosen)


def _build_one(engine, v, args, logs) -> int:
    from bench.images.build import build, build_layer, summary_json
    from bench.images.mpijob import MpiJobLayer
    from bench.images.pip_settings import host_pip_settings

    settings = host_pip_settings()  # a layer passes none in; its leak check still looks for them
    if settings.local_dirs and not engine.mounts_dirs_at_build() and not isinstance(v, MpiJobLayer):
        raise BenchInputError(f"the host's pip settings name local folders ({', '.join(settings.local_dirs)}), "
                              f"which `{engine.name} build` cannot mount; use podman")
    logs.mkdir(parents=True, exist_ok=True)
    print(f"building {v.image} with {engine.name} (log {logs / (v.id + '.log')})", flush=True)
    try:
        if isinstance(v, MpiJobLayer):
            built = build_layer(engine, v, settings, logs / f"{v.id}.log")
        else:
            built = build(engine, v, args.base, args.torch_index, settings, logs / f"{v.id}.log")
    except RuntimeError as e:
        print(e, flush=True)
        return 1
    print(built.line(), flush=True)
    with (logs / "builds.jsonl").open("a") as out:
        out.write(summary_json(built) + "\n")
    return 1 if built.leaks else 0


def _check_one(engine, chosen, logs) -> int:
    """The check of a default image; an MPIJob layer gets the same one (its sshd is not started: the cell runs as on
    the default image)."""
    import shutil

    from bench.images.check import run_cell

    v = _variant(chosen)
    work = logs / f"check-{chosen.id}"
    shutil.rmtree(work, ignore_errors=True)
    print(f"checking {chosen.image}: bench doctor, then a 2-worker PyTorch {v.mpi} cell as `bench` ({work})",
          flush=True)
    result = run_cell(engine, v, chosen.image, work)
    print(result.line(), flush=True)
    if not result.ok:
        (work / "container-output.txt").write_text(result.tail)
    return 0 if result.ok else 1


def _push(args) -> int:
    """Each named image tagged REGISTRY/<name>:<tag> and pushed; its digest reference printed and recorded in
    <log-dir>/pushed.json. Bad input (the registry, a name, no engine, an image not built here): exit 2, nothing run."""
    from pathlib import Path

    from bench.images.build import image_exists
    from bench.images.engines import find_engine
    from bench.images.push import check_registry, push, record_pushed

    registry = check_registry(args.registry)
    chosen = _named(args.names)
    engine = find_engine(args.engine)
    missing = [c for c in chosen if not image_exists(engine, c.image)]
    if missing:
        _engine_runs(engine)
        raise BenchInputError(f"{engine.name} has no image {missing[0].image}: "
                              f"bench images build {missing[0].id} first")
    logs = Path(args.log_dir).resolve()
    logs.mkdir(parents=True, exist_ok=True)
    failed = 0
    for c in chosen:
        print(f"pushing {c.image} to {registry} with {engine.name} (log {logs / ('push-' + c.id + '.log')})",
              flush=True)
        try:
            pushed = push(engine, c.image, registry, logs / f"push-{c.id}.log")
        except RuntimeError as e:
            print(e, flush=True)
            failed += 1
            continue
        record_pushed(pushed, logs)
        print(pushed.line(), flush=True)
    return EXIT_FAILED if failed else EXIT_OK
