"""One cell's verdict as the CI writers (junit.py, github.py) see it, whichever command made it: `bench check`'s
result frame (a baseline against a candidate) and `bench ab`'s paired results (side A against side B) are both
turned into CellOutcome rows here, so the writers have one shape to handle."""
from __future__ import annotations

import math
from dataclasses import dataclass

from bench.analysis import missing


@dataclass(frozen=True)
class CellOutcome:
    label: str          # the cell's one label (bench.cells.label), unique per cell
    cell_id: str        # "" where the command matches cells on their keys (ab)
    verdict: str        # regressed, improved, unchanged, inconclusive (check), undecided (ab),
                        # insufficient-data, incomparable
    ratio: float        # new/old throughput; NaN when not computed
    ci_low: float
    ci_high: float
    level: float        # the interval's coverage (0.9 = 90%)
    p_value: float      # check: one-sided p for "slower"; ab: anytime-valid p for "any change"
    note: str = ""
    ratio_of: str = "candidate/baseline"

    @property
    def name(self) -> str:
        """The JUnit test name: the label alone, the same for `check` and `ab` (docs/ci/README.md)."""
        return self.label

    @property
    def who(self) -> str:
        return f"{self.label} ({self.cell_id})" if self.cell_id else self.label


@dataclass(frozen=True)
class Heading:
    """Which command's verdicts these are: `tool` names it in titles ("bench check"), `title` the two sides."""
    tool: str
    title: str


def _float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def from_check(result, labels: dict[str, str]) -> list[CellOutcome]:
    """`bench check`'s result frame (bench/analysis/regress.compare) → outcomes; labels: cell_id → label."""
    return [CellOutcome(labels[r["cell_id"]], r["cell_id"], r["verdict"], _float(r["ratio"]), _float(r["ci_low"]),
                        _float(r["ci_high"]), _float(r["ci_coverage"]), _float(r["p_value"]),
                        missing.text(r["note"], missing=""))
            for r in result.to_dict("records")]


def from_ab(results: list[dict]) -> list[CellOutcome]:
    """`bench ab`'s per-cell results (bench/commands/ab.judge) → outcomes; the ratio is B/A, the note the verdict's
    reason (with the pairs complete where a side run failed)."""
    return [CellOutcome(r["cell"], "", r["verdict"], _float(r["ratio"]), _float(r["ci_low"]), _float(r["ci_high"]),
                        _float(r["level"]), _float(r["p_change"]),
                        r["why"] + (f"; {r['pairs']} of {r['pairs_run']} pairs complete"
                                    if r["pairs"] < r["pairs_run"] else ""), ratio_of="B/A")
            for r in results]
