"""Synthetic vs real data: each ImageNet cell as a fraction of its synthetic twin; below INPUT_BOUND_BELOW it is
waiting for data, not computing."""
from __future__ import annotations

from bench.analysis.scaling import INPUT_BOUND_BELOW
from bench.cells.label import cell_label
from bench.report import charts as ch
from bench.report.sections.blocks import MAX_ROWS, Chart, Section, omitted, table
from bench.report.sections.context import Context

TITLE = "Synthetic vs real data"


def build(ctx: Context) -> Section | None:
    t = ctx.table
    if t.empty:
        return None
    real = t[t["real_vs_synthetic"].notna()] if "real_vs_synthetic" in t else t.iloc[0:0]
    n_real = len(real)
    n_bound = int((real["real_vs_synthetic"] < INPUT_BOUND_BELOW).sum()) if n_real else 0
    if real.empty:
        why = "no real-data cells" if not (t["data"] == "imagenet").any() else "no real-data cell has a synthetic twin"
        return omitted("data", TITLE, f"{why}.")
    real = real.sort_values("real_vs_synthetic", kind="stable").head(MAX_ROWS)
    real = real.assign(label=[cell_label(r) for _, r in real.iterrows()])
    chart = ch.real_vs_synthetic_chart(real, INPUT_BOUND_BELOW, ctx.out_dir / "real_vs_synthetic.png")
    rows = [{"cell": r["label"] + f" ({r['data_layout']})", "images/sec (real)": f"{r['samples_per_sec']:,.1f}",
             "images/sec (synthetic)": f"{r['synthetic_samples_per_sec']:,.1f}",
             "real / synthetic": f"{100 * r['real_vs_synthetic']:.0f}%",
             "verdict": "INPUT-BOUND" if r["real_vs_synthetic"] < INPUT_BOUND_BELOW else "ok",
             "cell_id": r["cell_id"], "_bad": bool(r["real_vs_synthetic"] < INPUT_BOUND_BELOW)}
            for _, r in real.iterrows()]
    return Section("data", TITLE,
                   f"{n_bound} of {n_real} real-data cell(s) are input-bound (below {100 * INPUT_BOUND_BELOW:.0f}% "
                   "of the synthetic twin: waiting for data, not computing).",
                   charts=(Chart("real vs synthetic", chart),),
                   tables=(table("data-table", ["cell", "images/sec (real)", "images/sec (synthetic)",
                                                "real / synthetic", "verdict", "cell_id"], rows, total=n_real),),
                   files=(chart,))
