"""`bench check --junit PATH`: one JUnit test case per cell, so a CI system lists cells like tests.

regressed → <failure> whose message names the cell, the ratio and its interval; insufficient-data and
incomparable → <skipped> with the reason; unchanged, improved and inconclusive pass (inconclusive with the reason in
<system-out>, since a gate that fails on noise is switched off by its users). The document follows the common JUnit
XML layout (testsuites/testsuite/testcase, as Jenkins, GitLab and GitHub test reporters read it).
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path


def _ratio_text(row) -> str:
    if not math.isfinite(row["ratio"]):
        return "ratio -"
    if not math.isfinite(row["ci_low"]):
        return f"ratio {row['ratio']:.3f}"
    return (f"ratio {row['ratio']:.3f} (candidate/baseline), {row['ci_coverage']:.0%} interval "
            f"{row['ci_low']:.3f}–{row['ci_high']:.3f}")


def failure_message(label: str, row) -> str:
    return f"{label} ({row['cell_id']}) regressed: {_ratio_text(row)}, p = {row['p_value']:.3g}"


def junit_tree(result, labels: dict[str, str], suite: str, elapsed_s: float = 0.0) -> ET.ElementTree:
    rows = result.to_dict("records")
    failures = sum(r["verdict"] == "regressed" for r in rows)
    skipped = sum(r["verdict"] in ("insufficient-data", "incomparable") for r in rows)
    root = ET.Element("testsuites", name="bench check", tests=str(len(rows)), failures=str(failures), errors="0",
                      skipped=str(skipped), time=f"{elapsed_s:.3f}")
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(rows)), failures=str(failures), errors="0",
                       skipped=str(skipped), time=f"{elapsed_s:.3f}")
    for r in rows:
        label = labels[r["cell_id"]]
        case = ET.SubElement(ts, "testcase", classname="bench.check", name=f"{label} [{r['cell_id']}]", time="0")
        if r["verdict"] == "regressed":
            failure = ET.SubElement(case, "failure", message=failure_message(label, r), type="regression")
            failure.text = f"{failure_message(label, r)}\n{r['note'] or ''}".strip()
        elif r["verdict"] in ("insufficient-data", "incomparable"):
            ET.SubElement(case, "skipped", message=f"{r['verdict']}: {r['note'] or ''}".rstrip(": "))
        else:
            out = ET.SubElement(case, "system-out")
            out.text = f"{r['verdict']}: {_ratio_text(r)}" + (f"; {r['note']}" if r["note"] else "")
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(path: str | Path, tree: ET.ElementTree) -> None:
    tree.write(str(path), encoding="utf-8", xml_declaration=True)
