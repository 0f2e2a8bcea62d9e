"""`bench model --validate`: the α-β what-if model (bench/analysis/whatif.py) against the published 2018 Batch AI
32-GPU efficiencies (docs/scaling-model.md). The published study is read through bench/facts/reference.py and this
module prints; the model itself only computes."""
from __future__ import annotations

from bench.commands import EXIT_OK
from bench.core.errors import BenchInputError

HELP = "the what-if scaling model: predicted vs published efficiency (--validate)"


def add_arguments(parser) -> None:
    from bench.analysis.whatif import DEFAULT_OVERLAP

    parser.add_argument("--validate", action="store_true", help="predicted vs published 32-GPU efficiency (Batch AI)")
    parser.add_argument("--overlap", type=float, default=DEFAULT_OVERLAP,
                        help="fraction of the backward pass communication hides behind, 0 to 1")
    parser.add_argument("--sensitivity", action="store_true", help="also vary overlap and the TCP figure")
    parser.add_argument("--all-points", action="store_true",
                        help="also the error at every published worker count (1-32), per series")


def run(args) -> int:
    from bench.analysis.study_validation import validate, with_tcp
    from bench.analysis.whatif import DEFAULT_OVERLAP, gradient_bytes
    from bench.facts import reference as study

    if not args.validate:
        raise BenchInputError("nothing to do: add --validate (predicted vs published 32-GPU efficiency; "
                              "see `bench model --help`)")
    reference = study.validation_rows()
    rows = validate(reference, overlap=args.overlap)
    fitted = [f"{r['gpu']} {r['fabric'].upper()}" for r in rows if r["fitted"]]
    print(f"overlap = {args.overlap}, gradient = {gradient_bytes() / 1e6:.1f} MB fp32, baseline = single-GPU bar "
          f"without MPI, reference = {study.VALIDATION_FILE} (final charts, {study.MODEL})")
    print(f"host staging per VM (the one fitted figure): {rows[0]['stage_GBps']:.2f} GB/s, fitted on "
          f"{', '.join(fitted)} at 32 GPUs; every other row is held out\n")
    print(markdown(rows))
    held = [r for r in rows if not r["fitted"]]
    worst = max(abs(r["error_points"]) for r in held)
    explained = [r for r in held if not r["unexplained"]]
    print(f"\nheld out: largest error {worst:.1f} points; within ±10: "
          f"{sum(abs(r['error_points']) <= 10 for r in held)}/{len(held)}")
    if len(explained) < len(held):
        print(f"held out, series the model explains: largest error "
              f"{max(abs(r['error_points']) for r in explained):.1f} points; within ±10: "
              f"{sum(abs(r['error_points']) <= 10 for r in explained)}/{len(explained)}")
        for r in held:
            if r["unexplained"]:
                print(f"{r['gpu']} {r['fabric'].upper()} ({r['error_points']:+.1f}): {r['unexplained']}")
    if args.all_points:
        print("\nerror at every published worker count (points; efficiency against the series' own 1-GPU bar):")
        print("\n".join(all_points()))
    if args.sensitivity:
        print("\nsensitivity (error in points, IB/TCP per GPU):")
        for ov in (0.0, 0.5, DEFAULT_OVERLAP, 1.0):
            for tcp in (2.0, 4.0, 10.0):
                rs = validate(reference, overlap=ov, links=with_tcp(tcp))
                cells = " ".join(f"{a['gpu']} {a['error_points']:+.0f}/{b['error_points']:+.0f}"
                                 for a, b in zip(rs[::2], rs[1::2]))
                print(f"  overlap {ov:.2f}, TCP {tcp:4.1f} Gb/s: {cells}")
    return EXIT_OK


def all_points() -> list[str]:
    """One line per published series: the model's error at each worker count (the study charts' residuals)."""
    from bench.analysis.study_validation import residuals
    from bench.facts.reference import published_series

    res = residuals(published_series())
    return [f"  {gpu} · {series}: " + " ".join(f"{n}:{e:+.0f}" for n, e in zip(s["gpus"], s["residual_points"]))
            for (gpu, series), s in res.groupby(["gpu", "series"], sort=True)]


def markdown(rows: list[dict]) -> str:
    """The validation rows as a Markdown table."""
    header = ("| GPU | fabric (run) | 1-GPU img/s | compute s | allreduce s | exposed s | predicted E(32) | "
              "published E(32) | error (points) | fit |")
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        run_ = "IB (Intel MPI, host path)" if r["fabric"] == "ib" else "TCP (Open MPI + NCCL 2.2 ring)"
        lines.append(f"| {r['gpu']} | {run_} | {r['single_gpu']:.2f} | {r['compute_s']:.3f} | {r['comm_s']:.3f} | "
                     f"{r['exposed_s']:.3f} | {100 * r['predicted']:.1f}% | {100 * r['published']:.1f}% | "
                     f"{r['error_points']:+.1f} | {'FITTED' if r.get('fitted') else 'held out'}"
                     f"{', not explained (below)' if r.get('unexplained') else ''} |")
    return "\n".join(lines)
