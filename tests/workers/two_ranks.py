"""Two Gloo ranks spawned on this machine for a worker script run by a test: each runs `target(rank, *args, queue)`
and puts one JSON-able result on the queue; the script prints the results as a JSON list in rank order and exits
with the worst rank's exit code."""
import json
import sys

import torch.multiprocessing as mp


def run_two(target, *args) -> None:
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    ranks = [ctx.Process(target=target, args=(r, *args, queue)) for r in range(2)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join(120)
    print(json.dumps(sorted((queue.get() for _ in ranks), key=lambda r: r["rank"])))
    sys.exit(max(p.exitcode or 0 for p in ranks))
