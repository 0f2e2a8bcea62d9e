"""Matched-pair comparisons along one axis (cells equal in every other setting): the rows, the order a cut table
keeps, and the whole section for an axis whose values come from a registry (framework, MPI flavour)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from bench.analysis.compare import compare_all
from bench.report import charts as ch
from bench.report.format import settings_label
from bench.report.sections.blocks import MAX_ROWS, Chart, Section, omitted, table, write_csv
from bench.report.sections.context import Context

PAIR_COLUMNS = ["cell", "value", "vs", "images/sec (value)", "images/sec (vs)", "ratio", "95% CI", "verdict"]


def pair_rows(pairs: pd.DataFrame, axis: str, *, transports: dict[str, str] | None = None) -> list[dict]:
    rows = []
    for _, p in pairs.iterrows():
        row = {"cell": settings_label(p, drop=(axis,)), "value": str(p.get("value", "")),
               "vs": str(p.get("baseline", "")), "images/sec (value)": f"{p['samples_per_sec_a']:,.1f}",
               "images/sec (vs)": f"{p['samples_per_sec_b']:,.1f}",
               "ratio": f"{p['ratio']:.3f}", "95% CI": f"{p['ratio_low']:.3f}–{p['ratio_high']:.3f}",
               "verdict": {"a faster": f"{p.get('value')} faster", "b faster": f"{p.get('baseline')} faster"}
               .get(p["verdict"], p["verdict"]), "_bad": False}
        if transports is not None:
            ta, tb = transports.get(p["cell_id_a"]), transports.get(p["cell_id_b"])
            row["transport (a)"], row["transport (b)"] = ta or "unknown", tb or "unknown"
            row["_bad"] = "MISMATCH" in (ta or "") or "MISMATCH" in (tb or "")
        rows.append(row)
    return rows


def worst_first(pairs: pd.DataFrame) -> pd.DataFrame:
    """Pairs furthest from 1 first: the rows a reader should see when the table is cut."""
    return pairs.iloc[(pairs["ratio"].apply(lambda r: abs(np.log(r)) if r > 0 else np.inf)).argsort()[::-1]]


def axis_section(ctx: Context, axis: str, title: str, baseline: str, sid: str) -> Section | None:
    """Every value of `axis` against `baseline` (its registry's first entry) over matched cells."""
    if ctx.table.empty:
        return None
    table_ = ctx.table
    pairs = compare_all(table_, axis, baseline)
    if pairs.empty:
        n = table_[axis].nunique() if axis in table_ else 0
        why = f"only one {axis} value measured" if n < 2 else f"no two cells differ only in {axis}"
        return omitted(sid, title, f"{why}.")
    base = pairs["baseline"].iloc[0]
    chart = ch.ratio_chart(pairs, f"{title}: images/sec relative to {base} (matched cells)",
                           f"images/sec ÷ images/sec with {base}", ctx.out_dir / f"compare_{axis}.png")
    csv = write_csv(pairs, ctx.out_dir, f"compare_{axis}.csv")
    summary = pairs.groupby("value")["ratio"].agg(["count", "median", "min", "max"])
    note = "; ".join(f"{v} vs {base}: median ratio {s['median']:.2f} over {int(s['count'])} matched pair"
                     f"{'s' if s['count'] > 1 else ''} (range {s['min']:.2f}–{s['max']:.2f})"
                     for v, s in summary.iterrows())
    return Section(sid, title, note + ". Ratio > 1: faster than " + str(base) +
                   "; the interval is a bootstrap over job-level repeats of both cells.",
                   charts=(Chart(f"{title} (one point per matched pair)", chart),),
                   tables=(table(f"{sid}-table", PAIR_COLUMNS, pair_rows(worst_first(pairs).head(MAX_ROWS), axis),
                                 csv=csv.name, total=len(pairs)),),
                   files=(chart, csv))
