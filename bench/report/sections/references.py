"""Published references (imported records): shown for comparison only, never in a measured table."""
from __future__ import annotations

from bench.report.sections.blocks import Section, table
from bench.report.sections.context import Context


def build(ctx: Context) -> Section | None:
    if ctx.references.empty:
        return None
    rows = [{"source": r.ref_label, "gpu": r.gpu, "workers": int(r.gpus), "images/sec": f"{r.samples_per_sec:,.1f}",
             "records": int(r.records), "_bad": False} for r in ctx.references.itertuples()]
    return Section("references", "Published references (imported, not measured here)",
                   "Shown for comparison only; kept out of every measured table above.",
                   tables=(table("references-table", ["source", "gpu", "workers", "images/sec", "records"], rows),))
