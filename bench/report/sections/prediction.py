"""Predicted vs measured efficiency: the what-if model (bench.analysis.whatif.predict_table, with the allreduce fits
of this store's sweeps) against each scaled cell. A model that is missing or fails leaves the section out or says
why; it never breaks the report."""
from __future__ import annotations

import importlib

import pandas as pd

from bench.analysis.collectives import fit_stacks
from bench.cells.label import cell_label
from bench.launch import LAUNCHERS
from bench.report import charts as ch
from bench.report.sections.blocks import Chart, Section, omitted, table
from bench.report.sections.context import Context

TITLE = "Predicted vs measured efficiency"


def host_path_mpis() -> frozenset[str]:
    """The MPI flavours that reach InfiniBand without SR-IOV (Intel MPI, through DAPL): on such a SKU the what-if model
    routes their allreduce through host memory, as in 2018 (predict_table's `host_path_mpis`)."""
    return frozenset(name for name, flavour in LAUNCHERS.items() if flavour.ib_without_sriov)


def _predictions(table_: pd.DataFrame, fits) -> pd.DataFrame | Section | None:
    """predict_table's frame, an omitted section saying what went wrong, or None without a model."""
    try:
        model = importlib.import_module("bench.analysis.whatif")
    except ImportError:
        return None
    # predict_table(scaled) gives per-cell predictions (predict() itself answers one SKU/worker count at a time).
    predict = getattr(model, "predict_table", None)
    if not callable(predict):
        return None
    try:
        pred = predict(table_, fits or None, host_path_mpis=host_path_mpis())
    except Exception as e:  # a model still being written must not break the report
        return omitted("prediction", TITLE, f"the what-if model failed ({type(e).__name__}: {str(e)[:120]}).")
    if not isinstance(pred, pd.DataFrame) or "cell_id" not in pred:
        return omitted("prediction", TITLE, "the what-if model returned no per-cell predictions.")
    return pred


def _why_none(t: pd.DataFrame, fits) -> str:
    unusable = sorted({f"{'/'.join(str(k) for k in stack)}: {fit.reason}" for stack, fit in (fits or {}).items()
                       if not fit.usable})
    if unusable:
        return (" CPU cells are predicted from a usable measured allreduce fit only, and this store's are unusable ("
                + "; ".join(unusable) + ").")
    if not fits and (t["gpu"] == "cpu").any():
        return (" CPU cells are predicted from a measured allreduce sweep of their own stack only, and this store has"
                " none (add `model: allreduce` cells: docs/collectives.md).")
    return ""


def build(ctx: Context) -> Section | None:
    t = ctx.table
    if t.empty:
        return None
    fits = fit_stacks(ctx.sweeps.to_dict("records"))
    pred = _predictions(t, fits)
    if not isinstance(pred, pd.DataFrame):
        return pred
    col = next((c for c in ("predicted_efficiency", "efficiency") if c in pred), None)
    if col is None:
        return omitted("prediction", TITLE, "the what-if model gives no efficiency.")
    links = pred["predicted_links"] if "predicted_links" in pred else pd.Series("data sheet", index=pred.index)
    merged = t.merge(pred[["cell_id", col]].rename(columns={col: "predicted_efficiency"})
                     .assign(links=links.fillna("data sheet")), on="cell_id")
    merged = merged[merged["predicted_efficiency"].notna() & (merged["series_cells"] > 1)]
    if merged.empty:
        return omitted("prediction", TITLE, f"no prediction for a scaled cell.{_why_none(t, fits)}")
    chart = ch.prediction_chart(merged, ctx.out_dir / "prediction.png")
    rows = [{"cell": cell_label(r), "efficiency": f"{100 * r['efficiency']:.0f}%",
             "predicted": f"{100 * r['predicted_efficiency']:.0f}%",
             "difference": f"{100 * (r['predicted_efficiency'] - r['efficiency']):+.0f} pts", "links": r["links"],
             "cell_id": r["cell_id"], "_bad": False} for _, r in merged.iterrows()]
    return Section("prediction", TITLE, "Predicted by bench.analysis.whatif (α-β what-if model).",
                   charts=(Chart(TITLE, chart),),
                   tables=(table("prediction-table", ["cell", "efficiency", "predicted", "difference", "links",
                                                      "cell_id"], rows),),
                   files=(chart,))
