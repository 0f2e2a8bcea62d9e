"""InfiniBand on vs off over matched cells, with the transport the logs say carried the traffic: a cell whose
transport is not the one asked for is listed and its pairs are put first."""
from __future__ import annotations

import pandas as pd

from bench.analysis.compare import compare
from bench.cells.label import cell_label
from bench.report import charts as ch
from bench.report.format import transport
from bench.report.sections.blocks import MAX_ROWS, Chart, Section, omitted, table, write_csv
from bench.report.sections.context import Context
from bench.report.sections.pairs import PAIR_COLUMNS, pair_rows, worst_first

TITLE = "InfiniBand on vs off"


def build(ctx: Context) -> Section | None:
    t = ctx.table
    if t.empty:
        return None
    pairs = compare(t, "ib", True, False)
    mism = t[t["transport_verdict"] == "mismatch"] if "transport_verdict" in t else t.iloc[0:0]
    mism_rows = [{"cell": cell_label(r), "transport": transport(r), "cell_id": r["cell_id"], "_bad": True}
                 for _, r in mism.head(MAX_ROWS).iterrows()]
    tables = []
    if mism_rows:
        tables.append(table("transport-mismatches", ["cell", "transport", "cell_id"], mism_rows, total=len(mism),
                            title=f"⚠ {len(mism)} cell(s) where the transport that ran is not the one asked for"))
    if pairs.empty:
        if not tables:
            why = "IB on and off not both measured" if t["ib"].nunique() < 2 else "no cell pair differs only in IB"
            return omitted("ib", TITLE, f"{why}.")
        return Section("ib", TITLE, "No matched on/off pair; transport mismatches below.", tables=tuple(tables))
    pairs = pairs.assign(value="IB on", baseline="IB off")
    transports = {r.cell_id: transport(r) for r in t.itertuples()}
    mismatch = pd.Series(["MISMATCH" in (transports.get(a) or "") + (transports.get(b) or "")
                          for a, b in zip(pairs["cell_id_a"], pairs["cell_id_b"])])
    ordered = pd.concat([pairs[mismatch.to_numpy()], worst_first(pairs[~mismatch.to_numpy()])])  # mismatches on top
    prows = pair_rows(ordered.head(MAX_ROWS), "ib", transports=transports)
    chart = ch.ratio_chart(pairs, "IB on vs off: images/sec ratio (matched cells)", "images/sec IB on ÷ IB off",
                           ctx.out_dir / "compare_ib.png", mismatch=mismatch)
    csv = write_csv(pairs.assign(transport_a=[transports.get(c) for c in pairs["cell_id_a"]],
                                 transport_b=[transports.get(c) for c in pairs["cell_id_b"]]),
                    ctx.out_dir, "compare_ib.csv")
    n_bad = int(mismatch.sum())
    tables.insert(0, table("ib-table", [*PAIR_COLUMNS, "transport (a)", "transport (b)"], prows, csv=csv.name,
                           total=len(pairs)))
    return Section("ib", TITLE,
                   f"{len(pairs)} matched pair(s); median ratio {pairs['ratio'].median():.2f}. The transport columns "
                   "show what the logs say actually carried the traffic"
                   + (f"; {n_bad} pair(s) with a ⚠ MISMATCH (red cross on the chart): their 'IB on' may not have "
                      "used InfiniBand." if n_bad else "; no mismatches."),
                   charts=(Chart("IB on vs off", chart),), tables=tuple(tables), files=(chart, csv))
