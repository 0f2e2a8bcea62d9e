"""Builds records the way a worker would, from per-rank timings, so tests exercise the real meter."""
from bench.planning.cell import cell_id
from bench.planning.matrix import load_matrix_text
from models.measure.meter import combine


def cell(**overrides):
    base = load_matrix_text("name: t\naxes: {gpu: [cpu]}\n").cells()[0]
    return {**base, **overrides}


def rank(rank_no, samples, window_s, busy_s=None, steps=4, start=1000.0):
    busy_s = window_s if busy_s is None else busy_s
    return {"rank": rank_no, "host": "h", "samples": samples, "steps": steps, "window_s": window_s, "busy_s": busy_s,
            "samples_per_sec": samples / busy_s if busy_s else None,
            "step_times_s": [busy_s / steps] * steps if steps else [],
            "start_unix": start, "end_unix": start + window_s}


def record(run_id="r1", repeat=0, rate_scale=1.0, **cell_overrides):
    c = cell(**cell_overrides)
    workers = c["gpus"]
    ranks = [rank(i, 64, 2.0 / rate_scale) for i in range(workers)]
    measured = combine(ranks)
    return {"schema": 1, "kind": "measurement", "run_id": run_id, "cell_id": cell_id(c), "cell": c, "repeat": repeat,
            "status": "ok", "world_size": workers, "warmup_steps": c["warmup_steps"], "measured_steps": 4,
            "framework": c["framework"], **measured}
