"""The 2018 Batch AI study: the published curves per GPU series (bench/facts/reference.py reads them from
bench/data/reference/, never from the store), the what-if model (bench/analysis/whatif.py) dashed over them, and this
store's measured cells of the same GPU on the same axes."""
from __future__ import annotations

import pandas as pd

from bench.analysis.scaling import SERIES_KEYS, series_label, varying_workload_keys
from bench.analysis.study_validation import UNEXPLAINED, predicted_series, residuals
from bench.core.errors import BenchInputError
from bench.facts.reference import PUBLISHED, published_series
from bench.report import charts as ch
from bench.report.format import num
from bench.report.sections.blocks import Chart, Section, omitted, table
from bench.report.sections.context import Context

STUDY_MEASURED_SERIES = 6  # measured series drawn per study chart
TITLE = "The 2018 Batch AI study: published scaling, the what-if model, measured here"

# Written beside a series' model curve when the model does not explain it (the section note says why).
CHART_NOTE = "what-if model: this miss is not explained\n(why: in the note under the charts)"


def build(ctx: Context) -> Section | None:
    from bench.facts.catalog import catalog

    if ctx.records.empty:
        return None
    try:
        published = published_series()
    except (BenchInputError, OSError, KeyError, ValueError) as e:
        return omitted("study", TITLE, f"the published reference could not be read ({type(e).__name__}: "
                       f"{str(e)[:120]}).")
    predicted = predicted_series(published)
    res = residuals(published).set_index(["gpu", "series", "gpus"])["residual_points"]
    predicted = predicted.assign(residual_points=[res.get((r.gpu, r.series, r.gpus)) for r in predicted.itertuples()])
    # Series the model does not explain (study_validation.UNEXPLAINED): gpu → series → why, beside the curve and in the
    # table.
    unexplained: dict[str, dict[str, str]] = {}
    for r in published.drop_duplicates(["gpu", "series"]).itertuples():
        if (r.gpu, r.fabric) in UNEXPLAINED:
            unexplained.setdefault(r.gpu, {})[r.series] = UNEXPLAINED[(r.gpu, r.fabric)]
    order = {k: i for i, k in enumerate(catalog())}
    gpus = sorted(published["gpu"].unique(), key=lambda g: (order.get(g, len(order)), g))
    t = ctx.table
    varying = varying_workload_keys(t) if not t.empty else []
    measured_here, more, jobs, titles = 0, 0, [], []
    for gpu in gpus:
        mine = t[t["gpu"] == gpu] if not t.empty else t
        if not mine.empty:
            measured_here += len(mine)
            # The longest, then fastest, measured series: a legend of hundreds is unreadable (all are in Scaling).
            groups = sorted(mine.groupby(SERIES_KEYS, dropna=False, sort=False),
                            key=lambda kv: (-len(kv[1]), -kv[1]["samples_per_sec"].max()))
            more += max(0, len(groups) - STUDY_MEASURED_SERIES)
            mine = pd.concat([g.assign(label=series_label(g.iloc[0], varying).removeprefix(f"{gpu} · "))
                              for _, g in groups[:STUDY_MEASURED_SERIES]])
        jobs.append((gpu, published[published["gpu"] == gpu], predicted[predicted["gpu"] == gpu], mine,
                     ctx.out_dir / f"study_{ch.slug(gpu)}.png", PUBLISHED,
                     {series: CHART_NOTE for series in unexplained.get(gpu, {})}))
        titles.append(f"{gpu}: {PUBLISHED} (dotted), what-if model (dashed)"
                      + (", measured here (solid)" if not mine.empty else ""))
    paths = ch.study_figures(jobs)
    pred = predicted.set_index(["gpu", "series", "gpus"])["efficiency"]
    rows = [{"gpu": r.gpu, "series": r.series, "workers": int(r.gpus), "images/sec": f"{r.samples_per_sec:,.1f}",
             "efficiency": f"{100 * r.efficiency:.0f}%",
             "what-if efficiency": num(pred.get((r.gpu, r.series, r.gpus)), "{:.0%}"),
             "residual": num(res.get((r.gpu, r.series, r.gpus)), "{:+.0f} pts")
             + (" (not explained)" if r.series in unexplained.get(r.gpu, {}) and r.gpus > 1 else ""),
             "source": r.source,
             "_bad": False} for r in published.itertuples()]
    sources = ", ".join(sorted({s.rsplit("/experiments/", 1)[0].rsplit("/plot.svg", 1)[0]
                                for s in published["source"]}))
    note = (f"Dotted, hollow diamonds: {PUBLISHED} — ResNet-50, synthetic data, batch 64 per GPU, 4 GPUs per "
            "VM, bar heights read from the SVG charts of " + sources + " (±0.2%); the data is bench/data/reference/ "
            "in this repository, read by the report and never written to the store, so it is in no measured table, "
            "resume or check. Intel MPI ran over InfiniBand with Horovod built without NCCL; Open MPI + NCCL over "
            "TCP. Dashed: the what-if model (bench model) from each series' 1-GPU bar; the small figures on the "
            "efficiency charts and the `residual` column are its miss at each bar (predicted − published, points; "
            "docs/scaling-model.md). Efficiency divides by the "
            "series' own 1-GPU bar. "
            + "".join(f"{gpu} · {series}: the model's miss is shown, not fitted away — {why}. "
                      for gpu, by_series in unexplained.items() for series, why in by_series.items())
            + (f"Solid: {measured_here} cell(s) measured here on the same GPU types"
               + (f" (the {STUDY_MEASURED_SERIES} longest series per GPU drawn; {more} more series in the Scaling "
                  "section)." if more else ".")
               if measured_here else "No cell of these GPU types is measured in this store yet."))
    return Section("study", TITLE, note, charts=tuple(Chart(c, p) for c, p in zip(titles, paths)),
                   tables=(table("study-table", ["gpu", "series", "workers", "images/sec", "efficiency",
                                                 "what-if efficiency", "residual", "source"], rows,
                                 title=f"Published bars ({PUBLISHED})"),),
                   files=tuple(paths))
