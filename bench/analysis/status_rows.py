"""The rows of `bench status`'s table (pure: judged cells in, rows out): one per training cell, from the latest
complete run of each cell (bench/analysis/judged.py), in the unit users quote for its workload (bench/cells/units.py:
img/s, tokens/s).

Each row: the cell's rate with its 95% bootstrap interval (scaling.cell_summary's boot_low/boot_high, the interval
the verdict reads), its speedup and scaling efficiency where its series has more than one cell (scaling.scaling), its
expected value with its interval and the verdict (expected.py), as a class of VERDICTS, a short text for the table
and the whole sentence `bench status -v` prints. Rendering is bench/report/status_table.py's.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from bench.analysis.expected import Expected
from bench.analysis.missing import is_missing
from bench.cells.label import cell_label
from bench.cells.units import IMAGES, quoted, unit_of_cell
from models.registry.workloads import workload_spec

AS_EXPECTED, BELOW, ABOVE = "as expected", "below expected", "above expected"
NOT_APART, NO_EXPECTED = "not measured apart", "no expected value"
VERDICTS = (AS_EXPECTED, BELOW, ABOVE, NOT_APART, NO_EXPECTED)  # expected.py's words, in the order they are judged
ONE_WORKER = "one worker: the rate its series' expected values rest on"
_GAP = re.compile(r"(below|above) expected by -?\d+%")


@dataclass(frozen=True)
class StatusRow:
    run_id: str  # the run whose records the row shows: the cell's latest complete run
    workload: str  # the registry's title for the cell's workload (ResNet-50's cells: "ResNet-50 (img/s)")
    cell_id: str
    label: str  # bench.cells.label.cell_label
    gpu: str
    gpus: int
    nodes: int | None
    rate_unit: str  # img/s, tokens/s, ...: every rate of the row is in it
    units_per_sample: int  # units of rate_unit in one sample: an image; a sequence of seq_len tokens
    rate: float  # the median over the cell's windows (or jobs)
    rate_low: float | None  # its 95% interval
    rate_high: float | None
    interval_over: str  # what the interval rests on: "3 windows", "2 jobs"
    speedup: float | None  # against the series' smallest worker count (None: the series has one cell)
    efficiency: float | None
    baseline_gpus: int | None
    expected: float | None
    expected_low: float | None
    expected_high: float | None
    expected_from: str  # what the expected value rests on: "measured fit", "data sheet", "compute probe", ...
    verdict: str  # one of VERDICTS
    verdict_text: str  # the table's: the verdict with its gap ("below expected by 12%")
    detail: str  # the whole sentence: the verdict's own words with its causes, or why there is no expected value
    slow_rank: int | None
    # A layout cell's figures (bench/analysis/layout_cells.py: LayoutFigures.as_json(): bubble, each mesh
    # dimension's collective time per step, peak memory beside the model's); None for every other cell.
    layout: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def workload_title(cell: Mapping[str, Any]) -> str:
    """The registry's title of the cell's workload (the report's section titles), ResNet-50's in its unit."""
    model = str(cell.get("model") or "resnet50")
    spec = workload_spec(model, str(cell.get("framework") or "pytorch")) or {}
    unit = unit_of_cell(cell) or IMAGES
    return spec.get("title") or (f"ResNet-50 ({unit.rate})" if model == "resnet50" else f"{model} ({unit.rate})")


def verdict_of(e: Expected | None, gpus: int) -> tuple[str, str, str]:
    """(class, short text, whole sentence) of a cell's Expected (None: a 1-worker cell, which has none)."""
    if e is None:
        return NO_EXPECTED, NO_EXPECTED, ONE_WORKER if gpus < 2 else NO_EXPECTED
    if e.expected is None:
        return NO_EXPECTED, NO_EXPECTED, e.why or e.verdict
    for verdict in (BELOW, ABOVE, AS_EXPECTED, NOT_APART):
        if e.verdict.startswith(verdict):
            gap = _GAP.match(e.verdict)
            return verdict, gap.group(0) if gap else verdict, e.verdict
    return NO_EXPECTED, NO_EXPECTED, e.verdict


def _number(v: Any) -> float | None:
    return None if is_missing(v) else float(v)


def status_rows(judged) -> list[StatusRow]:
    """One row per cell of a bench.analysis.judged.Judged (None: no rows), in its table's order (each series
    together, by worker count)."""
    if judged is None:
        return []
    return rows_of(judged.table, judged.expected, judged.run_of())


def rows_of(table, expected: Iterable[Expected], runs: Mapping[str, str]) -> list[StatusRow]:
    """One row per cell of a scaling.scaling() table, in its order: `expected`, the Expected of its multi-worker
    cells; `runs`, cell_id → the run its row shows. The report's headline tables are these rows too."""
    verdicts = {e.cell_id: e for e in expected}
    return [_row(r, verdicts.get(r["cell_id"]), str(runs.get(r["cell_id"], ""))) for r in table.to_dict("records")]


def _row(r: Mapping[str, Any], e: Expected | None, run_id: str) -> StatusRow:
    """A cell's row: `r`, its scaling.scaling() row; `e`, its Expected (None: a 1-worker cell)."""
    unit = unit_of_cell(r) or IMAGES

    def rate(v: Any) -> float | None:
        return None if is_missing(v) else quoted(float(v), unit)

    verdict, short, detail = verdict_of(e, int(r["gpus"]))
    scaled = int(r.get("series_cells") or 1) > 1
    judged = e is not None and e.expected is not None
    return StatusRow(
        run_id=run_id, workload=workload_title(r), cell_id=r["cell_id"], label=cell_label(r), gpu=str(r["gpu"]),
        gpus=int(r["gpus"]), nodes=None if is_missing(r.get("nodes")) else int(r["nodes"]), rate_unit=unit.rate,
        units_per_sample=unit.per_sample, rate=rate(r["samples_per_sec"]), rate_low=rate(r.get("boot_low")),
        rate_high=rate(r.get("boot_high")), interval_over=str(r.get("ci_over") or ""),
        speedup=_number(r.get("speedup")) if scaled else None,
        efficiency=_number(r.get("efficiency")) if scaled else None,
        baseline_gpus=int(r["baseline_gpus"]) if scaled else None,
        expected=rate(e.expected) if judged else None, expected_low=rate(e.expected_low) if judged else None,
        expected_high=rate(e.expected_high) if judged else None, expected_from=e.links if judged else "",
        verdict=verdict, verdict_text=short, detail=detail,
        slow_rank=e.straggler.rank if e is not None and e.straggler is not None else None)


def with_layout_figures(rows: Iterable[StatusRow], figures: Mapping[str, Any]) -> list[StatusRow]:
    """The rows, each layout cell's with its figures (`figures`: cell_id → LayoutFigures, layout_cells.py)."""
    return [replace(r, layout=figures[r.cell_id].as_json()) if r.cell_id in figures else r for r in rows]


def grouped(rows: Iterable[StatusRow], runs: Iterable[str]) -> list[tuple[str, list[tuple[str, list[StatusRow]]]]]:
    """[(run_id, [(workload, rows)])]: the rows by run, in `runs`' order (then any run it does not name), and within
    a run by workload and GPU, in the order they first come (a workload measured on two GPUs: two groups)."""
    by_run: dict[str, dict[tuple[str, str], list[StatusRow]]] = {run: {} for run in runs}
    for row in rows:
        by_run.setdefault(row.run_id, {}).setdefault((row.workload, row.gpu), []).append(row)
    return [(run, [(workload, group) for (workload, _), group in groups.items()]) for run, groups in by_run.items()]


def run_counts(records) -> dict[str, tuple[int, int]]:
    """run_id → (cells it ran, cells with a record that is not ok) of a store's measured records."""
    if records.empty:
        return {}
    failed = records[records["status"] != "ok"].groupby("run_id")["cell_id"].nunique()
    ran = records.groupby("run_id", sort=False)["cell_id"].nunique()
    return {run: (int(n), int(failed.get(run, 0))) for run, n in ran.items()}
