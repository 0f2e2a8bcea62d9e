"""Failed cells: the latest attempt of each cell that failed, with its reason and run."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bench.analysis.missing import text
from bench.cells.label import cell_label
from bench.report.sections.blocks import CustomSection
from bench.report.sections.context import Context


@dataclass(frozen=True)
class Failures(CustomSection):
    rows: tuple[dict[str, str], ...]  # label, cell_id, status, error, run_id

    id: ClassVar[str] = "failures"
    title: ClassVar[str] = "Failed cells (latest attempt)"
    nav: ClassVar[str] = "Failed cells"
    template: ClassVar[str] = "failures"


def build(ctx: Context) -> Failures | None:
    if ctx.failures.empty:
        return None
    return Failures(tuple({"label": cell_label(r), "cell_id": r.cell_id,
                           "status": r.status, "error": text(r.error, missing="no reason recorded"), "run_id": r.run_id}
                          for _, r in ctx.failures.iterrows()))
