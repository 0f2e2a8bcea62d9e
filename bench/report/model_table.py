"""`bench model --validate`'s table, rendered from bench/analysis/study_validation.validate()'s rows (one per GPU and
fabric of the published 2018 study): a rich table for people within the console's 120 columns, and the
GitHub-Markdown table `bench model` printed before it had --format. Computes nothing."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# What each fabric's published run was (bench/facts/reference.py): the Markdown names it in the row, the table in
# one line under it (the words would not leave a 120-column row room for the figures).
RUNS = {"ib": "Intel MPI, host path", "tcp": "Open MPI + NCCL 2.2 ring"}

Row = Mapping[str, Any]


def fit_text(r: Row) -> str:
    return ("FITTED" if r.get("fitted") else "held out") + (", not explained (below)" if r.get("unexplained") else "")


def table(rows: Sequence[Row]):
    """One rich Table, a line per GPU and fabric; legend() says what its short headers are."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold")
    t.add_column("GPU", no_wrap=True)
    t.add_column("fabric", no_wrap=True)
    for name in ("1-GPU img/s", "compute", "allreduce", "exposed", "E(32) model", "E(32) study", "error pts"):
        t.add_column(name, justify="right", no_wrap=True)
    t.add_column("fit", no_wrap=True)
    for r in rows:
        fit = ("FITTED" if r.get("fitted") else "held out") + (", unexplained" if r.get("unexplained") else "")
        t.add_row(r["gpu"], r["fabric"].upper(), f"{r['single_gpu']:.2f}", f"{r['compute_s']:.3f}",
                  f"{r['comm_s']:.3f}", f"{r['exposed_s']:.3f}", f"{100 * r['predicted']:.1f}%",
                  f"{100 * r['published']:.1f}%", f"{r['error_points']:+.1f}",
                  Text(fit, style="bold" if r.get("fitted") else ""))
    return t


def legend() -> list[str]:
    """The lines under the table that say what its short headers and fabrics are."""
    return ["compute, allreduce, exposed: seconds a step; E(32): efficiency at 32 GPUs, predicted by the model and "
            "published by the study; error: model - study, in points",
            "fabric: " + "; ".join(f"{key.upper()} = {text}" for key, text in RUNS.items())]


def markdown(rows: Sequence[Row]) -> str:
    """The validation rows as a Markdown table."""
    header = ("| GPU | fabric (run) | 1-GPU img/s | compute s | allreduce s | exposed s | predicted E(32) | "
              "published E(32) | error (points) | fit |")
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['gpu']} | {r['fabric'].upper()} ({RUNS[r['fabric']]}) | {r['single_gpu']:.2f} | "
                     f"{r['compute_s']:.3f} | {r['comm_s']:.3f} | {r['exposed_s']:.3f} | {100 * r['predicted']:.1f}% | "
                     f"{100 * r['published']:.1f}% | {r['error_points']:+.1f} | {fit_text(r)} |")
    return "\n".join(lines)
