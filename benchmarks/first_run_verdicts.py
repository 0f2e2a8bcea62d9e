"""Are first-run verdicts right? Three measurements on this machine (docs/diagnose.md, "Measured: first-run
verdicts"), each bounded in count and time, every figure logged to OUT/*.tsv as it lands:

1. healthy: --healthy runs of the default matrix's 2-worker cells (`--where` below), each in one store with
   `--rerun`, the probes measured once by the first run and reused after (as on a user's machine; the slowed tries
   run after the first healthy run, with its probes): after each run,
   how many of the run's cells `bench status` calls below expected, and each cell's measured / expected ratio;
2. slowed: --slowed first runs of one 2-worker cell, each in a new store (the probes reused: measured on the quiet
   machine), beside one busy process outside the cell, pinned to CPU 1 (rank 1's core when the ranks are pinned;
   one of the two cores otherwise) in even tries and unpinned in odd ones, killed when the run ends; whether the
   cell came out below expected with that process's pid named;
3. check: `bench check` of each healthy run against the one before (unchanged re-runs): how many exit 1.

    .venv/bin/python benchmarks/first_run_verdicts.py --out /tmp/first-run --healthy 10 --slowed 10

Run from the repository root on a machine with nothing else running (a co-runner skews the healthy figures; that is
the point of part 2).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEALTHY_WHERE = "gpus=2"
SLOWED_WHERE = "gpus=2,framework=pytorch,mpi=gloo,engine=horovod,data=synthetic,model=resnet50"
LINE = re.compile(r"^\s+(\w{12})\s+(\S+).*: measured ([\d,.]+) \S+, expected ([\d,.]+) ")


def bench(*argv: str, log: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "bench", *argv], cwd=str(ROOT), env=env, capture_output=True,
                         text=True)
    if log is not None:
        log.write_text(out.stdout + out.stderr)
    return out


def verdict_lines(store: Path) -> list[str]:
    status = bench("status", "--store", str(store)).stdout
    return [line for line in status.splitlines() if re.search(r"/2w[ /]", line) and ": measured " in line]


def number(text: str) -> float:
    return float(text.replace(",", ""))


def healthy(out: Path, store: Path, runs: int, stop_at: float) -> None:
    tsv = out / "healthy.tsv"
    if not tsv.exists():
        tsv.write_text("run\tseconds\tcells\tbelow\tratios\n")
    done = len(tsv.read_text().splitlines()) - 1
    for i in range(done, runs):
        if time.time() > stop_at:
            print(f"healthy: deadline reached after {i} runs", flush=True)
            return
        t = time.time()
        bench("run", "matrix.yaml", "--where", HEALTHY_WHERE, "--store", str(store), "--rerun",
              log=out / f"healthy{i:02d}.log")
        lines = verdict_lines(store)
        (out / f"healthy{i:02d}-status.txt").write_text("\n".join(lines))
        below = sum(": below expected" in line for line in lines)
        ratios = [f"{m.group(2)}={number(m.group(3)) / number(m.group(4)):.3f}" for line in lines
                  if (m := LINE.match(line))]
        with open(tsv, "a") as f:
            f.write(f"{i}\t{time.time() - t:.0f}\t{len(lines)}\t{below}\t{' '.join(ratios)}\n")
        print(f"healthy {i}: {len(lines)} cells, {below} below expected", flush=True)


def slowed(out: Path, probes: Path, tries: int, stop_at: float) -> None:
    tsv = out / "slowed.tsv"
    if not tsv.exists():
        tsv.write_text("try\tpinned\tseconds\tbelow\tnamed\tline\n")
    done = len(tsv.read_text().splitlines()) - 1
    for i in range(done, tries):
        if time.time() > stop_at:
            print(f"slowed: deadline reached after {i} tries", flush=True)
            return
        pinned = i % 2 == 0 and 1 in os.sched_getaffinity(0)
        results = out / f"slowed{i:02d}"
        (results / "probes").mkdir(parents=True, exist_ok=True)
        for f in probes.glob("*.json"):  # the quiet machine's probes, as a user's earlier runs left them
            (results / "probes" / f.name).write_bytes(f.read_bytes())
        busy = [sys.executable, "-c", "import time\nend = time.time() + 600\nwhile time.time() < end: pass"]
        hog = subprocess.Popen((["taskset", "-c", "1"] if pinned else []) + busy)
        t = time.time()
        try:
            bench("run", "matrix.yaml", "--where", SLOWED_WHERE, "--store", str(results / "bench.db"),
                  log=out / f"slowed{i:02d}.log")
        finally:
            hog.kill()
            hog.wait()
        lines = verdict_lines(results / "bench.db")
        line = lines[0] if lines else ""
        below, named = ": below expected" in line, f"pid {hog.pid}" in line
        with open(tsv, "a") as f:
            f.write(f"{i}\t{int(pinned)}\t{time.time() - t:.0f}\t{int(below)}\t{int(named)}\t{line.strip()}\n")
        print(f"slowed {i} ({'pinned' if pinned else 'unpinned'}): below {below}, named {named}", flush=True)


def checks(out: Path, store: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from bench.store import Store

    with Store(store, read_only=True) as s:
        runs = [r["run_id"] for r in s.runs() if r.get("finished_unix")]
    tsv = out / "check.tsv"
    tsv.write_text("baseline\tcandidate\texit\tregressed\n")
    for a, b in zip(runs, runs[1:]):
        c = bench("check", "--store", str(store), "--baseline", f"run:{a}", "--candidate", f"run:{b}")
        regressed = c.stdout.count("regressed")
        with open(tsv, "a") as f:
            f.write(f"{a}\t{b}\t{c.returncode}\t{regressed}\n")
        (out / f"check-{b}.txt").write_text(c.stdout + c.stderr)
        print(f"check {a} → {b}: exit {c.returncode}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--healthy", type=int, default=10)
    p.add_argument("--slowed", type=int, default=10)
    p.add_argument("--deadline-min", type=float, default=120)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stop_at = time.time() + args.deadline_min * 60
    store = out / "healthy" / "bench.db"
    store.parent.mkdir(exist_ok=True)
    healthy(out, store, 1, stop_at)  # the first run measures the probes on the quiet machine
    slowed(out, store.parent / "probes", args.slowed, stop_at)
    healthy(out, store, args.healthy, stop_at)
    checks(out, store)
    return 0


if __name__ == "__main__":
    sys.exit(main())
