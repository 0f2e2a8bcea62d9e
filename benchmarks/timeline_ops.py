"""How many collectives one training step issues: counts the distinct starts of Horovod's allreduce operations in a
Horovod timeline (HOROVOD_TIMELINE=FILE), one group per step (starts more than --gap ms apart begin a new step).
Tensors fused into one operation share its start, so the count is operations, not tensors.

    HOROVOD_TIMELINE=/tmp/tl.json horovodrun ... python models/resnet50_pytorch.py ...
    python benchmarks/timeline_ops.py /tmp/tl.json
"""
from __future__ import annotations

import argparse
import json

OPS = ("GLOO_ALLREDUCE", "MPI_ALLREDUCE", "NCCL_ALLREDUCE")


def ops_per_step(events: list[dict], gap_s: float) -> list[int]:
    starts = sorted({e["ts"] for e in events if e.get("ph") == "B" and e.get("name") in OPS})
    steps: list[list[int]] = []
    for ts in starts:
        if steps and ts - steps[-1][-1] < gap_s * 1e6:
            steps[-1].append(ts)
        else:
            steps.append([ts])
    return [len(s) for s in steps]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("timeline")
    p.add_argument("--gap", type=float, default=300, help="ms without an operation that ends a step (default 300)")
    args = p.parse_args()
    text = open(args.timeline).read().rstrip().rstrip(",")
    events = json.loads(text if text.endswith("]") else text + "]")  # a timeline cut off at exit lacks its "]"
    print("allreduce operations per step:", ops_per_step(events, args.gap / 1e3))


if __name__ == "__main__":
    main()
