"""Parallel layouts (docs/layouts.md): how a training job splits over its GPUs, as torchtitan names the degrees, and
the analytic side of choosing one: pure arithmetic, no torch, no I/O, so the plan, the workers' launch and the
planner verb can all use it.

- `layout.py`: `Layout` (dp_replicate, dp_shard, tp, pp, cp, ep; schedule, micro-batches, virtual stages), parsing
  one from text, every layout of a world size
- `shapes.py`: the transformer shapes the planner knows (the workers' table plus the published 70B and 405B)
- `fabric.py`: the two tiers a layout's traffic crosses (inside a node, between nodes), from the catalogue's links
- `feasibility.py`: why a layout cannot run a shape on a cluster (each refusal one sentence)
- `memory.py`: per-rank memory (states after sharding, activations, in-flight pipeline micro-batches)
- `steptime.py`: a step's time: compute, each dimension's exposed traffic, the pipeline bubble
- `planner.py`: every layout of a cluster, judged and ranked
- `published.py`: the published tables (torchtitan, NVIDIA dgxc) and the model's predictions beside them
- `emit.py`: a matrix of the best few layouts, to measure
"""
