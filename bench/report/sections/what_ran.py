"""What ran: the hosts, CPUs, framework and Horovod builds, controllers, MPI libraries and GPUs the records
describe (from a sample of record JSON). In the page only; summary.md leaves it out."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bench.report.environments import ENV_COLUMNS, environments
from bench.report.sections.blocks import CustomSection
from bench.report.sections.context import Context


@dataclass(frozen=True)
class WhatRan(CustomSection):
    environments: tuple[dict[str, str], ...]
    sampled: bool  # read from a sample of the records, not every one

    id: ClassVar[str] = "environment"
    title: ClassVar[str] = "What ran"
    template: ClassVar[str] = "what_ran"
    columns: ClassVar[list[str]] = ENV_COLUMNS

    @property
    def records_read(self) -> int:
        return sum(e["records"] for e in self.environments)


def build(ctx: Context) -> WhatRan | None:
    if ctx.records.empty:
        return None
    return WhatRan(tuple(environments(ctx.env_json)), sampled=len(ctx.env_json) < len(ctx.ok))
