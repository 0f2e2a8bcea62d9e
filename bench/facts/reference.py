"""The published 2018 Azure Batch AI ResNet-50 scaling study, in one place: its files (bench/data/reference/, whose
README says where each came from), what they mean (RUNS: which MPI, which fabric, which allreduce route each
published run used) and reading them (`read`, and what is derived from it: `published_series` for the report's study
section and `bench model --all-points`, `validation_rows` for `bench model --validate`).

Everything else asks this module: `bench import` (adapter `batchai-svg`: the layout, HEADER, and what a published
`mpi` value becomes in a cell, RUNS), the what-if model's validation (bench/analysis/whatif.py: rows carrying each
run's fabric and route), the report's study section. The report reads these files directly and never writes them to
the store; `bench import` is what puts them in a store.

Published efficiency in `published_series` is E(N) = X(N) / (N · X(1)) with X(1) the 1-GPU bar of the same series
(same MPI and fabric) — the report's own definition for measured series (divide by the smallest run of the series),
so the published, predicted and measured curves on one chart are comparable.

A low-level module: the standard library, pandas and bench.core.errors only (no analysis, report, store or command
module).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.core.errors import BenchInputError

if TYPE_CHECKING:
    import pandas as pd

# --- the files ----------------------------------------------------------------------------------------------------

REFERENCE_DIR = Path(__file__).resolve().parents[1] / "data" / "reference"
TF_CNN_BENCHMARKS = "batchai_tf_cnn_benchmarks_synthetic_from_svg.csv"
PYTORCH = "batchai_pytorch_synthetic_from_svg.csv"
# file → the framework its series are shown under
REFERENCE_FILES = {TF_CNN_BENCHMARKS: "TensorFlow", PYTORCH: "PyTorch"}
# The file `bench model --validate` checks the what-if model against: the single-GPU bar and both MPI runs on four
# GPU types (the PyTorch charts are V100 over TCP only).
VALIDATION_FILE = TF_CNN_BENCHMARKS
# Both chart files (tf_cnn_benchmarks and PyTorch) share this layout; the `framework` column tells them apart.
HEADER = ["source_repo", "source_path", "svg_blob", "first_commit", "commit_date", "status", "svg_title",
          "framework", "software", "gpu_type", "vm_size", "model_dir", "model_arg", "mpi", "x_axis_label",
          "interconnect", "total_gpus", "nodes", "gpus_per_node", "batch_size_per_gpu", "data",
          "images_per_sec_total", "images_per_sec_min", "images_per_sec_max", "images_per_sec_per_gpu"]
MODEL = "resnet50"  # the model of the study's series
PUBLISHED = "published (Batch AI 2018), not measured here"

# --- their meaning ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """What one value of the files' `mpi` column stands for."""
    shown: str  # in series names
    mpi: str  # bench's MPI flavour name (an imported cell's `mpi`)
    engine: str  # an imported cell's `engine`
    fabric: str | None  # "ib" or "tcp" (an imported cell's requested transport); None: one process, no fabric
    route: str | None  # the what-if model's allreduce path (bench/analysis/whatif.py's allreduce_s); None: no MPI

    @property
    def ib(self) -> bool:
        return self.fabric == "ib"


# The one table of the published runs (the reference README's `mpi` and `interconnect` columns); the importer's cells,
# the model's validation rows and the report's series all derive from it.
RUNS: dict[str, Run] = {
    # Intel MPI 2017 reached InfiniBand through DAPL, with Horovod built without NCCL: MPI's allreduce on host memory
    # (the model's `host` path).
    "IntelMPI": Run("Intel MPI", "intelmpi", "horovod", "ib", "host"),
    # Open MPI 3.0 + NCCL 2.2 ran over TCP with InfiniBand switched off (NCCL_IB_DISABLE=1, btl ^openib); NCCL 2.2
    # built one flat ring over all GPUs (the model's `nccl-ring`; trees and node-aware rings came with 2.4).
    "OpenMPI+NCCL": Run("Open MPI + NCCL", "openmpi", "horovod", "tcp", "nccl-ring"),
    # The single-GPU bar without MPI: the validation's baseline, no series of its own.
    "none (local)": Run("no MPI", "none", "none", None, None),
}
MPI_RUNS = {name: run for name, run in RUNS.items() if run.fabric}  # the runs that make series


def series_name(framework: str, run: Run) -> str:
    """A published series as the report and `bench model --all-points` name it: framework · MPI · fabric."""
    return f"{framework} · {run.shown} · {'IB' if run.fabric == 'ib' else 'TCP'}"


# --- reading them -------------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _read(path: Path) -> pd.DataFrame:
    import pandas as pd

    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
    except OSError as e:
        raise BenchInputError(f"cannot read the reference: {e.strerror or e}", str(path)) from None
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise BenchInputError(f"not a readable CSV: {e}", str(path)) from None
    if set(raw.columns) != set(HEADER):
        raise BenchInputError("not the Batch AI chart layout (bench.facts.reference.HEADER)", str(path))
    unknown = sorted(set(raw["mpi"]) - set(RUNS))
    if unknown:
        raise BenchInputError(f"mpi {unknown[0]!r} is not one of {', '.join(RUNS)}", str(path))
    return raw


def read(name: str) -> pd.DataFrame:
    """One reference file (a key of REFERENCE_FILES) as published: every row, every cell as its text. The one reader
    of these files; BenchInputError (one line) when it is missing, not CSV, or not the layout RUNS describes."""
    return _read(REFERENCE_DIR / name).copy()


@lru_cache(maxsize=1)
def published_series() -> pd.DataFrame:
    """One row per published bar of the `final` ResNet-50 charts with an MPI run (the single-process bar is left
    out: it is no series): gpu, framework, mpi, fabric, route, gpus, samples_per_sec, batch_per_gpu, source, series,
    efficiency (against the series' own 1-GPU bar)."""
    import pandas as pd

    frames = []
    for name, framework in REFERENCE_FILES.items():
        raw = read(name)
        raw = raw[raw["status"].str.startswith("final") & (raw["model_arg"] == MODEL) & raw["mpi"].isin(MPI_RUNS)]
        runs = raw["mpi"].map(MPI_RUNS)
        frames.append(pd.DataFrame({
            "gpu": raw["gpu_type"], "framework": framework, "mpi": runs.map(lambda r: r.shown),
            "fabric": runs.map(lambda r: r.fabric), "route": runs.map(lambda r: r.route),
            "gpus": raw["total_gpus"].astype(int), "samples_per_sec": raw["images_per_sec_total"].astype(float),
            "batch_per_gpu": raw["batch_size_per_gpu"].astype(int),
            "source": raw["source_repo"] + "/" + raw["source_path"],
            "series": pd.Series([series_name(framework, r) for r in runs], index=raw.index),
        }))
    out = pd.concat(frames, ignore_index=True).sort_values(["gpu", "framework", "fabric", "gpus"])
    one = out[out["gpus"] == 1].set_index(["gpu", "series"])["samples_per_sec"]
    base = [one.get((r.gpu, r.series), float("nan")) for r in out.itertuples()]
    out["efficiency"] = out["samples_per_sec"] / (out["gpus"] * pd.Series(base, index=out.index))
    return out.reset_index(drop=True)


def validation_rows(name: str = VALIDATION_FILE) -> list[dict[str, Any]]:
    """The rows the what-if model is validated on (bench.analysis.whatif.validate): every row of the file, its
    columns as published (text), plus the run's `fabric` and `route` from RUNS (None for the bar without MPI)."""
    raw = read(name)
    return [{**row, "fabric": RUNS[row["mpi"]].fabric, "route": RUNS[row["mpi"]].route}
            for row in raw.to_dict("records")]
