"""A store that fills every report section: scaling on three GPUs, two frameworks and MPI flavours, IB on and off
(one transport mismatch), ImageNet beside its synthetic twin, fp32 and fp16, a failed cell, an imported published
reference, allreduce sweeps (collectives, and the fits the prediction uses), earlier runs of one cell (history) and
transformer cells (their own section). Records go through the real record model and store, as a worker's would."""
from __future__ import annotations

from pathlib import Path

from bench.planning.cell import cell_id
from bench.records.schema import parse_record
from bench.store import Store
from tests.factories import cell, record

TRAINING = [  # (cell overrides, window rate scales)
    (dict(gpu="cpu", mpi="gloo", gpus=1), [1.0, 1.1, 0.9]),
    (dict(gpu="cpu", mpi="gloo", gpus=2), [0.9, 0.95, 0.85]),
    (dict(gpu="cpu", mpi="openmpi", gpus=1), [1.2, 1.25, 1.15]),
    (dict(gpu="cpu", mpi="openmpi", gpus=2), [1.0, 1.05, 0.98]),
    (dict(gpu="cpu", mpi="openmpi", gpus=2, ib=True), [1.3, 1.35, 1.25]),
    (dict(gpu="cpu", mpi="openmpi", gpus=1, framework="tensorflow"), [0.8, 0.82, 0.79]),
    (dict(gpu="cpu", mpi="openmpi", gpus=2, framework="tensorflow"), [0.7, 0.72, 0.69]),
    (dict(gpu="cpu", mpi="openmpi", gpus=2, data="imagenet"), [0.5, 0.52, 0.49]),
    (dict(gpu="V100", mpi="openmpi", gpus=1), [3.2, 3.3, 3.1]),
    (dict(gpu="V100", mpi="openmpi", gpus=2), [3.0, 3.1, 2.9]),
    (dict(gpu="V100", mpi="openmpi", gpus=1, precision="fp16"), [6.0, 6.1, 5.9]),
    (dict(gpu="V100", mpi="openmpi", gpus=2, precision="fp16"), [5.5, 5.6, 5.4]),
    (dict(gpu="A100", mpi="openmpi", gpus=2), [7.0, 7.2, 6.9]),
]
# The transformer beside them (its own section, in tokens/s): the tiny decoder under DDP at 1 and 2 workers.
TRANSFORMER = [(dict(gpu="cpu", mpi="gloo", gpus=1, model="tiny", engine="native", seq_len=128), [1.0, 1.05, 0.97]),
               (dict(gpu="cpu", mpi="gloo", gpus=2, model="tiny", engine="native", seq_len=128), [1.6, 1.7, 1.65])]
MISMATCH = {"requested_transport": "ib", "effective_transport": "tcp", "transport_verdict": "mismatch"}
SWEEP_SIZES = [4096 * 4 ** k for k in range(7)]  # 4 KiB … 16 MiB


def sweep_record(run_id: str, repeat: int, alpha: float, beta: float, **overrides) -> dict:
    """An ok allreduce record of two ranks, times from time = α + bytes / β (2(n−1)/n = 1 at n = 2)."""
    c = cell(model="allreduce", max_message_bytes=SWEEP_SIZES[-1], gpus=2, **overrides)
    rows = []
    for b in SWEEP_SIZES:
        t = (alpha + b / beta) * (1 + 0.01 * repeat)
        rows.append({"op": "allreduce", "bytes": b, "iterations": 5, "time_median_s": t, "time_p10_s": t,
                     "time_p90_s": t, "time_min_s": t, "time_max_s": t, "algbw_bytes_per_s": b / t,
                     "busbw_bytes_per_s": b / t})
    return {"schema": 1, "kind": "measurement", "run_id": run_id, "cell_id": cell_id(c), "cell": c,
            "repeat": repeat, "status": "ok", "world_size": 2, "framework": c["framework"], "collective": rows}


def write_full_store(path: Path) -> None:
    with Store(path) as store:
        # Four earlier runs of the first cell: a history of five runs (the history section); r1 stays its latest.
        over, scales = TRAINING[0]
        for h in range(4):
            for i, s in enumerate(scales):
                data = record(run_id=f"h{h}", repeat=i, rate_scale=s, repeats=len(scales), **over)
                store.write(parse_record({**data, "start_unix": 100.0 + 10 * h + i, "end_unix": 101.0 + 10 * h + i}))
        for over, scales in TRAINING:
            extra = MISMATCH if over.get("ib") else {}
            store.write_many(parse_record({**record(run_id="r1", repeat=i, rate_scale=s, repeats=len(scales),
                                                    **over), **extra})
                             for i, s in enumerate(scales))
        for over, scales in TRANSFORMER:
            for i, s in enumerate(scales):
                data = record(run_id="r1", repeat=i, rate_scale=s, repeats=len(scales), **over)
                peak = {"kind": "rss", "bytes_per_rank": [400 << 20] * over["gpus"]}
                store.write(parse_record({**data, "sample_unit": "sequence", "tokens_per_sample": 128,
                                          "tokens_per_sec": data["samples_per_sec"] * 128, "peak_memory": peak}))
        store.write(parse_record({**record(run_id="r1", repeat=0, repeats=1, gpu="cpu", mpi="gloo", gpus=4),
                                  "status": "failed", "error": "exit code 1"}))
        ref = record(run_id="import:batchai:0123456789ab", repeat=0, rate_scale=50.0, gpu="cpu", mpi="gloo", gpus=2)
        store.write(parse_record({**ref, "cell_id": "refcell00001"}))
        for mpi, alpha, beta in (("gloo", 200e-6, 0.8e9), ("openmpi", 50e-6, 1.5e9)):
            store.write_many(parse_record(sweep_record("r1", i, alpha, beta, gpu="cpu", mpi=mpi)) for i in range(3))
