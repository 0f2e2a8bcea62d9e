"""Collectives: per op (registry order), per collective cell, time, algbw and busbw against message size (median
over repeats); allreduce cells also show the stack's fitted α/β (the model's input; other ops are not fitted)."""
from __future__ import annotations

from bench.analysis.collectives import fit_alpha_beta
from bench.report.sections.blocks import Section, table
from bench.report.sections.context import Context
from models.registry.collectives import COLLECTIVES


def build(ctx: Context) -> Section | None:
    sweeps = ctx.sweeps
    if sweeps.empty:
        return None
    tables = []
    order = {op: i for i, op in enumerate(COLLECTIVES)}
    groups = sorted(sweeps.groupby(["op", "cell_id"], sort=False), key=lambda g: order.get(g[0][0], len(order)))
    for i, ((op, cell), rows) in enumerate(groups):
        first = rows.iloc[0]
        per_size = rows.groupby("bytes").agg(time=("time_median_s", "median"), busbw=("busbw_bytes_per_s", "median"),
                                             algbw=("algbw_bytes_per_s", "median"), repeats=("repeat", "size"))
        trows = [{"bytes": f"{b:,}", "time (median)": f"{r.time * 1e3:,.3f} ms",
                  "algbw": f"{r.algbw / 1e9:,.3f} GB/s", "busbw": f"{r.busbw / 1e9:,.3f} GB/s",
                  "repeats": int(r.repeats), "_bad": False} for b, r in per_size.iterrows()]
        fit = f" · fit: {fit_alpha_beta(rows.to_dict('records')).describe()}" if op == "allreduce" else ""
        title = (f"{op} · {first['gpu']}/{first['mpi']}/{first['engine']}/ib={'on' if first['ib'] else 'off'}"
                 f" · {int(first['world_size'])} workers on {int(first['nodes'])} node(s) · {cell}{fit}")
        tables.append(table(f"collectives-table-{i + 1}", ["bytes", "time (median)", "algbw", "busbw", "repeats"],
                            trows, title=title))
    factors = ", ".join(f"{spec['bus_formula']} for {op}" for op, spec in COLLECTIVES.items())
    return Section("collectives", "Collectives: bandwidth vs message size",
                   "Collective sweeps by op (docs/collectives.md): time is the slowest rank's, median over iterations "
                   "and repeats; algbw = bytes / time (allgather's bytes: the gathered output), busbw = algbw × "
                   f"factor, {factors} (nccl-tests' definitions). Allreduce cells show the fit time = α + "
                   "2(n−1)/n · bytes / β, with 95% bootstrap intervals.",
                   tables=tuple(tables))
