"""`--junit PATH` and `--github` for `check` and `ab` alike, from their CellOutcome rows (outcome.py)."""
from __future__ import annotations

from bench.ci_output.github import print_github
from bench.ci_output.junit import junit_tree, write_junit
from bench.ci_output.outcome import CellOutcome, Heading


def write_junit_github(outcomes: list[CellOutcome], heading: Heading, counts: dict[str, int], changes=(), *,
                       junit_path=None, github: bool = False) -> None:
    if junit_path:
        write_junit(junit_path, junit_tree(outcomes, heading))
    if github:
        print_github(outcomes, heading, counts, changes)
