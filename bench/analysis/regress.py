"""Regression verdicts: baseline vs candidate throughput per cell, as pure functions on DataFrames (no I/O).

The unit of evidence is the job (a separate launch): each job's median over its measured windows is one
observation, because windows of one job share a process, a placement and a warm cache and are not independent. A
side whose cell ran only one job falls back to its windows, and the result says so (`basis`).

Per cell the verdict rests on two things, both required:
- an exact one-sided Mann–Whitney rank test (the permutation distribution of the candidate's rank sum, midranks
  for ties; exact up to 2 million arrangements, normal approximation beyond: `mann_whitney`), and
- a minimum effect: the ratio of medians (candidate / baseline; higher images/sec is better) must be at least
  `min_effect` away from 1.
`unchanged` needs the ratio's confidence interval to lie within 1 ± min_effect. That interval is the one that goes
with the rank test (Moses / Hodges–Lehmann: order statistics of the pairwise log-ratios, chosen from the exact null
distribution of U: `ratio_interval`), with its true coverage, which small samples cap (3 vs 3 jobs: 90%).
Both statistics live in bench/analysis/stats/ (ranks.py, intervals.py); this module decides what is an observation
and what is a verdict.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist

import numpy as np
import pandas as pd

from bench.analysis import AnalysisError
from bench.analysis.stats.intervals import median_ci
from bench.analysis.stats.ranks import mann_whitney, ratio_interval
from bench.cells.keys import CELL_KEYS
from bench.cells.selection import describe, matches

VERDICTS = ("regressed", "improved", "unchanged", "inconclusive", "insufficient-data", "incomparable")

# Precisions whose CPU speed turns on features one machine of a kind may have and another lack (AMX tiles, AVX-512
# BF16/FP16): the same bf16 cell ran 2.5x its fp32 peer on one machine and 0.92x on another with AVX-512 BF16 but
# no AMX. A CPU cell of these precisions measured with different features is `incomparable`, never regressed.
FEATURE_BOUND_PRECISIONS = ("bf16", "fp16")

OBSERVATION_COLUMNS = ["cell_id", *CELL_KEYS, "run_id", "obs", "basis", "samples_per_sec", "peak_samples_per_sec"]
RESULT_COLUMNS = ["cell_id", *CELL_KEYS, "basis", "n_baseline", "n_candidate", "baseline_median",
                  "baseline_ci_low", "baseline_ci_high", "candidate_median", "candidate_ci_low", "candidate_ci_high",
                  "ratio", "ci_low", "ci_high", "ci_coverage", "p_value", "verdict", "note"]


# Between runs. A cell measured by one job on each side gives windows, which share a process and a machine state:
# their spread is the noise within a run, not between two runs, and two runs of an unchanged cell differ by more
# (on this project's shared 2-core VM the A/B's paired runs of an unchanged CPU cell had a log-ratio sd of 0.090,
# docs/regression-checks.md, so one run's sd is 0.090 / √2 = 0.064; on an H200 two runs of a cell in fresh processes
# landed within 0.2%, docs/gpu-results.md, and 0.01 leaves room for GPUs that hold their clocks less well). That
# noise is added to the windows' own (RUN_NOISE, the log-scale sd of one run's median), so an unchanged re-run is
# not called regressed for being another run — the same noise model `bench ab` measures within its session.
RUN_NOISE = {"cpu": 0.064, "gpu": 0.01}


@dataclass(frozen=True)
class CheckSettings:
    min_effect: float = 0.05  # |ratio - 1| a change must reach to be called a regression or an improvement
    alpha: float = 0.05       # one-sided significance level of the rank test, per direction
    min_obs: int = 3          # fewer observations on either side: insufficient-data (3 vs 3 can reach p = 0.05)
    level: float = 0.95       # asked-for coverage of the ratio's interval (small samples get less; reported)

    def __post_init__(self):
        if not 0 < self.min_effect < 1:
            raise AnalysisError(f"--min-effect must be between 0 and 1 (a fraction), got {self.min_effect:g}")
        if not 0 < self.alpha < 0.5:
            raise AnalysisError(f"alpha must be between 0 and 0.5, got {self.alpha:g}")
        if self.min_obs < 2:
            raise AnalysisError(f"min_obs must be at least 2, got {self.min_obs}")


# --- observations ---------------------------------------------------------------------------------------------------

def observations(windows: pd.DataFrame) -> pd.DataFrame:
    """Window-level rows (one per measured repeat: cell_id, the cell keys, run_id, job, status, samples_per_sec) →
    one row per observation. A cell with two or more jobs (counted over all its runs) gives one observation per job,
    its median over the job's ok windows (`basis` = jobs); a cell with one job gives its windows (`basis` = windows).
    `peak_samples_per_sec` is the job's fastest window (what a reference cell contributes to normalisation)."""
    if windows.empty:
        return pd.DataFrame(columns=OBSERVATION_COLUMNS)
    ok = windows
    if "status" in ok:
        ok = ok[ok["status"] == "ok"]
    ok = ok[np.isfinite(ok["samples_per_sec"].astype(float)) & (ok["samples_per_sec"] > 0)]
    if ok.empty:
        return pd.DataFrame(columns=OBSERVATION_COLUMNS)
    jobs = ok.groupby(["cell_id", "run_id", "job"], sort=False, as_index=False).agg(
        samples_per_sec=("samples_per_sec", "median"), peak_samples_per_sec=("samples_per_sec", "max"))
    n_jobs = jobs.groupby("cell_id", sort=False)["job"].transform("size")
    by_job = jobs[n_jobs >= 2].rename(columns={"job": "obs"}).assign(basis="jobs")
    single = set(jobs.loc[n_jobs < 2, "cell_id"])
    by_window = ok[ok["cell_id"].isin(single)]
    by_window = by_window.assign(obs=by_window["repeat"] if "repeat" in by_window else range(len(by_window)),
                                 basis="windows", peak_samples_per_sec=by_window["samples_per_sec"])
    by_window = by_window[["cell_id", "run_id", "obs", "basis", "samples_per_sec", "peak_samples_per_sec"]]
    out = pd.concat([by_job, by_window], ignore_index=True)
    keys = ok.drop_duplicates("cell_id")[["cell_id", *CELL_KEYS]]
    out = out.merge(keys, on="cell_id", how="left")
    return out[OBSERVATION_COLUMNS].reset_index(drop=True)


# --- normalisation --------------------------------------------------------------------------------------------------

def normalize_ratio_to(obs: pd.DataFrame, selection: dict[str, list], side: str = "") -> pd.DataFrame:
    """Each observation divided by the reference cell's speed in the same run; the reference cell itself is dropped
    (it would only compare with itself). Machine speed and load common to a run cancel; what is left is each cell
    relative to the reference.

    The reference's speed is its fastest measured window in the run, not its median: the divisor is a gauge of the
    machine, and interference from other processes only ever slows a window down, so the least disturbed window
    is the steadiest reading of it. On a shared 2-core machine the reference's median moved by up to 3x between
    runs where its fastest window moved by under 10% (docs/regression-checks.md)."""
    if obs.empty:
        return obs
    ref_mask = matches(obs, selection)
    what = describe(selection)
    where = f" in the {side}" if side else ""
    ref_cells = obs.loc[ref_mask, "cell_id"].unique()
    if len(ref_cells) == 0:
        raise AnalysisError(f"normalise: no cell matches '{what}'{where}")
    if len(ref_cells) > 1:
        raise AnalysisError(f"normalise: '{what}' matches {len(ref_cells)} cells{where}; add keys so it names one")
    reference = obs[ref_mask].groupby("run_id")["peak_samples_per_sec"].max()
    rest = obs[~ref_mask]
    missing = set(rest["run_id"]) - set(reference.index)
    if missing:
        raise AnalysisError(f"normalise: run {sorted(missing)[0]} has no '{what}' cell to divide by{where}")
    out = rest.copy()
    divisor = reference.reindex(out["run_id"]).to_numpy()
    out["samples_per_sec"] = out["samples_per_sec"].to_numpy() / divisor
    out["peak_samples_per_sec"] = out["peak_samples_per_sec"].to_numpy() / divisor
    return out.reset_index(drop=True)


# --- the verdict ----------------------------------------------------------------------------------------------------

def verdict(n_baseline: int, n_candidate: int, ratio: float, ci_low: float, ci_high: float, p_slower: float,
            p_faster: float, settings: CheckSettings) -> str:
    if n_baseline < settings.min_obs or n_candidate < settings.min_obs:
        return "insufficient-data"
    if p_slower <= settings.alpha and ratio <= 1 - settings.min_effect:
        return "regressed"
    if p_faster <= settings.alpha and ratio >= 1 + settings.min_effect:
        return "improved"
    if ci_low >= 1 - settings.min_effect and ci_high <= 1 + settings.min_effect:
        return "unchanged"
    return "inconclusive"


# --- the comparison -------------------------------------------------------------------------------------------------

def _groups(obs: pd.DataFrame) -> dict[str, tuple[np.ndarray, str]]:
    """cell_id → (observations, basis), without a pandas object per cell (10,000 cells must take seconds)."""
    if obs.empty:
        return {}
    ordered = obs.sort_values("cell_id", kind="stable")
    ids = ordered["cell_id"].to_numpy()
    values = ordered["samples_per_sec"].to_numpy(dtype=float)
    basis = ordered["basis"].to_numpy()
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    ends = np.r_[starts[1:], len(ids)]
    return {ids[a]: (values[a:b], basis[a]) for a, b in zip(starts, ends)}


def between_runs(b: np.ndarray, c: np.ndarray, sigma: float, level: float) -> tuple[float, float, float, float,
                                                                                     float]:
    """One run a side, judged with the noise between runs: the log ratio of the medians against a normal whose
    variance is each side's windows' (sd² / n, the median's ≈ π/2 of the mean's) plus sigma² a side.
    (p slower, p faster, interval low, high, its level)."""
    lb, lc = np.log(b), np.log(c)
    d = float(np.median(lc) - np.median(lb))
    var = sum(math.pi / 2 * float(np.var(x, ddof=1)) / len(x) for x in (lb, lc)) + 2 * sigma ** 2
    se = math.sqrt(var)
    z = NormalDist()
    p_slower = z.cdf(d / se) if se > 0 else float(d >= 0)
    half = z.inv_cdf(0.5 + level / 2) * se
    return p_slower, 1 - p_slower, math.exp(d - half), math.exp(d + half), level


def compare(baseline: pd.DataFrame, candidate: pd.DataFrame, settings: CheckSettings = CheckSettings()
            ) -> pd.DataFrame:
    """Observation frames (see `observations`, optionally normalised) → one row per cell of either side: medians
    and their 95% intervals, the ratio and its interval, the one-sided p-value in the direction of the change, the
    verdict, and a note. Cells on one side only are insufficient-data, noted. No cell on both sides: an error."""
    base_groups, cand_groups = _groups(baseline), _groups(candidate)
    both = pd.concat([baseline, candidate], ignore_index=True)
    cell_gpu = dict(zip(both["cell_id"], both["gpu"])) if "gpu" in both else {}
    # The cells judged between runs share one false-alarm rate: alpha split among them (Bonferroni), so a check of an
    # unchanged matrix fails with probability at most alpha however many cells it holds.
    between = max(1, sum(1 for cid, (_, basis) in base_groups.items() if cid in cand_groups
                         and "windows" in (basis, cand_groups[cid][1])))
    if not any(c in cand_groups for c in base_groups):
        raise AnalysisError(f"no overlapping cells: the baseline has {len(base_groups)}, the candidate "
                              f"{len(cand_groups)}, none in common (same matrix? cell ids include every setting)")
    nan = float("nan")
    rows = []
    for cell_id in [*base_groups, *(c for c in cand_groups if c not in base_groups)]:
        b_side, c_side = base_groups.get(cell_id), cand_groups.get(cell_id)
        if b_side is None or c_side is None:
            present, other = ("baseline", "candidate") if c_side is None else ("candidate", "baseline")
            values, basis = b_side if c_side is None else c_side
            med = median_ci(values.tolist())
            row = {"cell_id": cell_id, "basis": basis, f"n_{present}": len(values), f"n_{other}": 0,
                   f"{present}_median": med.median, f"{present}_ci_low": med.low, f"{present}_ci_high": med.high,
                   f"{other}_median": nan, f"{other}_ci_low": nan, f"{other}_ci_high": nan, "ratio": nan,
                   "ci_low": nan, "ci_high": nan, "ci_coverage": nan, "p_value": nan, "verdict": "insufficient-data",
                   "note": f"not in the {other}"}
            rows.append(row)
            continue
        (b, b_basis), (c, c_basis) = b_side, c_side
        b_med, c_med = median_ci(b.tolist()), median_ci(c.tolist())
        notes = []
        if "windows" in (b_basis, c_basis):
            notes.append("one job: windows used as observations (not independent; weaker evidence)")
        ratio = c_med.median / b_med.median
        judged_between = "windows" in (b_basis, c_basis) and len(b) >= 2 and len(c) >= 2
        if judged_between:
            sigma = RUN_NOISE["cpu" if str(cell_gpu.get(cell_id, "cpu")) == "cpu" else "gpu"]
            p_slower, p_faster, low, high, coverage = between_runs(b, c, sigma, settings.level)
            notes.append(f"with {sigma:.3f} log-sd between runs on each side")
        elif len(b) >= 2 and len(c) >= 2:
            p_slower, p_faster = mann_whitney(b, c)
            low, high, coverage = ratio_interval(b, c, settings.level)
        else:
            p_slower = p_faster = 1.0
            low = high = coverage = nan
        v = verdict(len(b), len(c), ratio, low, high, p_slower, p_faster,
                    replace(settings, alpha=settings.alpha / between) if judged_between else settings)
        if v == "insufficient-data":
            notes.append(f"fewer than {settings.min_obs} observations on a side")
        rows.append({"cell_id": cell_id, "basis": b_basis if b_basis == c_basis else f"{b_basis}/{c_basis}",
                     "n_baseline": len(b), "n_candidate": len(c),
                     "baseline_median": b_med.median, "baseline_ci_low": b_med.low, "baseline_ci_high": b_med.high,
                     "candidate_median": c_med.median, "candidate_ci_low": c_med.low,
                     "candidate_ci_high": c_med.high, "ratio": ratio, "ci_low": low, "ci_high": high,
                     "ci_coverage": coverage, "p_value": p_slower if ratio < 1 else p_faster, "verdict": v,
                     "note": "; ".join(notes)})
    result = pd.DataFrame(rows)
    keys = pd.concat([baseline, candidate], ignore_index=True).drop_duplicates("cell_id")[["cell_id", *CELL_KEYS]]
    return result.merge(keys, on="cell_id", how="left")[RESULT_COLUMNS]


def _signatures(windows: pd.DataFrame) -> dict[str, set[str | None]]:
    """cell_id → the CPU feature signatures its ok windows were measured with (None: not recorded)."""
    if windows.empty or "cpu_features" not in windows:
        return {}
    ok = windows[windows["status"] == "ok"] if "status" in windows else windows
    return {cell: set(g.tolist()) for cell, g in ok.groupby("cell_id", sort=False)["cpu_features"]}


def _feature_note(base: set[str | None], cand: set[str | None]) -> str | None:
    from models.probes.cpufeatures import differences

    b, c = base - {None}, cand - {None}
    if not b or not c:
        side = "baseline" if not b else "candidate"
        return None if not b and not c else f"CPU features not recorded in the {side}"
    if b == c:
        return None
    diffs = list(dict.fromkeys(d for x in sorted(b) for y in sorted(c) for d in differences(x, y)))
    if not diffs:
        return "CPU features differ (machines mixed within a side)"
    return "CPU features differ: " + "; ".join(diffs)


def mark_cpu_differences(result: pd.DataFrame, baseline_windows: pd.DataFrame,
                         candidate_windows: pd.DataFrame) -> pd.DataFrame:
    """Notes cells whose baseline and candidate ran on CPUs with different speed-deciding features (window rows
    with `cpu_features`, see bench/checks/sides.py). A CPU cell (gpu 'cpu') of a FEATURE_BOUND_PRECISIONS precision
    with different features becomes `incomparable`: its ratio measures the machines, not the change. Other cells
    keep their verdict and carry the note (fp32 moves less with these features; a GPU cell's math runs on the GPU);
    a side without recorded features is noted for bf16/fp16 cells only."""
    base, cand = _signatures(baseline_windows), _signatures(candidate_windows)
    out = result.copy()
    if not base and not cand:
        return out
    notes, verdicts = out["note"].tolist(), out["verdict"].tolist()
    for i, (cell_id, precision, gpu, n_b, n_c) in enumerate(zip(out["cell_id"], out["precision"], out["gpu"],
                                                                  out["n_baseline"], out["n_candidate"])):
        if n_b == 0 or n_c == 0:
            continue  # a cell on one side only has nothing to compare
        note = _feature_note(base.get(cell_id, {None}), cand.get(cell_id, {None}))
        bound = precision in FEATURE_BOUND_PRECISIONS
        if note is None or (note.startswith("CPU features not recorded") and not bound):
            continue
        notes[i] = "; ".join(x for x in (notes[i], note) if x)
        if bound and gpu == "cpu" and note.startswith("CPU features differ"):
            verdicts[i] = "incomparable"
    out["note"], out["verdict"] = notes, verdicts
    return out


def summary_counts(result: pd.DataFrame) -> dict[str, int]:
    counts = result["verdict"].value_counts()
    return {v: int(counts.get(v, 0)) for v in VERDICTS}
