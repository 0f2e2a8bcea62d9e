"""GPU comparison at a fixed scale: the GPU types at the one setting (workers and workload) most of them share."""
from __future__ import annotations

from bench.analysis.compare import at_fixed_scale
from bench.report import charts as ch
from bench.report.format import GPU_FIGURES, ci, gpu_figures, settings_label
from bench.report.sections.blocks import Chart, Section, omitted, table
from bench.report.sections.context import Context

TITLE = "GPU comparison at a fixed scale"


def build(ctx: Context) -> Section | None:
    from bench.facts.catalog import catalog

    if ctx.table.empty:
        return None
    rows, setting = at_fixed_scale(ctx.table, "gpu")
    if rows.empty:
        return omitted("gpus", TITLE, "fewer than two GPU types measured with otherwise equal settings.")
    n = int(setting["gpus"])
    label = f"{n} workers, " + settings_label({**setting, "gpu": "", "gpus": n}, drop=("gpu", "gpus"))
    shown = rows.assign(label=[f"{r.gpu} ({int(r.nodes)} VM{'s' if r.nodes > 1 else ''})"
                               for r in rows.itertuples()])
    chart = ch.bar_chart(shown, "label", f"ResNet-50 images/sec by GPU at {n} workers", ctx.out_dir / "gpus.png")
    vm = {k: s.vm_size for k, s in catalog().items()}
    trows = [{"gpu": r.gpu, "vm": vm.get(r.gpu, "?"), "nodes": int(r.nodes), "images/sec": f"{r.samples_per_sec:,.1f}",
              "95% CI": ci(r), "per worker": f"{r.samples_per_sec_per_gpu:,.1f}",
              "efficiency": "—" if r.series_cells == 1 and r.gpus > 1 else f"{100 * r.efficiency:.0f}%",
              "vs fastest": f"{r.samples_per_sec / rows['samples_per_sec'].iloc[0]:.2f}×", **gpu_figures(r),
              "cell_id": r.cell_id, "_bad": False} for r in rows.itertuples()]
    return Section("gpus", TITLE, f"Same settings for every GPU: {label} (the setting shared by the most GPU types). "
                   "Bars: bootstrap 95% CI over job-level repeats. MFU: model FLOPs per second per GPU ÷ the data "
                   "sheet's dense peak for the precision (the MFU section); W/GPU and J/img: what the workers "
                   "sampled.",
                   charts=(Chart(f"images/sec by GPU at {n} workers", chart),),
                   tables=(table("gpus-table", ["gpu", "vm", "nodes", "images/sec", "95% CI", "per worker",
                                                "efficiency", "vs fastest", *GPU_FIGURES, "cell_id"], trows),),
                   files=(chart,))
