"""`bench model --validate`: the α-β what-if model (bench/analysis/whatif.py) against the published 2018 Batch AI
32-GPU efficiencies (docs/scaling-model.md). The published study is read through bench/facts/reference.py, the model
only computes, bench/report/model_table.py renders the table; `--format json` prints everything as one document
(docs/ci/model-result.schema.json), `--format md` the Markdown table.

`bench model --layouts`: the layout planner (docs/layouts.md, bench/layouts/): every layout of a cluster for a model,
ranked by predicted tokens/s per GPU, with memory per GPU, the exposed communication per dimension and the bubble;
`--format json` is docs/ci/layouts-result.schema.json, `--emit-matrix PATH` writes the best few as a matrix."""
from __future__ import annotations

from bench.commands import EXIT_OK
from bench.commands.shared import add_format_argument
from bench.core.errors import BenchInputError

HELP = "the what-if models: predicted vs published efficiency (--validate), the layout planner (--layouts)"
MODEL_FORMAT, MODEL_FORMAT_VERSION = "bench-model-result", 1
LAYOUTS_FORMAT, LAYOUTS_FORMAT_VERSION = "bench-layouts-result", 1
SENSITIVITY_OVERLAPS, SENSITIVITY_TCP_GBIT_S = (0.0, 0.5, None, 1.0), (2.0, 4.0, 10.0)  # None: the default overlap


def add_arguments(parser) -> None:
    from bench.analysis.whatif import DEFAULT_OVERLAP

    parser.add_argument("--validate", action="store_true", help="predicted vs published 32-GPU efficiency (Batch AI)")
    parser.add_argument("--overlap", type=float, default=DEFAULT_OVERLAP,
                        help="fraction of the backward pass communication hides behind, 0 to 1")
    parser.add_argument("--sensitivity", action="store_true", help="also vary overlap and the TCP figure")
    parser.add_argument("--all-points", action="store_true",
                        help="also the error at every published worker count (1-32), per series")
    add_format_argument(parser, "one document with every row, docs/ci/model-result.schema.json; with --layouts "
                                "docs/ci/layouts-result.schema.json")
    planner = parser.add_argument_group("the layout planner (--layouts, docs/layouts.md)")
    planner.add_argument("--layouts", action="store_true",
                         help="rank every feasible layout of --model on --nodes nodes of --gpu over --fabric")
    planner.add_argument("--model", default="llama3-8b",
                         help="a named shape or a shape id with your numbers (default: llama3-8b)")
    planner.add_argument("--gpu", default="H100", help="a GPU SKU of the catalogue (default: H100)")
    planner.add_argument("--nodes", type=int, default=1, help="nodes, each with the SKU's GPUs (default: 1)")
    planner.add_argument("--fabric", choices=("ib", "tcp"), default="ib", help="between nodes (default: ib)")
    planner.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: the shape's context)")
    planner.add_argument("--global-batch", type=int, default=None,
                         help="sequences per optimizer step (default: 2 per GPU)")
    planner.add_argument("--layout", action="append", default=None, metavar="SPEC",
                         help="judge only this layout, e.g. dp_shard=8,tp=8 (repeatable; default: every layout)")
    planner.add_argument("--tp-across-nodes", action="store_true", help="allow tp groups that cross nodes")
    planner.add_argument("--efficiency", type=float, default=None,
                         help="fraction of the dense bf16 peak compute runs at (default: the measured one)")
    planner.add_argument("--top", type=int, default=10, help="rows of the table, and of --emit-matrix (default: 10)")
    planner.add_argument("--emit-matrix", metavar="PATH", default=None,
                         help="write the --top fitting layouts as a matrix to measure")


def run(args) -> int:
    import json

    from bench.analysis.study_validation import validate

    if args.layouts:
        return _layouts(args)
    if args.emit_matrix:
        raise BenchInputError("--emit-matrix: needs --layouts")
    if not args.validate:
        raise BenchInputError("nothing to do: add --validate (predicted vs published 32-GPU efficiency) or --layouts "
                              "(the layout planner); see `bench model --help`")
    rows = validate(_reference(), overlap=args.overlap)
    if args.format == "json":
        print(json.dumps(document(args, rows), indent=1, allow_nan=False))
    elif args.format == "md":
        from bench.report.model_table import markdown

        print(markdown(rows))
    else:
        _print_table(args, rows)
    return EXIT_OK


def _reference():
    from bench.facts import reference as study

    return study.validation_rows()


def held_out(rows: list[dict]) -> dict:
    """The rows not fitted: their largest error and how many are within ±10 points, all and those the model
    explains."""
    held = [r for r in rows if not r["fitted"]]
    explained = [r for r in held if not r["unexplained"]]

    def figures(some: list[dict]) -> dict:
        return {"rows": len(some), "largest_error_points": max(abs(r["error_points"]) for r in some),
                "within_10_points": sum(abs(r["error_points"]) <= 10 for r in some)}

    return {"all": figures(held), "explained": figures(explained)}


def all_points() -> list[dict]:
    """Per published series, the model's error at each worker count (the study charts' residuals)."""
    from bench.analysis.study_validation import residuals
    from bench.facts.reference import published_series

    res = residuals(published_series())
    return [{"gpu": gpu, "series": series,
             "points": [{"gpus": int(n), "error_points": float(e)} for n, e in zip(s["gpus"], s["residual_points"])]}
            for (gpu, series), s in res.groupby(["gpu", "series"], sort=True)]


def sensitivity() -> list[dict]:
    """The error of each row under each overlap and TCP figure of the grid."""
    from bench.analysis.study_validation import validate, with_tcp
    from bench.analysis.whatif import DEFAULT_OVERLAP

    reference = _reference()
    return [{"overlap": overlap, "tcp_gbit_s": tcp,
             "rows": [{"gpu": r["gpu"], "fabric": r["fabric"], "error_points": r["error_points"]}
                      for r in validate(reference, overlap=overlap, links=with_tcp(tcp))]}
            for overlap in (DEFAULT_OVERLAP if o is None else o for o in SENSITIVITY_OVERLAPS)
            for tcp in SENSITIVITY_TCP_GBIT_S]


def document(args, rows: list[dict]) -> dict:
    from bench.analysis.whatif import gradient_bytes
    from bench.facts import reference as study

    return {"format": MODEL_FORMAT, "format_version": MODEL_FORMAT_VERSION, "overlap": args.overlap,
            "gradient_bytes": gradient_bytes(), "reference": study.VALIDATION_FILE, "model": study.MODEL,
            "stage_GBps": rows[0]["stage_GBps"], "rows": rows, "held_out": held_out(rows),
            "all_points": all_points() if args.all_points else None,
            "sensitivity": sensitivity() if args.sensitivity else None}


def _print_table(args, rows: list[dict]) -> None:
    from bench.analysis.whatif import gradient_bytes
    from bench.commands.console import stdout_console
    from bench.facts import reference as study
    from bench.report.model_table import legend, table

    console = stdout_console()
    fitted = [f"{r['gpu']} {r['fabric'].upper()}" for r in rows if r["fitted"]]
    console.say(f"overlap = {args.overlap}, gradient = {gradient_bytes() / 1e6:.1f} MB fp32, baseline = single-GPU bar "
                f"without MPI, reference = {study.VALIDATION_FILE} (final charts, {study.MODEL})")
    console.say(f"host staging per VM (the one fitted figure): {rows[0]['stage_GBps']:.2f} GB/s, fitted on "
                f"{', '.join(fitted)} at 32 GPUs; every other row is held out\n")
    console.print_table(table(rows))
    for line in legend():
        console.say(line)
    held = held_out(rows)
    console.say(f"\nheld out: largest error {held['all']['largest_error_points']:.1f} points; within ±10: "
                f"{held['all']['within_10_points']}/{held['all']['rows']}")
    if held["explained"]["rows"] < held["all"]["rows"]:
        console.say(f"held out, series the model explains: largest error "
                    f"{held['explained']['largest_error_points']:.1f} points; within ±10: "
                    f"{held['explained']['within_10_points']}/{held['explained']['rows']}")
        for r in rows:
            if not r["fitted"] and r["unexplained"]:
                console.say(f"{r['gpu']} {r['fabric'].upper()} ({r['error_points']:+.1f}): {r['unexplained']}")
    if args.all_points:
        console.say("\nerror at every published worker count (points; efficiency against the series' own 1-GPU bar):")
        for s in all_points():
            console.say(f"  {s['gpu']} · {s['series']}: " +
                        " ".join(f"{p['gpus']}:{p['error_points']:+.0f}" for p in s["points"]))
    if args.sensitivity:
        console.say("\nsensitivity (error in points, IB/TCP per GPU):")
        for grid in sensitivity():
            pairs = zip(grid["rows"][::2], grid["rows"][1::2])
            cells = " ".join(f"{a['gpu']} {a['error_points']:+.0f}/{b['error_points']:+.0f}" for a, b in pairs)
            console.say(f"  overlap {grid['overlap']:.2f}, TCP {grid['tcp_gbit_s']:4.1f} Gb/s: {cells}")


# --- the layout planner ---------------------------------------------------------------------------------------------

def _layouts(args) -> int:
    import json

    request = _layout_request(args)
    result = _plan(request)
    if args.emit_matrix:
        _emit(args, request, result)
    if args.format == "json":
        print(json.dumps(_layouts_document(request, result), indent=1, allow_nan=False))
        return EXIT_OK
    from bench.layouts.table import markdown_table, text_table

    shown = result["ranked"][:args.top]
    if args.format == "md":
        print("\n".join(markdown_table(shown)))
        return EXIT_OK
    r = request
    print(f"{args.model} on {r['nodes']} × {r['gpus_per_node']} {args.gpu} over {args.fabric}: seq {r['seq']}, global "
          f"batch {r['global_batch']} sequences, compute at {r['efficiency']:.1%} of the bf16 peak "
          f"({r['efficiency_source']})")
    print("\n".join(text_table(shown)))
    fitting = sum(1 for row in result["ranked"] if row["fits"])
    print(f"{fitting} layouts fit, {len(result['ranked']) - fitting} do not, {len(result['refused'])} refused"
          f"{'' if len(shown) == len(result['ranked']) else f'; the first {len(shown)} shown (--top)'}")
    for row in result["refused"][:3] if not fitting else []:
        print(f"refused {row['layout']}: {'; '.join(row['refused'])}")
    return EXIT_OK


def _layout_request(args) -> dict:
    """Every input checked (one line naming what is wrong, BenchInputError) before anything is computed or written."""
    from bench.facts.catalog import catalog
    from bench.layouts.fabric import fabric_of
    from bench.layouts.layout import LayoutError, parse_layout
    from bench.layouts.planner import EFFICIENCY_SOURCE, MEASURED_EFFICIENCY
    from bench.layouts.shapes import shape_named

    skus = catalog()
    if args.gpu not in skus:
        raise BenchInputError(f"--gpu: unknown GPU {args.gpu!r} (known: {', '.join(skus)})")
    sku = skus[args.gpu]
    peak = sku.peak_tflops.get("bf16") or sku.peak_tflops.get("fp16")
    if not peak:
        raise BenchInputError(f"--gpu: the catalogue has no bf16 or fp16 peak for {args.gpu}")
    try:
        shape = shape_named(args.model)
    except ValueError as e:
        raise BenchInputError(f"--model: {e}") from None
    for name in ("nodes", "top"):
        if getattr(args, name) < 1:
            raise BenchInputError(f"--{name}: must be a positive whole number, got {getattr(args, name)}")
    world = args.nodes * sku.gpus_per_vm
    seq = shape.seq if args.seq is None else args.seq
    batch = 2 * world if args.global_batch is None else args.global_batch
    if seq < 1 or batch < 1:
        raise BenchInputError("--seq and --global-batch: must be positive whole numbers")
    efficiency = MEASURED_EFFICIENCY if args.efficiency is None else args.efficiency
    if not 0 < efficiency <= 1:
        raise BenchInputError(f"--efficiency: a fraction in (0, 1], got {efficiency}")
    try:
        fabric = fabric_of(args.gpu, sku.gpus_per_vm, args.fabric)
        layouts = None if args.layout is None else [parse_layout(text, world=world) for text in args.layout]
    except (ValueError, LayoutError) as e:
        raise BenchInputError(f"--{'fabric' if 'fabric' in str(e) else 'layout'}: {e}") from None
    return {"model": args.model, "shape": shape, "gpu": args.gpu, "nodes": args.nodes, "gpus_per_node": sku.gpus_per_vm,
            "world": world, "fabric_name": args.fabric, "fabric": fabric, "seq": seq, "global_batch": batch,
            "peak_flops": peak * 1e12, "memory_gb": sku.memory_gb, "cpu": sku.is_cpu, "layouts": layouts,
            "tp_across_nodes": args.tp_across_nodes, "efficiency": efficiency,
            "efficiency_source": EFFICIENCY_SOURCE if args.efficiency is None else "--efficiency"}


def _plan(r: dict) -> dict:
    from bench.layouts.feasibility import Job
    from bench.layouts.layout import every_layout
    from bench.layouts.memory import usable_bytes
    from bench.layouts.planner import Cluster, plan_layouts, with_microbatches

    job = Job(seq=r["seq"], global_batch=r["global_batch"], gpus_per_node=r["gpus_per_node"], cpu=r["cpu"],
              tp_across_nodes=r["tp_across_nodes"])
    cluster = Cluster(r["gpus_per_node"], r["nodes"], r["peak_flops"], usable_bytes(r["memory_gb"]), r["fabric"],
                      cpu=r["cpu"])
    given = r["layouts"]
    layouts = ([layout if named_m else with_microbatches(layout, job) for layout, named_m in given] if given else
               [with_microbatches(layout, job) for layout in every_layout(r["world"])])
    return plan_layouts(r["shape"], layouts, cluster, job, efficiency=r["efficiency"])


def _layouts_document(r: dict, result: dict) -> dict:
    return {"format": LAYOUTS_FORMAT, "format_version": LAYOUTS_FORMAT_VERSION,
            "request": {"model": r["model"], "shape": r["shape"].as_dict(), "gpu": r["gpu"], "nodes": r["nodes"],
                        "gpus_per_node": r["gpus_per_node"], "world": r["world"], "fabric": r["fabric_name"],
                        "seq": r["seq"], "global_batch": r["global_batch"], "tp_across_nodes": r["tp_across_nodes"]},
            "constants": {"peak_flops": r["peak_flops"], "efficiency": r["efficiency"],
                          "efficiency_source": r["efficiency_source"], "memory_gb": r["memory_gb"],
                          "intra": r["fabric"].intra.as_dict(), "inter": r["fabric"].inter.as_dict()},
            "ranked": result["ranked"], "refused": result["refused"]}


def _emit(args, r: dict, result: dict) -> None:
    from pathlib import Path

    import yaml

    from bench.launch import FLAVOURS
    from bench.layouts.emit import matrix_for

    # the reference flavour (the registry's first) among those whose launcher starts torch.distributed's ranks
    mpi = next(f.name for f in FLAVOURS if f.native is not None)
    doc = matrix_for(result["ranked"], model=r["model"], shape=r["shape"], sku=r["gpu"], fabric=r["fabric_name"],
                     seq=r["seq"], global_batch=r["global_batch"], top=args.top, mpi=mpi,
                     gpus_per_node=r["gpus_per_node"], tp_across_nodes=r["tp_across_nodes"])
    if not doc["include"]:
        raise BenchInputError("--emit-matrix: no layout fits; nothing written")
    Path(args.emit_matrix).write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
