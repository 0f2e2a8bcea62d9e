"""`--github` (`bench check`, `bench ab`): a Markdown summary appended to $GITHUB_STEP_SUMMARY (the job's summary
page) and workflow commands on stdout: `::error` for a regressed cell, `::warning` for an inconclusive, undecided
or incomparable one and for cells whose machines differ. Escaping per GitHub's workflow-command syntax (% CR LF in the
message; also : and , in properties)."""
from __future__ import annotations

import os
from pathlib import Path

from bench.analysis import missing
from bench.ci_output.junit import failure_message
from bench.ci_output.outcome import CellOutcome, Heading

_SHOWN = ("regressed", "inconclusive", "undecided", "incomparable", "insufficient-data", "improved")


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotations(outcomes: list[CellOutcome], heading: Heading) -> list[str]:
    lines = []
    for o in outcomes:
        if o.verdict == "regressed":
            lines.append(f"::error title={escape_property(heading.tool + ': regression')}::"
                         f"{escape_data(failure_message(o))}")
        elif o.verdict in ("inconclusive", "undecided", "incomparable") or "CPU features" in o.note:
            message = f"{o.who} {o.verdict}: {o.note or 'too noisy to say either way'}"
            lines.append(f"::warning title={escape_property(f'{heading.tool}: {o.verdict}')}::{escape_data(message)}")
    return lines


def _num(x, digits=3) -> str:
    return missing.text(x, f"{{:.{digits}f}}")


def _p(x) -> str:
    return missing.text(x, "{:.3g}")  # a tiny p stays readable (not 0.000)


def summary_markdown(outcomes: list[CellOutcome], heading: Heading, counts: dict[str, int], changes=()) -> str:
    status = "❌ regression" if counts.get("regressed") else "✅ no regression"
    out = [f"### {heading.tool}: {status}", "", heading.title, "",
           ", ".join(f"{n} {v}" for v, n in counts.items() if n) or "no cells", ""]
    shown = [o for o in outcomes if o.verdict in _SHOWN]
    if shown:
        out += ["| cell | verdict | ratio | interval | p | note |", "|---|---|---|---|---|---|"]
        for o in shown:
            interval = missing.MISSING if missing.is_missing(o.ci_low) else f"{o.ci_low:.3f}–{o.ci_high:.3f}"
            out.append(f"| {o.label} | **{o.verdict}** | {_num(o.ratio)} | {interval} | {_p(o.p_value)} | "
                       f"{o.note.replace('|', chr(92) + '|')} |")
        out.append("")
    if changes:
        out += ["**What changed** (most relevant first):", ""]
        out += [f"- {c.what}: `{c.after}`" if c.before == "" else f"- {c.what}: `{c.before}` → `{c.after}`"
                for c in changes]
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


def print_github(outcomes: list[CellOutcome], heading: Heading, counts: dict[str, int], changes=()) -> None:
    """The annotations on stdout, and the summary to $GITHUB_STEP_SUMMARY (printed when it is not set)."""
    for line in annotations(outcomes, heading):
        print(line)
    markdown = summary_markdown(outcomes, heading, counts, changes)
    if write_step_summary(markdown) is None:
        print("GITHUB_STEP_SUMMARY is not set; the summary:")
        print(markdown, end="")
