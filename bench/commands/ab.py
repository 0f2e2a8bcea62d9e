"""`bench ab MATRIX --a SPEC --b SPEC`: the same cells under two environments, interleaved on this machine (A B, B A,
...), one pair at a time until every cell's verdict is decided or the budget is spent; judged from the paired ratios
B/A with an anytime-valid interval (bench/analysis/paired.py); exit 1 when B is slower in some cell.
The sides: bench/ab/spec.py. docs/regression-checks.md says when to use this rather than a baseline file."""
from __future__ import annotations

import math
import os
import re
import sys
import time

from bench.commands import EXIT_FAILED, EXIT_OK
from bench.commands.shared import add_ci_output_arguments, add_format_argument, add_store_argument, check_output_path
from bench.core.errors import BenchInputError

HELP = "paired A/B: the matrix under two environments, interleaved until decided; exit 1 if B is slower"

DEFAULT_BUDGET = "10m"
DEFAULT_MAX_PAIRS = 40
DEFAULT_CPU_WEIGHT = 100.0  # where this process may make cgroups (docs/regression-checks.md: it lowered the noise)


def add_arguments(parser) -> None:
    parser.add_argument("matrix")
    parser.add_argument("--a", default="current", metavar="SPEC",
                        help="side A (default: current): python=PATH, git=REF, image=NAME, cpus=N, env.NAME=VALUE, "
                             "comma-separated")
    parser.add_argument("--b", required=True, metavar="SPEC", help="side B, the same forms")
    parser.add_argument("--min-effect", type=float, default=0.10,
                        help="the smallest |ratio - 1| that matters (default 0.10 = 10%%): pairs are added until "
                             "each cell is regressed, improved, or shown to change by less than this")
    parser.add_argument("--budget", default=None, metavar="DURATION",
                        help=f"stop adding pairs when the next would end past this (default {DEFAULT_BUDGET}; "
                             "90s, 10m, 1h or seconds)")
    parser.add_argument("--max-pairs", type=int, default=None,
                        help=f"at most this many pairs (default {DEFAULT_MAX_PAIRS})")
    parser.add_argument("--pairs", type=int, default=None,
                        help="run exactly this many pairs, whatever the verdicts (not with --budget/--max-pairs)")
    add_store_argument(parser)
    parser.add_argument("--cpu-weight", default=None, metavar="W|off",
                        help="run both sides in cgroups with W times the default CPU weight (shields the "
                             f"measurement from other tenants' load; default {DEFAULT_CPU_WEIGHT:g} where this "
                             "process may make cgroups, off elsewhere)")
    parser.add_argument("--statistic", choices=("median", "peak"), default="median",
                        help="each side run's throughput: the median of its windows (default) or its fastest one")
    parser.add_argument("--timeout", type=float, default=None, help="per-cell timeout in seconds (both sides)")
    parser.add_argument("--workdir", default=None, help="where side runs' logs and scratch stores go "
                                                        "(default: a temporary directory, removed at the end)")
    add_format_argument(parser, "the verdicts, docs/ci/ab-result.schema.json, as --json writes them")
    parser.add_argument("--json", dest="json_path", default=None, metavar="PATH",
                        help="write the verdicts as JSON (docs/ci/ab-result.schema.json)")
    add_ci_output_arguments(parser)


def parse_duration(option: str, text: str) -> float:
    """'90s', '10m', '1.5h' or plain seconds → seconds (BenchInputError otherwise)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text or "")
    if not m or float(m.group(1)) <= 0:
        raise BenchInputError(f"{option} must be a positive duration such as 90s, 10m or 1h, got {text!r}")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def cpu_weight_of(text: str | None, specs=()) -> float | None:
    """--cpu-weight: a number, 'off', or unset (the default where cgroups can be made here and no side is an image,
    whose engine may not take a cgroup parent: bench/ab/image_side.py; else none)."""
    from bench.ab.cpuquota import cpu_controller_root

    if text is None:
        if any(s.image for s in specs):
            return None
        root = cpu_controller_root()
        return DEFAULT_CPU_WEIGHT if root is not None and os.access(root[0], os.W_OK) else None
    if text == "off":
        return None
    try:
        weight = float(text)
    except ValueError:
        raise BenchInputError(f"--cpu-weight must be a number between 0.01 and 100 or 'off', got {text!r}") from None
    if not 0.01 <= weight <= 100:
        raise BenchInputError(f"--cpu-weight must be between 0.01 and 100, got {weight:g}")
    return weight


class Plan:
    """How many pairs: exactly `fixed`, or one at a time until decided, `max_pairs` or the budget."""

    def __init__(self, args):
        from bench.analysis.paired import MIN_PAIRS

        if args.pairs is not None and (args.budget is not None or args.max_pairs is not None):
            raise BenchInputError("--pairs runs a fixed number of pairs: give it or --budget/--max-pairs, not both")
        self.fixed = args.pairs
        if self.fixed is not None and not MIN_PAIRS <= self.fixed <= 1000:
            raise BenchInputError(f"--pairs must be between {MIN_PAIRS} and 1000, got {self.fixed}")
        self.max_pairs = self.fixed or (args.max_pairs if args.max_pairs is not None else DEFAULT_MAX_PAIRS)
        if not MIN_PAIRS <= self.max_pairs <= 1000:
            raise BenchInputError(f"--max-pairs must be between {MIN_PAIRS} and 1000, got {self.max_pairs}")
        self.budget_s = None if self.fixed else parse_duration("--budget", args.budget or DEFAULT_BUDGET)

    def describe(self) -> str:
        if self.fixed:
            return f"{self.fixed} pairs"
        return f"pairs until decided: at most {self.max_pairs}, within {_minutes(self.budget_s)}"

    def stop_reason(self, pairs_run: int, results, elapsed_s: float, pair_s: float) -> str | None:
        """Why no further pair runs, or None to run one more."""
        from bench.analysis.paired import DECIDED, MIN_PAIRS

        if pairs_run >= self.max_pairs:
            return f"{pairs_run} pairs run" if self.fixed else f"--max-pairs {self.max_pairs} reached"
        if self.fixed:
            return None
        if pairs_run >= MIN_PAIRS and results and all(r["verdict"] in DECIDED for r in results):
            return "every cell decided"
        if elapsed_s + pair_s > self.budget_s:
            return f"budget of {_minutes(self.budget_s)} spent (another pair takes ~{pair_s:.0f} s)"
        return None


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.3g} min"


def run(args) -> int:
    from pathlib import Path

    from bench.ab.cpuquota import cpu_controller_root
    from bench.ab.session import Session, check_sides, remove_workdir
    from bench.ab.spec import parse_side
    from bench.analysis.paired import PairedSettings
    from bench.planning.matrix import load_matrix
    from bench.store import Store, check_writable

    specs = [parse_side("A", args.a), parse_side("B", args.b)]
    settings = PairedSettings(min_effect=args.min_effect)
    plan = Plan(args)
    if args.timeout is not None and args.timeout <= 0:
        raise BenchInputError(f"--timeout must be positive, got {args.timeout:g}")
    if args.format == "json" and args.github:
        raise BenchInputError("--format json prints one JSON document on stdout, where --github's annotations go "
                              "too: write the JSON with --json PATH beside --github")
    for option, path in (("--json", args.json_path), ("--junit", args.junit_path)):
        check_output_path(option, path)
    load_matrix(args.matrix)  # the sides load it again; a bad matrix stops here, before anything runs
    cpu_weight = cpu_weight_of(args.cpu_weight, specs)
    if (any(s.cpus for s in specs) or cpu_weight is not None) and cpu_controller_root() is None:
        raise BenchInputError("cpus= / --cpu-weight: no cgroup cpu controller is available here (root or a "
                              "delegated cgroup is needed)")
    check_sides(specs, cpu_weight)  # last: an image side asks the container engine
    store_path = Path(args.store)
    check_writable(store_path)
    limit_s = max(600.0, 4 * (args.timeout or 300))  # a side run that hangs past this is stopped
    say = _say()
    started = time.monotonic()
    side_runs = []
    with Store(store_path) as store:
        session = Session(specs, Path(args.workdir) if args.workdir else None, cpu_weight)
        with session:
            weight = f"CPU weight {cpu_weight:g}" if cpu_weight is not None else "no CPU weight"
            say(f"ab session {session.id}: A = {specs[0].describe()}; B = {specs[1].describe()}; {plan.describe()}, "
                f"interleaved A B / B A, {weight}; min effect {settings.min_effect:.0%}")
            results, stopped, pairs_run = [], None, 0
            while stopped is None:
                side_runs += session.run_pair(pairs_run, Path(args.matrix), store, timeout=args.timeout,
                                              limit_s=limit_s, say=say)
                pairs_run += 1
                results, _ = judge(store, side_runs, settings, args.statistic, specs, pairs_run, changes=False)
                elapsed = time.monotonic() - started
                say_progress(say, pairs_run, results, elapsed)
                stopped = plan.stop_reason(pairs_run, results, elapsed, elapsed / pairs_run)
        if not args.workdir and all(r.exit_code == 0 for r in side_runs):
            remove_workdir(session.workdir)
        results, diffs = judge(store, side_runs, settings, args.statistic, specs, pairs_run)
    elapsed = time.monotonic() - started
    course = {"pairs_run": pairs_run, "stopped": stopped, "seconds": round(elapsed, 1),
              "pair_seconds": round(elapsed / max(pairs_run, 1), 1), "budget_s": plan.budget_s,
              "max_pairs": plan.max_pairs, "fixed_pairs": plan.fixed, "cpu_weight": cpu_weight}
    print_results(args.format, results, diffs, settings, session.id, specs, args.statistic, course)
    write_ci_outputs(args, results, diffs, settings, session.id, specs, course)
    if not results:
        raise BenchInputError("no cell was measured on both sides (see the side runs' logs above)")
    return EXIT_FAILED if any(r["verdict"] == "regressed" for r in results) else EXIT_OK


def say_progress(say, pairs_run: int, results, elapsed_s: float) -> None:
    """One line per pair: each cell's verdict so far and its interval, and the time spent."""
    from bench.report.ab_table import interval_text, number

    cells = "; ".join(f"{r['cell']}: {r['verdict']} (ratio {number(r['ratio'], 3)}, interval "
                      f"{interval_text(r)})" for r in results) or "no cell measured on both sides yet"
    say(f"ab after {pairs_run} pair{'s' if pairs_run > 1 else ''}, {elapsed_s / 60:.1f} min: {cells}")


def write_ci_outputs(args, results, diffs, settings, session_id: str, specs, course: dict) -> None:
    """--json, --junit and --github (bench/ci_output/), the same files and annotations `check` writes."""
    from bench.ci_output.emit import write_junit_github
    from bench.ci_output.outcome import Heading, from_ab

    if args.json_path:
        from bench.ci_output.ab_json import write_ab_json

        write_ab_json(args.json_path, results, diffs, settings, session_id, specs, args.statistic, course)
    heading = Heading("bench ab", f"ab {session_id}: B ({specs[1].describe()}) against A ({specs[0].describe()})")
    write_junit_github(from_ab(results), heading, verdict_counts(results), diffs, junit_path=args.junit_path,
                       github=args.github)


def verdict_counts(results) -> dict[str, int]:
    return {v: sum(r["verdict"] == v for r in results) for v in dict.fromkeys(r["verdict"] for r in results)}


def _say():
    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)
    return say


def judge(store, side_runs, settings, statistic: str = "median", specs=(), pairs_run: int | None = None,
          changes: bool = True):
    """Per cell: the complete pairs, in the order they ran, and their verdict; and what differs between the sides'
    environments (`specs`: the sides' SideSpecs, for what their records cannot show; [] with changes=False, as
    after each pair of a session, where only the verdicts are read)."""
    from bench.analysis.collectives import training_only
    from bench.analysis.paired import pair_values, paired_verdict
    from bench.cells.keys import CELL_KEYS
    from bench.cells.label import cell_label
    from bench.cells.units import IMAGES, unit_of_cell

    run_side = {r.run_id: (r.pair, r.side) for r in side_runs if r.run_id}
    pairs_run = pairs_run if pairs_run is not None else len({r.pair for r in side_runs})
    df = training_only(store.dataframe())
    df = df[df["run_id"].isin(list(run_side))]
    pairs = pair_values(df, run_side, CELL_KEYS, statistic)
    results = []
    for cell, rows in pairs.groupby("cell", sort=False):
        complete = rows.dropna(subset=["A", "B"]).sort_values("pair")
        res = paired_verdict(complete["A"].tolist(), complete["B"].tolist(), settings)
        first = rows.iloc[0]
        unit = unit_of_cell(first.to_dict()) or IMAGES  # the values are samples/s; x units_per_sample = rate_unit
        results.append({"cell": cell_label(first), **{k: _plain(first[k]) for k in CELL_KEYS},
                        "rate_unit": unit.rate, "units_per_sample": unit.per_sample,
                        "pairs": res.n_pairs, "pairs_run": pairs_run,
                        "a_values": complete["A"].tolist(), "b_values": complete["B"].tolist(),
                        "ratio": res.ratio, "ci_low": res.ci_low, "ci_high": res.ci_high, "level": res.level,
                        "p_change": res.p_change, "sd_log": res.sd_log, "decides": res.decides,
                        "verdict": res.verdict, "why": res.why, "pairs_to_decide": res.pairs_to_decide})
    diffs = side_differences(df, run_side, store.runs(), specs) if changes else []
    return results, diffs


def side_differences(df, run_side, run_rows, specs=()):
    """What differs between side A's and side B's recorded environments (bench/analysis/envdiff.py), the source
    first: each side's revision (runs.source_json) and, where each side ran one revision, the files under bench/ and
    models/ that differ between them (bench/core/source_revision.py)."""
    from bench.analysis.envdiff import diff_environments, environment_of
    from bench.core.source_revision import SourceRevision, differing_files, source_text

    by_id = {r["run_id"]: r for r in run_rows}
    runs = {side: [by_id.get(r, {"run_id": r}) for r, (_, s) in run_side.items() if s == side] for side in ("A", "B")}
    envs = {side: environment_of(df[df["run_id"].isin([r["run_id"] for r in runs[side]])],
                                 [r.get("bench_version") or "" for r in runs[side]],
                                 [source_text(r) for r in runs[side]])
            for side in ("A", "B")}
    revisions = {side: {r.get("source_json") for r in runs[side]} for side in ("A", "B")}
    one = {side: SourceRevision.from_json(next(iter(texts))) if len(texts) == 1 else None
           for side, texts in revisions.items()}
    for spec in specs:
        # In a container the worker's probe sees only the container's own cgroup, not the side's quota above it
        # (bench/ab/image_side.py): the side's spec says what it was.
        if spec.image and spec.cpus and spec.name in envs:
            envs[spec.name]["CPU quota"] = f"{spec.cpus:g} CPUs"
    return diff_environments(envs["A"], envs["B"], differing_files(one["A"], one["B"]))


def _plain(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def print_results(fmt: str, results, diffs, settings, session_id, specs, statistic: str, course: dict) -> None:
    """The verdicts on stdout: the table (bench/report/ab_table.py) with each cell's reason, what differs between
    the sides and the summary line; or the JSON document --json writes; or a Markdown table."""
    from bench.report import ab_table

    level = f"{1 - settings.alpha:.0%}"
    if fmt == "json":
        from bench.ci_output.ab_json import ab_document, document_text

        print(document_text(ab_document(results, diffs, settings, session_id, specs, statistic, course)))
        return
    if fmt == "md":
        print(ab_table.markdown(results, level))
        return
    from bench.commands.console import stdout_console

    console = stdout_console()
    heading, labels = ab_table.title(session_id, results)
    console.say(heading, wrap=True)
    console.print_table(ab_table.table(results, labels, level))
    for r in results:
        console.say(f"  {r['cell']}: {r['why']}")
    print_differences(diffs)
    counts = verdict_counts(results)
    print(f"ab: {len(results)} cells: " + ", ".join(f"{n} {v}" for v, n in counts.items()) +
          f"; stopped after {course['pairs_run']} pairs ({course['stopped']}), {course['seconds'] / 60:.1f} min "
          f"(anytime-valid interval: every claim holds with {level} confidence however many pairs "
          f"were looked at; min effect {settings.min_effect:.0%})")


def print_differences(diffs) -> None:
    from bench.commands.lines import print_changes

    print_changes(diffs, "side A", "side B")
