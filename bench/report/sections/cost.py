"""Cost ranking: $ per million training images from the VM's list price × nodes, cheapest first."""
from __future__ import annotations

import pandas as pd

from bench.analysis.cost import cost_table
from bench.analysis.missing import is_missing, text
from bench.cells.label import cell_label
from bench.report import charts as ch
from bench.report.format import num
from bench.report.sections.blocks import MAX_ROWS, Chart, Section, table, write_csv
from bench.report.sections.context import Context

COLUMNS = ["rank", "cell", "nodes", "VM $/h", "$/h", "images/sec", "$ per million images", "images per $",
           "price read", "price source", "cell_id"]


def build(ctx: Context) -> Section | None:
    if ctx.table.empty:
        return None
    costs = cost_table(ctx.table, ctx.prices)
    priced = costs[costs["usd_per_million_images"].notna()]
    csv = write_csv(costs, ctx.out_dir, "cost.csv")
    rows = []
    for i, r in enumerate(costs.head(MAX_ROWS).itertuples(), 1):
        has = pd.notna(r.usd_per_million_images)
        read = None if isinstance(r.price_read, str) and not r.price_read.strip() else r.price_read
        rows.append({"rank": str(i) if has else "—", "cell": cell_label(costs.iloc[i - 1]),
                     "nodes": int(r.nodes), "VM $/h": num(r.vm_usd_per_hour, "${:,.2f}", "no price"),
                     "$/h": num(r.usd_per_hour, "${:,.2f}", "no price"), "images/sec": f"{r.samples_per_sec:,.1f}",
                     "$ per million images": num(r.usd_per_million_images, "${:,.2f}", "no price"),
                     "images per $": num(r.images_per_usd, "{:,.0f}", "no price"),
                     "price read": text(read, missing="no price" if is_missing(r.vm_usd_per_hour) else "not recorded"),
                     "price source": text(r.price_source, missing="no price"), "cell_id": r.cell_id,
                     "_bad": False})
    charts, files = [], [csv]
    if not priced.empty:
        shown = priced.head(ch.MAX_BARS)
        shown = shown.assign(label=[cell_label(r) for _, r in shown.iterrows()])
        chart = ch.bar_chart(shown, "label", "Cheapest cells: $ per million training images (lower is better)",
                             ctx.out_dir / "cost.png", xlabel="USD per million images (VM list price × nodes)",
                             value="usd_per_million_images", low="_", high="_", fmt="${:,.2f}")
        files.append(chart)
        charts.append(Chart("$ per million images", chart))
    n_none = int(costs["usd_per_million_images"].isna().sum())
    return Section("cost", "Cost ranking",
                   "Cost per hour = the VM's pay-as-you-go list price × nodes (whole VMs are paid for, used or not); "
                   "$ per million images = cost per hour ÷ (images/sec × 3600) × 10⁶. Prices come from the catalogue "
                   "(each with the date it was read) or `--prices FILE`."
                   + (f" {n_none} cell(s) have no price (unknown or retired SKU, or the CPU fallback): 'no price'."
                      if n_none else ""),
                   charts=tuple(charts), tables=(table("cost-table", COLUMNS, rows, csv=csv.name, total=len(costs)),),
                   files=tuple(files))
