"""`bench check --json PATH` and `--format json`: the verdicts as JSON, schema docs/ci/check-result.schema.json
(format "bench-check-result", format_version 1; a field added later keeps the version, a field removed or changed in
meaning bumps it)."""
from __future__ import annotations

import json
from pathlib import Path

from bench.analysis.missing import json_value, text
from bench.cells.keys import CELL_KEYS

CHECK_FORMAT, CHECK_FORMAT_VERSION = "bench-check-result", 1
_NUMBERS = ("baseline_median", "baseline_ci_low", "baseline_ci_high", "candidate_median", "candidate_ci_low",
            "candidate_ci_high", "ratio", "ci_low", "ci_high", "ci_coverage", "p_value")


_value = json_value  # JSON-safe: NaN/None/NA → null, numpy scalars → Python (bench/analysis/missing.py)


def check_document(result, *, baseline: str, candidate: str, settings, normalize: str, counts: dict,
                   exit_code: int, labels: dict[str, str], changes=()) -> dict:
    from bench.cells.units import IMAGES, unit_of_cell

    cells = []
    for row in result.to_dict("records"):
        unit = unit_of_cell(row) or IMAGES  # the medians are samples/s: these say what to multiply them into
        cells.append({"cell": labels[row["cell_id"]], "cell_id": row["cell_id"],
                      "rate_unit": unit.rate, "units_per_sample": unit.per_sample,
                      "keys": {k: _value(row.get(k)) for k in CELL_KEYS},
                      "basis": row["basis"], "n_baseline": int(row["n_baseline"]),
                      "n_candidate": int(row["n_candidate"]),
                      **{k: _value(row[k]) for k in _NUMBERS}, "verdict": row["verdict"],
                      "note": text(row["note"], missing="")})
    return {"format": CHECK_FORMAT, "format_version": CHECK_FORMAT_VERSION,
            "baseline": baseline, "candidate": candidate,
            "settings": {"min_effect": settings.min_effect, "alpha": settings.alpha, "normalize": normalize},
            "exit_code": exit_code, "counts": {k: int(v) for k, v in counts.items()}, "cells": cells,
            "changes": [{"what": c.what, "baseline": c.before, "candidate": c.after, "rank": c.rank}
                        for c in changes]}


def document_text(doc: dict) -> str:
    """The document as `--json PATH` writes it and `--format json` prints it."""
    return json.dumps(doc, indent=1, sort_keys=True, allow_nan=False)


def write_json(path: str | Path, doc: dict) -> None:
    Path(path).write_text(document_text(doc) + "\n", encoding="utf-8")
