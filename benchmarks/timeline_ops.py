"""How many collectives one training step issues: counts Horovod's allreduce operations in a Horovod timeline
(HOROVOD_TIMELINE=FILE), one group per step (operations more than --gap ms apart begin a new step), with the time
an operation was in flight per step.

Tensors fused into one operation each get a span of their own in the timeline, starting tens of microseconds apart:
overlapping spans are one operation, so the count is operations, not tensors (counting distinct start times would
count a fused group several times).

    HOROVOD_TIMELINE=/tmp/tl.json horovodrun ... python models/workloads/resnet50/pytorch_worker.py ...
    python benchmarks/timeline_ops.py /tmp/tl.json
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict

OPS = ("GLOO_ALLREDUCE", "MPI_ALLREDUCE", "NCCL_ALLREDUCE")


def operation_spans(events: list[dict]) -> list[tuple[float, float]]:
    """(start, end) in µs of each allreduce operation: every tensor's OPS span, overlapping spans merged."""
    open_at: dict[int, list[tuple[str, float]]] = defaultdict(list)
    spans = []
    for e in events:
        if e.get("ph") == "B":
            open_at[e["pid"]].append((e.get("name"), e["ts"]))
        elif e.get("ph") == "E" and open_at[e["pid"]]:
            name, start = open_at[e["pid"]].pop()
            if name in OPS:
                spans.append((start, e["ts"]))
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def per_step(spans: list[tuple[float, float]], gap_s: float) -> list[list[tuple[float, float]]]:
    steps: list[list[tuple[float, float]]] = []
    for span in spans:
        if steps and span[0] - steps[-1][-1][1] < gap_s * 1e6:
            steps[-1].append(span)
        else:
            steps.append([span])
    return steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("timeline")
    p.add_argument("--gap", type=float, default=300, help="ms without an operation that ends a step (default 300)")
    args = p.parse_args()
    text = open(args.timeline).read().rstrip().rstrip(",")
    events = json.loads(text if text.endswith("]") else text + "]")  # a timeline cut off at exit lacks its "]"
    steps = per_step(operation_spans(events), args.gap / 1e3)
    print("allreduce operations per step:", [len(s) for s in steps])
    print("ms with an operation in flight per step:", [round(sum(b - a for a, b in s) / 1e3) for s in steps])


if __name__ == "__main__":
    main()
