"""Is this number normal? Each multi-worker cell's measured throughput against the one expected from the same
machines' 1-worker rate and the allreduce the backward pass does not hide (bench/analysis/expected.py), the verdict
and the slow rank, and where each cell's step time went (a stacked bar per cell)."""
from __future__ import annotations

from bench.analysis.breakdown import PARTS
from bench.analysis.expected import TOLERANCE
from bench.analysis.missing import MISSING
from bench.cells.label import cell_label
from bench.report import charts as ch
from bench.report.sections.blocks import Chart, Section, table
from bench.report.sections.context import Context

TITLE = "Expected vs measured, and where the time went"


def build(ctx: Context) -> Section | None:
    if ctx.table.empty or (not ctx.expected and not ctx.breakdowns):
        return None
    rows_by_id = {r["cell_id"]: r for r in ctx.table.to_dict("records")}
    rows = []
    for e in ctx.expected:
        cell = rows_by_id[e.cell_id]
        one = rows_by_id.get(e.baseline_id)
        rows.append({"cell": cell_label(cell), "images/sec": f"{e.measured:,.1f}",
                     "expected": MISSING if e.expected is None else
                     f"{e.expected:,.1f} ({e.expected_low:,.1f}–{e.expected_high:,.1f})",
                     "1-worker cell": MISSING if one is None else
                     cell_label(one) + (" (stand-in)" if e.stand_in else ""),
                     "links": e.links or MISSING, "vs expected": vs_expected_text(e),
                     "slow rank": e.straggler.describe() if e.straggler else "—", "cell_id": e.cell_id,
                     "_bad": e.below})
    charts, files = [], []
    if ctx.breakdowns:
        path = ch.breakdown_chart([cell_label(rows_by_id[b.cell_id]) for b in ctx.breakdowns],
                                  [b.parts for b in ctx.breakdowns], [b.sources for b in ctx.breakdowns],
                                  ctx.out_dir / "breakdown.png")
        charts.append(Chart("Where the step time went", path))
        files.append(path)
    parts = [{"cell": cell_label(rows_by_id[b.cell_id]), "step s": f"{b.step_s:.3f}",
              **{p: f"{b.parts[p]:.3f}" + (" (modelled)" if b.sources[p] == "modelled" else "") for p in PARTS},
              "cell_id": b.cell_id, "_bad": False} for b in ctx.breakdowns]
    tables = []
    if rows:
        tables.append(table("expected-table", ["cell", "images/sec", "expected", "1-worker cell", "links",
                                               "vs expected", "slow rank", "cell_id"], rows))
    if parts:
        tables.append(table("breakdown-table", ["cell", "step s", *PARTS, "cell_id"], parts))
    return Section("expected", TITLE,
                   "Expected: the same series' 1-worker rate × workers, less the allreduce time the backward pass "
                   "does not hide (from this stack's measured allreduce fit, else the data sheet: `links`); "
                   "interval from the 1-worker rate's 95% interval (and the fit's). With no 1-worker twin, a 1-worker "
                   "cell differing only in what one worker does not use (the MPI flavour, the engine, the fabric) or "
                   "in how often it was measured stands in, marked (stand-in); with none, `vs expected` says why. "
                   "A cell is below expected when its "
                   f"interval's top is more than {TOLERANCE:.0%} under the expected interval's bottom. Slow rank: the "
                   "rank whose compute per step is longest, named when its rate is under 0.8× the others'. "
                   "Co-located CPU cells with a compute probe (links: compute probe): expected is N × the rate of "
                   "one of N plain processes computing at once on the node, no communication library; the gap is "
                   "split into measured parts (the engine's threads on shared cores, unequal ranks, exposed "
                   "communication), and such a cell is below expected only for the part no measurement accounts for "
                   "(docs/diagnose.md). "
                   "Breakdown: seconds per step, averaged over ranks (bench/analysis/expected.py).",
                   charts=tuple(charts), tables=tuple(tables), files=tuple(files))


def vs_expected_text(e) -> str:
    """The verdict with the measured parts that make a co-located cell's gap (or why there is no expected value)."""
    if e.expected is None:
        return e.why
    named = e.split.named() if e.split is not None and not e.below else ""
    return e.verdict + (f": {named}" if named else "") + (f" ({e.note})" if e.note else "")
