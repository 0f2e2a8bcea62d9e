"""How near a cell's first run comes to its expected value: K first runs of the cells --where selects from a matrix
(the default matrix.yaml), each as a user makes it (`bench run` in a new folder, so every probe is measured, then
`bench status`), and for each 2-worker cell its measurement, its expected value, their ratio, the verdict, and the
engine probes measured again after it.

    .venv/bin/python benchmarks/first_runs.py --where model=tiny,engine=fsdp2,gpus=2 --runs 6

Prints one JSON line a cell and run (and appends it to --out when given), then the ratios' median and how many lay
within 10%. docs/diagnose.md quotes its figures. Run from the repository root with nothing else running.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERDICT = re.compile(r"^\s+(\w{12})\s+(\S+) .*: measured ([\d.,]+) \S+, expected ([\d.,]+) .*?\): "
                     r"((?:as|above|below) expected[^;\n]*)")
AGAIN = re.compile(r"engine, again: measured in \d+ s \((the cell ran \d+% (?:above|below))")


def one_run(matrix: Path, where: str, folder: Path) -> list[dict]:
    shutil.copy(matrix, folder / "m.yaml")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "bench", "run", "m.yaml", "--where", where], cwd=folder, env=env,
                         capture_output=True, text=True)
    status = subprocess.run([sys.executable, "-m", "bench", "status"], cwd=folder, env=env, capture_output=True,
                            text=True)
    again = AGAIN.findall(run.stdout + run.stderr)
    out = []
    for line in status.stdout.splitlines():
        if (m := VERDICT.match(line)) and "/2w" in m[2]:
            measured, expected = float(m[3].replace(",", "")), float(m[4].replace(",", ""))
            out.append({"exit": run.returncode, "cell": m[1], "label": m[2], "measured": measured,
                        "expected": expected, "ratio": round(measured / expected, 3), "verdict": m[5],
                        "again": again})
    return out or [{"exit": run.returncode, "problem": (run.stderr or run.stdout)[-400:]}]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--where", required=True, help="the cells, as bench run --where takes them")
    ap.add_argument("--runs", type=int, default=6, help="first runs (default 6)")
    ap.add_argument("--matrix", type=Path, default=ROOT / "matrix.yaml", help="default: the repository's matrix.yaml")
    ap.add_argument("--out", type=Path, help="also append each line to this file")
    args = ap.parse_args()
    if not 1 <= args.runs <= 30:
        print("first_runs: --runs must be 1 to 30", file=sys.stderr)
        return 2
    if not args.matrix.is_file():
        print(f"first_runs: --matrix {args.matrix}: no such file", file=sys.stderr)
        return 2
    ratios = []
    for k in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-first-run-") as folder:
            lines = one_run(args.matrix.resolve(), args.where, Path(folder))
        for line in lines:
            ratios += [line["ratio"]] if "ratio" in line else []
            text = json.dumps({"run": k, **line})
            print(text, flush=True)
            if args.out:
                with args.out.open("a") as f:
                    f.write(text + "\n")
    if ratios:
        near = sum(0.9 <= r <= 1.1 for r in ratios)
        print(f"measured / expected: median {statistics.median(ratios):.3f}, {min(ratios):.3f}-{max(ratios):.3f}; "
              f"within 10%: {near} of {len(ratios)}")
    return 0 if ratios else 1


if __name__ == "__main__":
    sys.exit(main())
