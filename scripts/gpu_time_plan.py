#!/usr/bin/env python3
"""The time plan of one GPU loan: each phase of scripts/gpu_session.sh and each cell of its matrix, in expected
seconds, and the total, which must fit the loan (`--limit`, default 720 s of the 900 lent: the rest is slack for a
rerun). `scripts/gpu_session.sh --dry-run` prints it; exit 1 when the total is over the limit.

The figures are the first GPU run's (one H200, 2026-11-26, docs/gpu-results.md), where measured, and estimates where
not, each marked as such; after a loan, compare them with the phases' real times (`.gpu-session/done/<phase>` holds
"<when> in N s") and the cells' (their records' start times), and correct the constants here.

It also says how the plan splits into commands of the device tool (at most 600 s each) running
`scripts/gpu_session.sh --phase all --deadline 540`: the first command runs the phases and the cells that end by
the deadline; the same command again, on the still-warm machine, resumes with the rest (its phases are done).

Usage: scripts/gpu_time_plan.py [--matrix matrix-gpu.yaml] [--gpu H200] [--prebuilt yes|no] [--limit 720]
         [--deadline 540]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

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


def cell_seconds(cell: dict) -> float:
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


def plan(matrix: str, gpu: str, prebuilt: bool) -> list[tuple[str, float]]:
    from bench.cell_label import cell_label
    from bench.matrix import load_matrix
    from bench.plan import plan_cells

    rows = [("machine start", MACHINE_START_S), ("install", PHASE_S["install"]),
            ("build (" + ("the kit's Horovod wheel" if prebuilt else "Horovod from the sdist") + ")",
             PHASE_S["build-prebuilt" if prebuilt else "build-sdist"]),
            ("doctor", PHASE_S["doctor"])]
    # Cells as the GPU machine plans them: every rule but this machine's own reach (it has no GPU).
    cells = [p for p in plan_cells(load_matrix(matrix).cells(), None) if p.runnable and p.cell["gpu"] == gpu]
    if any(p.cell["data"] == "imagenet" for p in cells):
        rows.append(("data", PHASE_S["data"]))
    rows += [(f"cell {cell_label(p.cell, p.nodes)}", cell_seconds(p.cell)) for p in cells]
    rows.append(("report", PHASE_S["report"]))
    return rows


def commands(rows: list[tuple[str, float]], deadline: float) -> list[list[str]]:
    """The rows (after the machine's start) each command of `--phase all --deadline D` runs: a cell that would end
    after the deadline is left to the next command (the cells phase's timeout cuts it; the next resumes it)."""
    out: list[list[str]] = [[]]
    used = 0.0
    for name, seconds in rows:
        if name == "machine start":
            continue
        if name.startswith("cell ") and used + seconds > deadline and out[-1]:
            out.append([])
            used = 0.0
        out[-1].append(name)
        used += seconds
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--matrix", default="matrix-gpu.yaml")
    p.add_argument("--gpu", default=None, help="the catalogue key the loan's GPU is (default: the slowest plan "
                                               "of H100 and H200)")
    p.add_argument("--prebuilt", choices=("yes", "no"), default="yes")
    p.add_argument("--limit", type=float, default=720.0)
    p.add_argument("--deadline", type=float, default=540.0, help="gpu_session.sh's --deadline in each command")
    args = p.parse_args(argv)
    prebuilt = args.prebuilt == "yes"
    plans = {g: plan(args.matrix, g, prebuilt) for g in ([args.gpu] if args.gpu else ["H100", "H200"])}
    gpu, rows = max(plans.items(), key=lambda item: sum(s for _, s in item[1]))
    total = sum(s for _, s in rows)
    width = max(len(name) for name, _ in rows)
    print(f"time plan for one {gpu} loan ({args.matrix}):")
    for name, seconds in rows:
        print(f"  {name:<{width}}  {seconds:6.0f} s")
    print(f"  {'total':<{width}}  {total:6.0f} s (limit {args.limit:.0f} s)")
    split = commands(rows, args.deadline)
    seconds = dict(rows)
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
