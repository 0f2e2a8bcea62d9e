"""`bench ab --json PATH` and `--format json`: the session's verdicts as JSON, schema
docs/ci/ab-result.schema.json (format "bench-ab-result", format_version 2)."""
from __future__ import annotations

import json
from pathlib import Path

from bench.analysis.missing import json_value

AB_FORMAT, AB_FORMAT_VERSION = "bench-ab-result", 2


_num = json_value  # NaN/None/NA/±inf → null (bench/analysis/missing.py)


def ab_document(results, diffs, settings, session_id: str, specs, statistic: str, course: dict) -> dict:
    """course: how the session went (pairs_run, stopped, seconds, pair_seconds, budget_s, max_pairs, fixed_pairs,
    cpu_weight; bench/commands/ab.py)."""
    return {
        "format": AB_FORMAT, "format_version": AB_FORMAT_VERSION, "session": session_id,
        "sides": {s.name: {"spec": s.text, "describe": s.describe()} for s in specs},
        "settings": {"min_effect": settings.min_effect, "alpha": settings.alpha, "precision": settings.precision,
                     "statistic": statistic, "budget_s": course["budget_s"], "max_pairs": course["max_pairs"],
                     "fixed_pairs": course["fixed_pairs"], "cpu_weight": course["cpu_weight"]},
        "course": {k: course[k] for k in ("pairs_run", "stopped", "seconds", "pair_seconds")},
        "regressed": any(r["verdict"] == "regressed" for r in results),
        "cells": [{k: (_num(v) if not isinstance(v, list) else [_num(x) for x in v]) for k, v in r.items()}
                  for r in results],
        "changes": [{"what": d.what, "a": d.before, "b": d.after, "rank": d.rank} for d in diffs],
    }


def document_text(doc: dict) -> str:
    """The document as `--json PATH` writes it and `--format json` prints it."""
    return json.dumps(doc, indent=1, sort_keys=True, allow_nan=False)


def write_ab_json(path, results, diffs, settings, session_id, specs, statistic: str, course: dict) -> None:
    doc = ab_document(results, diffs, settings, session_id, specs, statistic, course)
    Path(path).write_text(document_text(doc) + "\n", encoding="utf-8")
