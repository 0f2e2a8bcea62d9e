"""The what-if model (bench/analysis/whatif.py) held against the published 2018 study: the Batch AI charts' bars
read as validation rows, the host path's staging rate fitted on one series and the others held out, and every
published series predicted bar by bar (the report's study charts, `bench model --validate` and `--all-points`).
Pure: the caller reads the study through bench/facts/reference.py and hands its rows in.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Mapping

from bench.analysis import AnalysisError
from bench.analysis.whatif import DEFAULT_OVERLAP, GB, LINKS, Link, predict

# --- validation against the 2018 Batch AI charts -----------------------------------------------------------------

# What one reference row must carry (bench.facts.reference.validation_rows: the published columns, and the run's fabric
# and allreduce route from bench.facts.reference.RUNS, both None for the single-GPU bar without MPI).
REFERENCE_COLUMNS = ("model_arg", "status", "gpu_type", "mpi", "fabric", "route", "total_gpus", "images_per_sec_total")
PUBLISHED_FABRICS = ("ib", "tcp")  # the fabrics validated: each GPU's published run over each, in this order


def _published_bars(reference: Iterable[Mapping[str, Any]], model: str) -> tuple[dict[tuple, float], dict]:
    """The `final` bars of `model` ((gpu, fabric or None, workers) → images/sec) and the run over each fabric
    (fabric → (mpi, route))."""
    bars: dict[tuple, float] = {}
    runs: dict[str, tuple[str, str]] = {}
    for row in reference:
        missing = [c for c in REFERENCE_COLUMNS if c not in row]
        if missing:
            raise AnalysisError(f"reference row without {', '.join(missing)}")
        if row["model_arg"] == model and str(row["status"]).startswith("final"):
            fabric = row["fabric"] or None
            bars[(row["gpu_type"], fabric, int(row["total_gpus"]))] = float(row["images_per_sec_total"])
            if fabric is not None and runs.setdefault(fabric, (row["mpi"], row["route"])) != (row["mpi"], row["route"]):
                raise AnalysisError(f"the reference has two {model} runs over {fabric}: {runs[fabric][0]} and "
                                    f"{row['mpi']}")
    return bars, runs


def published_routes(reference: Iterable[Mapping[str, Any]], model: str = "resnet50") -> dict[str, str]:
    """The allreduce route of the published run over each fabric (fabric → route)."""
    return {fabric: route for fabric, (_, route) in _published_bars(reference, model)[1].items()}


def reference_efficiencies(reference: Iterable[Mapping[str, Any]], gpus: int = 32, model: str = "resnet50",
                           baseline: str = "single") -> dict[str, dict]:
    """Published E(gpus) per GPU type from the `final` chart rows of the reference (each row a mapping with
    REFERENCE_COLUMNS). baseline `single`: the single-GPU bar without MPI; `same-mpi`: the 1-GPU bar of the same
    MPI."""
    bars, runs = _published_bars(reference, model)
    out = {}
    for gpu in sorted({k[0] for k in bars}):
        single = bars.get((gpu, None, 1))
        if single is None:
            raise AnalysisError(f"the reference has no single-GPU {model} bar for {gpu}")
        entry = {"single_gpu": single, "batch": 64}
        for fabric in PUBLISHED_FABRICS:
            base = single if baseline == "single" else bars.get((gpu, fabric, 1))
            bar = bars.get((gpu, fabric, gpus))
            if base is None or bar is None:
                run = runs[fabric][0] if fabric in runs else fabric.upper()
                raise AnalysisError(f"the reference has no {run} {model} bars for {gpu} at 1 and {gpus} GPUs")
            entry[fabric] = bar / (gpus * base)
        out[gpu] = entry
    if not out:
        raise AnalysisError(f"the reference has no final {model} bars")
    return out


FIT_SERIES = (("V100", "ib"),)  # the series the host path's staging rate is fitted on; the others are held out

# Published series the model does not explain, with why: no mechanism with a source of its own brings them within
# ±10 points without fitting on the series itself, so they are shown with their miss and this reason beside the curve
# (the report's study chart and table, `bench model --validate`), never tuned away. Keyed by (catalogue GPU, fabric).
UNEXPLAINED: dict[tuple[str, str], str] = {
    ("K80", "tcp"): (
        "not explained by the model: the loss appears inside one VM, at 4 GPUs (74% of the 1-GPU rate per GPU, where "
        "3 GPUs reach 98% and Intel MPI's host path 99% on the same VM), so it is not the network; a cross-board hop "
        "through host memory (no peer-to-peer between the NC24r's two K80 boards) would already cost at 3 GPUs, and "
        "no published figure for NCCL 2.2 on Kepler says what does"),
}


def fit_vm_stage(reference: Iterable[Mapping[str, Any]], series: tuple[str, str] = FIT_SERIES[0], gpus: int = 32,
                 overlap: float = DEFAULT_OVERLAP, links: dict[str, Link] | None = None) -> float:
    """The VM-wide host staging rate (bytes/s) at which the model meets one published series' E(gpus) exactly
    (bisection: a slower path only lowers the prediction)."""
    rows = list(reference)
    gpu, fabric = series
    ref = reference_efficiencies(rows, gpus)[gpu]
    route = published_routes(rows)[fabric]
    links = dict(links or LINKS)

    def efficiency(beta: float) -> float:
        staged = {**links, "host-stage-vm": replace(links["host-stage-vm"], beta_Bps=beta)}
        return predict(gpu, gpus, ref["single_gpu"], ref["batch"], fabric=fabric, path=route, overlap=overlap,
                       links=staged).efficiency

    lo, hi = 0.05 * GB, 500 * GB
    if not efficiency(lo) <= ref[fabric] <= efficiency(hi):
        raise AnalysisError(f"no staging rate between {lo / GB:g} and {hi / GB:g} GB/s meets {gpu} {fabric}'s "
                            f"published {100 * ref[fabric]:.1f}%")
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if efficiency(mid) < ref[fabric] else (lo, mid)
    return (lo * hi) ** 0.5


def validate(reference: Iterable[Mapping[str, Any]], gpus: int = 32, overlap: float = DEFAULT_OVERLAP,
             links: dict[str, Link] | None = None, fit: bool = True) -> list[dict]:
    """Predicted vs published E(gpus) for every GPU × fabric of the reference rows, the 1-GPU figure being the
    single-GPU bar. `fit`: the host staging rate is refitted on FIT_SERIES first (those rows say `fitted`; the
    others are held out), else LINKS' value is used as it stands."""
    rows_in = list(reference)
    links = dict(links or LINKS)
    if fit:
        beta = fit_vm_stage(rows_in, gpus=gpus, overlap=overlap, links=links)
        links["host-stage-vm"] = replace(links["host-stage-vm"], beta_Bps=beta)
    rows = []
    routes = published_routes(rows_in)
    for gpu, ref in reference_efficiencies(rows_in, gpus).items():
        for fabric in PUBLISHED_FABRICS:
            route = routes[fabric]
            p = predict(gpu, gpus, ref["single_gpu"], ref["batch"], fabric=fabric, path=route, overlap=overlap,
                        links=links)
            rows.append({"gpu": gpu, "fabric": fabric, "path": route, "single_gpu": ref["single_gpu"],
                         "published": ref[fabric], "predicted": p.efficiency,
                         "error_points": 100 * (p.efficiency - ref[fabric]), "comm_s": p.comm_s,
                         "exposed_s": p.exposed_s, "compute_s": p.compute_s,
                         "fitted": fit and (gpu, fabric) in FIT_SERIES,
                         "unexplained": UNEXPLAINED.get((gpu, fabric)),
                         "stage_GBps": links["host-stage-vm"].beta_Bps / GB})
    return rows


def with_tcp(gbit_s: float) -> dict[str, Link]:
    """LINKS with the 2018 Azure TCP figure replaced (for sensitivity tables)."""
    return {**LINKS, "azure-tcp-2018": replace(LINKS["azure-tcp-2018"], beta_Bps=gbit_s / 8 * GB)}


# --- the published series, predicted bar by bar (the report's study charts, `bench model --all-points`) ------------

def predicted_series(published):
    """`predict` for every published bar (bench.facts.reference.published_series()'s frame: gpu, series, gpus, fabric,
    route, batch_per_gpu, samples_per_sec), from the series' own 1-GPU bar, on the series' fabric and allreduce route.
    Bars the model cannot place are left out. Columns: gpu, series, gpus, samples_per_sec, efficiency."""
    import pandas as pd

    rows = []
    for (gpu, series), s in published.groupby(["gpu", "series"], sort=True):
        first = s.sort_values("gpus").iloc[0]
        if first["gpus"] != 1:
            continue
        for r in s.itertuples():
            try:
                p = predict(gpu, int(r.gpus), float(first["samples_per_sec"]), int(r.batch_per_gpu), fabric=r.fabric,
                            path=r.route)
            except (AnalysisError, KeyError, ValueError):
                continue
            rows.append({"gpu": gpu, "series": series, "gpus": int(r.gpus), "samples_per_sec": p.samples_per_sec,
                         "efficiency": p.efficiency})
    return pd.DataFrame(rows, columns=["gpu", "series", "gpus", "samples_per_sec", "efficiency"])


def residuals(published):
    """Published bars with the model's efficiency beside them: the published columns plus predicted_efficiency and
    residual_points (predicted − published, in points), sorted by gpu, series, gpus."""
    pred = predicted_series(published)
    m = published.merge(pred[["gpu", "series", "gpus", "efficiency"]], on=["gpu", "series", "gpus"],
                        suffixes=("", "_predicted"))
    m = m.rename(columns={"efficiency_predicted": "predicted_efficiency"})
    m["residual_points"] = 100 * (m["predicted_efficiency"] - m["efficiency"])
    return m.sort_values(["gpu", "series", "gpus"]).reset_index(drop=True)
