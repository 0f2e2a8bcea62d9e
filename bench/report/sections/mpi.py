"""MPI flavour comparison: each flavour against the launcher registry's first (Open MPI) over matched cells."""
from __future__ import annotations

from bench.launch import LAUNCHERS
from bench.report.sections.blocks import Section
from bench.report.sections.context import Context
from bench.report.sections.pairs import axis_section


def build(ctx: Context) -> Section | None:
    return axis_section(ctx, "mpi", "MPI flavour comparison", next(iter(LAUNCHERS)), "mpi")
