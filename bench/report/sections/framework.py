"""Framework comparison: each framework against the workload registry's first (PyTorch) over matched cells."""
from __future__ import annotations

from bench.report.sections.blocks import Section
from bench.report.sections.context import Context
from bench.report.sections.pairs import axis_section
from models.registry.workloads import WORKLOADS


def build(ctx: Context) -> Section | None:
    return axis_section(ctx, "framework", "Framework comparison", next(iter(WORKLOADS)), "framework")
