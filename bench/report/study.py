"""The study the project comes from: the published 2018 Batch AI ResNet-50 scaling curves (data in
bench/data/reference/, read directly, never imported into the store), with the what-if model's prediction for each
published series. Measured cells of the same GPU are added by the report, from the store.

Published efficiency here is E(N) = X(N) / (N · X(1)) with X(1) the 1-GPU bar of the same series (same MPI and
fabric) — the report's own definition for measured series (divide by the smallest run of the series), so the
published, predicted and measured curves on one chart are comparable. The prediction starts from that same X(1).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pandas as pd

REFERENCE_DIR = Path(__file__).resolve().parent.parent / "data" / "reference"
# file → (framework shown, the repository page its bars were read from)
REFERENCE_FILES = {
    "batchai_tf_cnn_benchmarks_synthetic_from_svg.csv": "TensorFlow",
    "batchai_pytorch_synthetic_from_svg.csv": "PyTorch",
}
MODEL = "resnet50"
# The published runs: Intel MPI reached InfiniBand through DAPL with Horovod built without NCCL (host-memory
# allreduce); Open MPI + NCCL ran over TCP with IB switched off (the reference README's columns `mpi`, `interconnect`),
# NCCL 2.2's one flat ring over all GPUs (bench/analysis/model.py's `nccl-ring`).
RUNS = {"IntelMPI": ("Intel MPI", "ib", "host"), "OpenMPI+NCCL": ("Open MPI + NCCL", "tcp", "nccl-ring")}
PUBLISHED = "published (Batch AI 2018), not measured here"


@lru_cache(maxsize=1)
def published_series() -> pd.DataFrame:
    """One row per published bar of the `final` ResNet-50 charts with an MPI run (the single-process bar is left
    out: it is no series): gpu, framework, mpi, fabric, route, gpus, images_per_sec, efficiency, series, source."""
    frames = []
    for name, framework in REFERENCE_FILES.items():
        raw = pd.read_csv(REFERENCE_DIR / name, dtype={"status": str, "mpi": str, "model_arg": str})
        raw = raw[raw["status"].str.startswith("final") & (raw["model_arg"] == MODEL) & raw["mpi"].isin(RUNS)]
        frames.append(pd.DataFrame({
            "gpu": raw["gpu_type"], "framework": framework, "mpi": raw["mpi"].map(lambda m: RUNS[m][0]),
            "fabric": raw["mpi"].map(lambda m: RUNS[m][1]), "route": raw["mpi"].map(lambda m: RUNS[m][2]),
            "gpus": raw["total_gpus"].astype(int), "images_per_sec": raw["images_per_sec_total"].astype(float),
            "batch_per_gpu": raw["batch_size_per_gpu"].astype(int),
            "source": raw["source_repo"] + "/" + raw["source_path"],
        }))
    out = pd.concat(frames, ignore_index=True).sort_values(["gpu", "framework", "fabric", "gpus"])
    out["series"] = [f"{r.framework} · {r.mpi} · {'IB' if r.fabric == 'ib' else 'TCP'}" for r in out.itertuples()]
    one = out[out["gpus"] == 1].set_index(["gpu", "series"])["images_per_sec"]
    base = [one.get((r.gpu, r.series), float("nan")) for r in out.itertuples()]
    out["efficiency"] = out["images_per_sec"] / (out["gpus"] * pd.Series(base, index=out.index))
    return out.reset_index(drop=True)


def predicted_series(published: pd.DataFrame) -> pd.DataFrame:
    """The what-if model (bench.analysis.model.predict, as `bench model` uses it) for every published bar, from
    the series' own 1-GPU bar, on the series' fabric and allreduce route. Bars the model cannot place are left out."""
    from bench.analysis import AnalysisError
    from bench.analysis.model import predict

    rows = []
    for (gpu, series), s in published.groupby(["gpu", "series"], sort=True):
        first = s.sort_values("gpus").iloc[0]
        if first["gpus"] != 1:
            continue
        for r in s.itertuples():
            try:
                p = predict(gpu, int(r.gpus), float(first["images_per_sec"]), int(r.batch_per_gpu), fabric=r.fabric,
                            path=r.route)
            except (AnalysisError, KeyError, ValueError):
                continue
            rows.append({"gpu": gpu, "series": series, "gpus": int(r.gpus), "images_per_sec": p.images_per_sec,
                         "efficiency": p.efficiency})
    return pd.DataFrame(rows, columns=["gpu", "series", "gpus", "images_per_sec", "efficiency"])


def residuals(published: pd.DataFrame) -> pd.DataFrame:
    """Published bars with the model's efficiency beside them: gpu, series, gpus, efficiency, predicted_efficiency,
    residual_points (predicted − published, in points)."""
    pred = predicted_series(published)
    m = published.merge(pred[["gpu", "series", "gpus", "efficiency"]], on=["gpu", "series", "gpus"],
                         suffixes=("", "_predicted"))
    m = m.rename(columns={"efficiency_predicted": "predicted_efficiency"})
    m["residual_points"] = 100 * (m["predicted_efficiency"] - m["efficiency"])
    return m.sort_values(["gpu", "series", "gpus"]).reset_index(drop=True)
