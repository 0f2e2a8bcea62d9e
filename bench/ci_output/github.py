"""`bench check --github`: a Markdown summary appended to $GITHUB_STEP_SUMMARY (the job's summary page) and
workflow commands on stdout: `::error` for a regressed cell, `::warning` for an inconclusive or incomparable one
and for cells whose machines differ. Escaping per GitHub's workflow-command syntax (% CR LF in the message; also : and ,
in properties)."""
from __future__ import annotations

import math
import os
from pathlib import Path

from bench.ci_output.junit import failure_message

_SHOWN = ("regressed", "inconclusive", "incomparable", "insufficient-data", "improved")


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotations(result, labels: dict[str, str]) -> list[str]:
    lines = []
    for r in result.to_dict("records"):
        label = labels[r["cell_id"]]
        if r["verdict"] == "regressed":
            lines.append(f"::error title={escape_property('bench check: regression')}::"
                         f"{escape_data(failure_message(label, r))}")
        elif r["verdict"] in ("inconclusive", "incomparable") or "CPU features" in (r["note"] or ""):
            message = f"{label} ({r['cell_id']}) {r['verdict']}: {r['note'] or 'too noisy to say either way'}"
            lines.append(f"::warning title={escape_property('bench check: ' + r['verdict'])}::{escape_data(message)}")
    return lines


def _num(x, digits=3) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def summary_markdown(result, labels: dict[str, str], title: str, counts: dict[str, int], changes=()) -> str:
    status = "❌ regression" if counts.get("regressed") else "✅ no regression"
    out = [f"### bench check: {status}", "", title, "",
           ", ".join(f"{n} {v}" for v, n in counts.items() if n) or "no cells", ""]
    shown = result[result["verdict"].isin(_SHOWN)]
    if len(shown):
        out += ["| cell | verdict | ratio | interval | p | note |", "|---|---|---|---|---|---|"]
        for r in shown.to_dict("records"):
            interval = "–" if not math.isfinite(r["ci_low"]) else f"{r['ci_low']:.3f}–{r['ci_high']:.3f}"
            note = (r["note"] or "").replace("|", "\\|")
            out.append(f"| {labels[r['cell_id']]} | **{r['verdict']}** | {_num(r['ratio'])} | {interval} | "
                       f"{_num(r['p_value'])} | {note} |")
        out.append("")
    if changes:
        out += ["**What changed** (most relevant first):", ""]
        out += [f"- {c.what}: `{c.before}` → `{c.after}`" for c in changes]
        out.append("")
    return "\n".join(out) + "\n"


def write_step_summary(markdown: str) -> str | None:
    """Appends to $GITHUB_STEP_SUMMARY; returns the path, or None when the variable is not set."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return None
    with open(Path(path), "a", encoding="utf-8") as f:
        f.write(markdown)
    return path
