"""`--junit PATH` (`bench check`, `bench ab`): one JUnit test case per cell, so a CI system lists cells like tests.

regressed → <failure> whose message names the cell, the ratio and its interval; insufficient-data and
incomparable → <skipped> with the reason; unchanged, improved, inconclusive and undecided pass (the last two with
the reason in <system-out>, since a gate that fails on noise is switched off by its users). The document follows
the common JUnit XML layout (testsuites/testsuite/testcase, as Jenkins, GitLab and GitHub test reporters read it).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from bench.analysis import missing
from bench.ci_output.outcome import CellOutcome, Heading

SKIPPED = ("insufficient-data", "incomparable")


def ratio_text(o: CellOutcome) -> str:
    if missing.is_missing(o.ratio):
        return f"ratio {missing.MISSING}"
    if missing.is_missing(o.ci_low):
        return f"ratio {o.ratio:.3f}"
    return f"ratio {o.ratio:.3f} ({o.ratio_of}), {o.level:.0%} interval {o.ci_low:.3f}–{o.ci_high:.3f}"


def failure_message(o: CellOutcome) -> str:
    return f"{o.who} regressed: {ratio_text(o)}, p = {missing.text(o.p_value, '{:.3g}')}"


def junit_tree(outcomes: list[CellOutcome], heading: Heading, elapsed_s: float = 0.0) -> ET.ElementTree:
    failures = sum(o.verdict == "regressed" for o in outcomes)
    skipped = sum(o.verdict in SKIPPED for o in outcomes)
    counts = {"tests": str(len(outcomes)), "failures": str(failures), "errors": "0", "skipped": str(skipped),
              "time": f"{elapsed_s:.3f}"}
    root = ET.Element("testsuites", name=heading.tool, **counts)
    suite = ET.SubElement(root, "testsuite", name=heading.title, **counts)
    for o in outcomes:
        case = ET.SubElement(suite, "testcase", classname=heading.tool.replace(" ", "."), name=o.name, time="0")
        if o.verdict == "regressed":
            failure = ET.SubElement(case, "failure", message=failure_message(o), type="regression")
            failure.text = f"{failure_message(o)}\n{o.note}".strip()
        elif o.verdict in SKIPPED:
            ET.SubElement(case, "skipped", message=f"{o.verdict}: {o.note}".rstrip(": "))
        else:
            ET.SubElement(case, "system-out").text = f"{o.verdict}: {ratio_text(o)}" + (f"; {o.note}" if o.note else "")
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(path: str | Path, tree: ET.ElementTree) -> None:
    tree.write(str(path), encoding="utf-8", xml_declaration=True)
