"""Side by side on this machine: bench's transformer worker against a plain loop around Hugging Face transformers'
model of the same shape (benchmarks/hf_transformer_loop.py): same shape, batch, sequence, precision (fp32),
optimizer and threads, one process each, no engine (bench's worker with --engine none). Rounds alternate the two,
so drift of a shared machine hits both alike; the median window rate of each over all rounds, and their ratio, are
printed (and written with --json).

    .venv/bin/python benchmarks/transformer_vs_hf.py --rounds 5

Both styles by default: a GPT-2 shape against GPT2LMHeadModel and the CPU cells' tiny Llama shape against
LlamaForCausalLM. transformers comes with the test extra (`make install-test`).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "models" / "workloads" / "transformer" / "pytorch_worker.py"
PEER = Path(__file__).resolve().parent / "hf_transformer_loop.py"
SHAPES = ("gpt2-L2-d128-h4-kv4-f512-v4096-t128-tied", "tiny")


def run_bench(shape: str, a, *flags: str) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.jsonl"
        cmd = [sys.executable, str(WORKER), "--model", shape, "--engine", "none", "--batch-size", str(a.batch),
               "--seq-len", str(a.seq), "--threads", str(a.threads), "--warmup-steps", str(a.warmup),
               "--steps", str(a.steps), "--repeats", str(a.windows), "--out", str(out), *flags]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if done.returncode or not out.exists():
            raise SystemExit(f"bench's worker failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        return [json.loads(line)["tokens_per_sec"] for line in out.read_text().splitlines()]


def run_peer(shape: str, a) -> list[float]:
    cmd = [sys.executable, str(PEER), shape, "--batch", str(a.batch), "--seq", str(a.seq), "--threads",
           str(a.threads), "--warmup", str(a.warmup), "--steps", str(a.steps), "--windows", str(a.windows)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    rates = [float(x) for x in re.findall(r"window \d+: ([\d.]+) tokens/s", done.stdout)]
    if done.returncode or len(rates) != a.windows:
        raise SystemExit(f"the peer failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return rates


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=list(SHAPES))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--json", default=None, help="write the figures here")
    a = p.parse_args(argv)
    results = {}
    for shape in a.shapes:
        # bench as it runs, bench without its allocator setting (models/measure/allocator.py: freed memory kept in the
        # process, which the peer's loop does not do), and the peer.
        sides = {"bench": lambda: run_bench(shape, a),
                 "bench, no allocator setting": lambda: run_bench(shape, a, "--no-hold-freed-memory"),
                 "transformers": lambda: run_peer(shape, a)}
        rates: dict[str, list[float]] = {side: [] for side in sides}
        for r in range(a.rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for side in order:
                rates[side] += sides[side]()
        medians = {side: statistics.median(v) for side, v in rates.items()}
        ratios = {side: medians[side] / medians["transformers"] for side in sides}
        results[shape] = {"median_tokens_per_sec": medians, "ratio_to_transformers": ratios, "windows": rates}
        for side in sides:
            print(f"{shape}: {side}: {medians[side]:,.0f} tokens/s, {ratios[side]:.3f}x transformers "
                  f"(median of {len(rates[side])} windows)", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"settings": vars(a), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
