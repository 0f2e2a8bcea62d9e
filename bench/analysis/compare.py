"""Comparisons along one axis of the matrix, as pure functions on cell summaries (no I/O).

A comparison only ever divides two cells that agree on every other setting (a *matched pair*): comparing Open MPI
with Intel MPI means the same GPU, framework, fabric, worker count and workload. Higher images/sec is better, so a
ratio above 1 means `a` is faster than `b`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from bench.analysis import AnalysisError
from bench.analysis.stats.intervals import ratio_ci_many
from bench.cells.keys import CELL_KEYS


def match_keys(summary: pd.DataFrame, axis: str) -> list[str]:
    if axis not in CELL_KEYS:
        raise AnalysisError(f"unknown axis '{axis}' (known: {', '.join(CELL_KEYS)})")
    return [k for k in CELL_KEYS if k != axis and k in summary]


_UNSET = "∅"  # stands for a missing setting (threads: null) so that two unset values match


def _keyed(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """A copy whose key columns have no NaN (merge and groupby then match unset with unset)."""
    out = frame.copy()
    for k in keys:
        if out[k].isna().any():
            out[k] = out[k].astype(object).where(out[k].notna(), _UNSET)
        elif str(out[k].dtype) == "boolean":
            out[k] = out[k].astype(bool)
    return out


def _restore(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    for k in keys:
        if frame[k].dtype == object and (frame[k] == _UNSET).any():
            frame[k] = frame[k].where(frame[k] != _UNSET, None)
    return frame


def compare(summary: pd.DataFrame, axis: str, a, b) -> pd.DataFrame:
    """One row per matched cell pair (axis = a vs axis = b, every other cell setting equal): both medians,
    ratio = X(a) / X(b) with a bootstrap 95% interval, and `verdict`: 'a faster', 'b faster' or 'no clear
    difference' (the interval contains 1)."""
    keys = match_keys(summary, axis)
    out_cols = [*keys, "cell_id_a", "cell_id_b", "samples_per_sec_a", "samples_per_sec_b", "ratio", "ratio_low",
                "ratio_high", "verdict"]
    side_a = summary[summary[axis] == a]
    side_b = summary[summary[axis] == b]
    if side_a.empty or side_b.empty:
        return pd.DataFrame(columns=out_cols)
    cols = ["cell_id", "samples_per_sec", *(["ci_values"] if "ci_values" in summary else [])]
    left = _keyed(side_a[[*keys, *cols]], keys)
    right = _keyed(side_b[[*keys, *cols]], keys)
    pairs = left.merge(right, on=keys, suffixes=("_a", "_b"))
    if pairs.empty:
        return pd.DataFrame(columns=out_cols)
    pairs = _restore(pairs, keys)
    va = list(pairs["ci_values_a"]) if "ci_values_a" in pairs else [(x,) for x in pairs["samples_per_sec_a"]]
    vb = list(pairs["ci_values_b"]) if "ci_values_b" in pairs else [(x,) for x in pairs["samples_per_sec_b"]]
    va = [v if isinstance(v, (tuple, list)) and len(v) else (x,) for v, x in zip(va, pairs["samples_per_sec_a"])]
    vb = [v if isinstance(v, (tuple, list)) and len(v) else (x,) for v, x in zip(vb, pairs["samples_per_sec_b"])]
    ci = ratio_ci_many(va, vb)
    pairs["ratio"] = pairs["samples_per_sec_a"] / pairs["samples_per_sec_b"]
    # The interval always contains the point estimate (a percentile bootstrap of 2 values can miss it).
    pairs["ratio_low"] = np.minimum(ci[:, 0], pairs["ratio"])
    pairs["ratio_high"] = np.maximum(ci[:, 1], pairs["ratio"])
    pairs["verdict"] = np.where(pairs["ratio_low"] > 1, "a faster",
                                np.where(pairs["ratio_high"] < 1, "b faster", "no clear difference"))
    return pairs[out_cols].reset_index(drop=True)


def compare_all(summary: pd.DataFrame, axis: str, baseline=None) -> pd.DataFrame:
    """Every other value of `axis` against one baseline value (given, else the most common one): compare() rows
    with columns `value` and `baseline` added."""
    if axis not in summary or summary.empty:
        return pd.DataFrame()
    values = summary[axis].value_counts()
    if len(values) < 2:
        return pd.DataFrame()
    if baseline is None or baseline not in values.index:
        baseline = values.index[0]
    parts = []
    for value in sorted((v for v in values.index if v != baseline), key=str):
        c = compare(summary, axis, value, baseline)
        if not c.empty:
            parts.append(c.assign(value=value, baseline=baseline))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def at_fixed_scale(summary: pd.DataFrame, axis: str = "gpu", gpus: int | None = None) -> tuple[pd.DataFrame, dict]:
    """Cells that differ only in `axis`, at one worker count: the setting (every other key) shared by the most
    values of `axis` wins. Returns (rows, setting), rows sorted by images/sec, best first; `gpus` defaults to the
    worker count where that coverage is widest (ties: the larger count)."""
    if summary.empty or summary[axis].nunique() < 2:
        return summary.iloc[0:0], {}
    keys = [k for k in CELL_KEYS if k not in (axis,) and k in summary]
    frame = summary if gpus is None else summary[summary["gpus"] == gpus]
    if frame.empty:
        return summary.iloc[0:0], {}
    k = frame[keys].astype(object).where(frame[keys].notna(), "∅")
    tagged = frame.assign(_k=[tuple(r) for r in k.itertuples(index=False)])
    coverage = tagged.groupby("_k", sort=False)[axis].nunique()
    best_cov = coverage.max()
    if best_cov < 2:
        return summary.iloc[0:0], {}
    gi = keys.index("gpus")
    best = max((key for key, c in coverage.items() if c == best_cov), key=lambda key: (key[gi], str(key)))
    rows = tagged[tagged["_k"].map(lambda key: key == best)].drop(columns="_k")
    setting = {key_name: (None if v == "∅" else v) for key_name, v in zip(keys, best)}
    return rows.sort_values("samples_per_sec", ascending=False, kind="stable").reset_index(drop=True), setting


MIXED = ("fp16", "bf16")


def precision_table(scaled: pd.DataFrame) -> pd.DataFrame:
    """DeepLearningExamples-style: one row per setting other than precision, with images/sec per precision, the
    mixed-precision speedup over fp32 (same cell otherwise) and each precision's scaling speedup and efficiency
    (from scaling(): divided by the smallest worker count of its series)."""
    keys = [k for k in CELL_KEYS if k != "precision" and k in scaled]
    if scaled.empty:
        return pd.DataFrame(columns=keys)
    present = [p for p in ("fp32", *MIXED) if (scaled["precision"] == p).any()]
    keyed = _keyed(scaled, keys)
    out = None
    for p in present:
        metrics = {"samples_per_sec": f"samples_per_sec_{p}", "speedup": f"speedup_{p}",
                   "efficiency": f"efficiency_{p}", "baseline_gpus": f"baseline_gpus_{p}"}
        have = [m for m in metrics if m in keyed]
        part = keyed.loc[keyed["precision"] == p, [*keys, *have]].rename(columns=metrics)
        part = part.drop_duplicates(keys)
        out = part if out is None else out.merge(part, on=keys, how="outer")
    for p in present:
        for m in ("speedup", "efficiency", "baseline_gpus"):
            if f"{m}_{p}" not in out:
                out[f"{m}_{p}"] = np.nan
    for p in MIXED:
        if p in present and "fp32" in present:
            out[f"{p}_over_fp32"] = out[f"samples_per_sec_{p}"] / out["samples_per_sec_fp32"]
    out = _restore(out, keys)
    return out.sort_values([c for c in ("gpu", "framework", "mpi", "ib", "batch_per_gpu", "gpus") if c in out],
                           kind="stable").reset_index(drop=True)
