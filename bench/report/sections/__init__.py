"""The report's sections, in the order the page and summary.md show them. Each module has `build(ctx)`, which
returns its section (a dataclass with `id`, `title`, `nav`, `template`, `omitted` and the `files` it wrote) or None
when it has nothing to show; templates/<template>.html.j2 and .md.j2 render it. Adding a section: one module here,
one entry in SECTIONS, and its two templates unless the common `figures` ones fit."""
from __future__ import annotations

from bench.report.sections import collectives, cost, data, expected, failures, framework, gpus, history, ib, mfu, \
    mpi, precision, prediction, references, scaling, study, transformer, what_ran
from bench.report.sections.context import Context

SECTIONS = (scaling, expected, transformer, study, gpus, mfu, framework, mpi, ib, data, cost, precision, prediction,
            collectives, history, references, failures, what_ran)


def build_sections(ctx: Context) -> list:
    """Every section that has something to show, in SECTIONS order."""
    return [s for s in (module.build(ctx) for module in SECTIONS) if s is not None]
