#!/usr/bin/env python3
"""The time plan of one GPU loan: each phase of scripts/gpu_session.sh and each cell of its matrix, in expected
seconds, and the total, which must fit the loan (`--limit`, default 720 s of the 900 lent: the rest is slack for a
rerun). `scripts/gpu_session.sh --dry-run` prints it; exit 1 when the total is over the limit.

The figures are the first GPU run's (one H200, 2026-11-26, docs/gpu-results.md), where measured, and estimates where
not, each marked as such. After a loan, `--against` sets the plan beside what the loan took, row by row, and exits 1
when the rows it can compare took over 20 % more than planned (correct the constants here before the next loan). It
reads a session's work folder (`.gpu-session`), the `gpu-session.tar.gz` a command brought back, or a bare
`bench.db`: a phase's seconds from `done/<phase>` ("<when> in N s"); a cell's from the store, the time from the
previous record's write in the same run (or the run's start, for its first cell) to its own last record's write:
process start, warm-up, windows and the runner's own work, what the plan's cell rows count. The machine's start is
not in them: the device tool's `lease.held_s` less its commands' `wall_s` gives it.

It also says how the plan splits into commands of the device tool (at most 600 s each) running
`scripts/gpu_session.sh --phase all --deadline 540`: the first command runs the phases and the cells that end by
the deadline; the same command again, on the still-warm machine, resumes with the rest (its phases are done).

Usage: scripts/gpu_time_plan.py [--matrix matrix-gpu.yaml] [--gpu H200] [--prebuilt yes|no] [--limit 720]
         [--deadline 540] [--against .gpu-session | gpu-session.tar.gz | bench.db]
"""
from __future__ import annotations

import argparse
import re
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Seconds, with where each comes from.
# The 2026-11-26 loan: 875 s of device time for 722 s of commands (77 + 93 + 329 + 223), so two machine starts and
# the waits between four commands took 153 s: at most ~75 s a start.
MACHINE_START_S = 90
PHASE_S = {
    "install": 15,  # measured 11 s (call 1)
    "build-prebuilt": 15,  # the kit's Horovod wheel: pip install + the nccl_built()/ldd checks (estimate)
    "build-sdist": 120,  # measured 89-118 s from the sdist (calls 3 and 4)
    "doctor": 25,  # nvidia-smi, torch, bench doctor, bench plan (estimate from call 3's log)
    "data": 40,  # the ImageNet-like JPEG sample made there (estimate; docs/gpu.md, "Real data on the GPU")
    "report": 15,  # bench report on a dozen cells (estimate)
}
CELL_START_S = 22  # process start, model, NCCL, cuDNN autotune, to the first window: measured 21.7 s (headline cell)
# img/s per GPU by how a cell computes. Measured on the H200: fp16 channels-last Horovod 5,940, DDP 5,546, NCHW 3,003,
# Pillow JPEG 769. Not measured, assumed conservatively (slower is the safe side of a plan): bf16 as fp16; fp32 at a
# third of fp16 (TF32 tensor cores; no figure yet); the GPU JPEG loaders at Pillow's rate.
RATE = {"fp16": 5940.0, "bf16": 5940.0, "fp32": 1980.0}
NCHW_FACTOR = 3003 / 5940
NATIVE_FACTOR = 5546 / 5940
IMAGENET_RATE = 769.0
COMPILE_S = {"off": 0, "default": 90, "reduce-overhead": 120, "max-autotune": 400}  # estimates: compile time
GRAPH_CAPTURE_S = 10  # CUDA graph warm-up and capture (estimate)


# The transformer (docs/transformer.md), from the 2026-12-04 H200 loan (docs/gpu-results.md): MFU 18.7-19.5 % eager
# or at 16 sequences under FSDP2, 31.7-53.8 % compiled; each cell took 28-90 s with its start and compile (the first
# compile in a fresh machine ~20 s, inferred from the cell's time). The plan takes MFU 35 % compiled and 18 % eager
# against the H100/H200 dense peak (the step's FLOPs by the 6N + 12LHQT count), FSDP2 at 0.9 of that, and 25 s to
# compile: every measured cell then plans at or above what it took (0.8x on the whole loan). The peak is the
# catalogue's for the cell's GPU and precision, as MFU's (bench/analysis/mfu.py).
TRANSFORMER_MFU = {"compiled": 0.35, "eager": 0.18}
FSDP2_FACTOR = 0.9
TRANSFORMER_COMPILE_S = 25


def transformer_seconds(cell: dict) -> float:
    from bench.analysis.mfu import catalogue_peaks, peak_format
    from models.workloads.transformer.shapes import lookup

    peaks = catalogue_peaks()[cell["gpu"]]
    shape = lookup(cell["model"])
    seq = cell.get("seq_len") or shape.seq
    compiled = (cell.get("compile") or "off") != "off"
    mfu = TRANSFORMER_MFU["compiled" if compiled else "eager"]
    peak = peaks[peak_format(cell["precision"], peaks)] * 1e12
    rate = mfu * peak / (shape.flops_per_sequence(seq) / seq)  # tokens/s
    rate *= FSDP2_FACTOR if cell.get("engine") == "fsdp2" else 1.0
    tokens = ((cell["warmup_steps"] + cell["repeats"] * cell["steps"]) * cell["batch_per_gpu"]
              * cell.get("grad_accum", 1) * seq * cell.get("jobs", 1))
    return CELL_START_S * cell.get("jobs", 1) + tokens / rate + (TRANSFORMER_COMPILE_S if compiled else 0)


def cell_seconds(cell: dict) -> float:
    from models.registry.workloads import is_transformer

    if is_transformer(cell["model"]):
        return transformer_seconds(cell)
    rate = RATE[cell["precision"]]
    if not cell.get("channels_last", True):
        rate *= NCHW_FACTOR
    if cell.get("engine") == "native":
        rate *= NATIVE_FACTOR
    if cell.get("data") == "imagenet":
        rate = min(rate, IMAGENET_RATE)
    images = (cell["warmup_steps"] + cell["repeats"] * cell["steps"]) * cell["batch_per_gpu"] * cell.get("jobs", 1)
    extra = COMPILE_S.get(cell.get("compile") or "off", 0) + (GRAPH_CAPTURE_S if cell.get("cuda_graphs") else 0)
    return CELL_START_S * cell.get("jobs", 1) + images / rate + extra


class Row(NamedTuple):
    key: str  # a phase of gpu_session.sh, a cell's id, or "machine start"
    name: str
    seconds: float


def plan(matrix: str, gpu: str, prebuilt: bool, skip: frozenset = frozenset()) -> list[Row]:
    from bench.cells.label import cell_label
    from bench.planning.matrix import load_matrix
    from bench.planning.plan import plan_cells

    rows = [Row("machine start", "machine start", MACHINE_START_S), Row("install", "install", PHASE_S["install"]),
            Row("build", "build (" + ("the kit's Horovod wheel" if prebuilt else "Horovod from the sdist") + ")",
                PHASE_S["build-prebuilt" if prebuilt else "build-sdist"]),
            Row("doctor", "doctor", PHASE_S["doctor"])]
    # Cells as the GPU machine plans them: every rule but this machine's own reach (it has no GPU).
    cells = [p for p in plan_cells(load_matrix(matrix).cells(), None) if p.runnable and p.cell["gpu"] == gpu]
    rows.append(Row("data", "data", PHASE_S["data"]))  # gpu_session.sh runs it unless --skip data
    rows += [Row(p.cell_id, f"cell {cell_label(p.cell, p.nodes)}", cell_seconds(p.cell)) for p in cells]
    rows.append(Row("report", "report", PHASE_S["report"]))
    return [r for r in rows if r.key not in skip]  # gpu_session.sh --skip


def commands(rows: list[Row], deadline: float) -> list[list[str]]:
    """The rows (after the machine's start) each command of `--phase all --deadline D` runs: a cell that would end
    after the deadline is left to the next command (the cells phase's timeout cuts it; the next resumes it)."""
    out: list[list[str]] = [[]]
    used = 0.0
    for _, name, seconds in rows:
        if name == "machine start":
            continue
        if name.startswith("cell ") and used + seconds > deadline and out[-1]:
            out.append([])
            used = 0.0
        out[-1].append(name)
        used += seconds
    return out


class Taken(NamedTuple):
    key: str  # a phase, or a cell's id
    name: str
    seconds: float
    status: str  # done, or the cell's last record's status (ok, failed, interrupted, skipped)


PHASE_DONE = re.compile(r" in (\d+) s$")


def loan_times(source: Path) -> tuple[list[Taken], str | None]:
    """What a loan took, in the order it ran: the phases that finished (`done/<phase>`), then each cell of each run
    of the store, and the GPU most of its records name. `source`: a work folder, its archive, or a bench.db."""
    if source.is_file() and tarfile.is_tarfile(source):
        with tempfile.TemporaryDirectory() as tmp, tarfile.open(source) as archive:
            archive.extractall(tmp, members=[m for m in archive.getmembers() if m.isfile() and
                                             (m.name.startswith(("bench.db", "done/")))], filter="data")
            return loan_times(Path(tmp))
    folder, store = (source, source / "bench.db") if source.is_dir() else (None, source)
    taken = []
    if folder is not None and (folder / "done").is_dir():
        for phase in ("install", "build", "doctor", "data", "cells", "report"):
            marker = folder / "done" / phase
            found = PHASE_DONE.search(marker.read_text().strip()) if marker.is_file() else None
            if found and phase != "cells":  # the cells phase is its cells, row by row
                taken.append(Taken(phase, phase, float(found.group(1)), "done"))
    if not store.is_file():
        return taken, None
    cells, gpus = cell_times(store)
    return taken + cells, (gpus.most_common(1)[0][0] if gpus else None)


def cell_times(store: Path) -> tuple[list[Taken], Counter]:
    """Each cell's wall time per run: from the previous cell's last write (or the run's start) to its own."""
    from bench.cells.label import cell_label
    from bench.store import Store

    with Store(store, read_only=True) as db:  # an older store is migrated in memory: its file stays as it was
        runs = {r["run_id"]: r["started_unix"] for r in db.runs()}
        rows = sorted(db.records(), key=lambda r: (r["run_id"], r["written_unix"]))
    last: dict[tuple[str, str], dict] = {}  # (run, cell) → its last record
    for row in rows:
        last[(row["run_id"], row["cell_id"])] = row
    taken, gpus, previous = [], Counter(), {}
    for (run, cell), row in sorted(last.items(), key=lambda item: (runs.get(item[0][0], 0), item[1]["written_unix"])):
        begun = previous.get(run, runs.get(run))
        previous[run] = row["written_unix"]
        if begun is None:
            continue  # an imported run: no start to count from
        try:
            name = f"cell {cell_label(row, row.get('nodes') or 1)}"
        except (KeyError, TypeError, ValueError):
            name = f"cell {cell}"
        taken.append(Taken(cell, name, row["written_unix"] - begun, row["status"]))
        if row["gpu"]:
            gpus[row["gpu"]] += 1
    return taken, gpus


def against(rows: list[Row], taken: list[Taken], *, slack: float = 1.2) -> int:
    """Prints the plan beside what the loan took; 1 when the compared rows took over `slack` times their plan."""
    planned = {row.key: row for row in rows}
    width = max([len(t.name) for t in taken] + [len(r.name) for r in rows] + [10])
    print(f"  {'':<{width}}  planned   taken  taken/planned")
    sum_planned = sum_taken = 0.0
    for t in taken:
        row = planned.get(t.key)
        note = "" if t.status in ("ok", "done") else f"  ({t.status})"
        if row is None:
            print(f"  {t.name:<{width}}        -  {t.seconds:5.0f} s  not in the plan{note}")
            continue
        ratio = t.seconds / row.seconds if row.seconds else float("inf")
        print(f"  {row.name:<{width}}  {row.seconds:5.0f} s  {t.seconds:5.0f} s  {ratio:5.2f}{note}")
        if t.status in ("ok", "done"):
            sum_planned += row.seconds
            sum_taken += t.seconds
    ran = {t.key for t in taken}
    for r in rows:
        if r.key not in ran and r.key != "machine start":
            print(f"  {r.name:<{width}}  {r.seconds:5.0f} s        -  not run")
    if not sum_planned:
        print("  nothing to compare: no planned phase or cell finished")
        return 0
    print(f"  {'compared':<{width}}  {sum_planned:5.0f} s  {sum_taken:5.0f} s  {sum_taken / sum_planned:5.2f}")
    if sum_taken > slack * sum_planned:
        print(f"gpu_time_plan: the loan took {sum_taken / sum_planned:.2f}x the plan where they compare (over "
              f"{slack:.1f}x): correct the constants in scripts/gpu_time_plan.py before the next loan", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--matrix", default="matrix-gpu.yaml")
    p.add_argument("--gpu", default=None, help="the catalogue key the loan's GPU is (default: the slowest plan "
                                               "of H100 and H200; with --against, the GPU its records name)")
    p.add_argument("--prebuilt", choices=("yes", "no"), default="yes")
    p.add_argument("--skip", default="", help="phases gpu_session.sh skips (--skip build,data)")
    p.add_argument("--limit", type=float, default=720.0)
    p.add_argument("--deadline", type=float, default=540.0, help="gpu_session.sh's --deadline in each command")
    p.add_argument("--against", type=Path, default=None, metavar="PATH",
                   help="a session's work folder, its gpu-session.tar.gz, or a bench.db: print the plan beside it")
    args = p.parse_args(argv)
    prebuilt = args.prebuilt == "yes"
    skip = frozenset(filter(None, args.skip.split(",")))
    if not skip <= {"build", "data"}:
        print(f"gpu_time_plan: --skip takes build and data, got '{args.skip}'", file=sys.stderr)
        return 2
    if args.against is not None:
        from bench.core.errors import BenchInputError

        if not args.against.exists():
            print(f"gpu_time_plan: --against {args.against}: no such file or folder", file=sys.stderr)
            return 2
        try:
            taken, seen_gpu = loan_times(args.against)
        except (BenchInputError, tarfile.TarError, OSError) as error:
            print(f"gpu_time_plan: --against {args.against}: not a session folder, archive or store ({error})",
                  file=sys.stderr)
            return 2
        gpu = args.gpu or seen_gpu or "H200"
        print(f"time plan for one {gpu} loan ({args.matrix}) against {args.against}:")
        return against(plan(args.matrix, gpu, prebuilt, skip), taken)
    plans = {g: plan(args.matrix, g, prebuilt, skip) for g in ([args.gpu] if args.gpu else ["H100", "H200"])}
    gpu, rows = max(plans.items(), key=lambda item: sum(r.seconds for r in item[1]))
    total = sum(r.seconds for r in rows)
    width = max(len(r.name) for r in rows)
    print(f"time plan for one {gpu} loan ({args.matrix}):")
    for _, name, seconds in rows:
        print(f"  {name:<{width}}  {seconds:6.0f} s")
    print(f"  {'total':<{width}}  {total:6.0f} s (limit {args.limit:.0f} s)")
    split = commands(rows, args.deadline)
    seconds = {r.name: r.seconds for r in rows}
    for i, names in enumerate(split, 1):
        cells = [n for n in names if n.startswith("cell ")]
        print(f"command {i} (scripts/gpu_session.sh --phase all --deadline {args.deadline:.0f}): "
              f"{sum(seconds[n] for n in names):.0f} s, {len(cells)} cell{'s' * (len(cells) != 1)}"
              + (f", through {cells[-1][5:]}" if cells else ""))
    if len(split) > 1:
        # bench run starts the next cell anyway and the deadline cuts it: the first command then takes all its
        # time (+ the 30 s a cut run has to stop), and the next reruns the cell.
        worst = MACHINE_START_S + args.deadline + 30 + sum(seconds[n] for names in split[1:] for n in names)
        print(f"  if the first cell of command 2 starts in command 1 and is cut at the deadline: {worst:.0f} s "
              f"of the 900 lent")
    if total > args.limit:
        print(f"gpu_time_plan: the plan needs {total:.0f} s, over the {args.limit:.0f} s limit: drop cells from "
              f"{args.matrix} or shorten them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
