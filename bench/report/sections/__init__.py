"""The report's sections, in the order the page and summary.md show them (the headline first: the first screen).
Each module has `build(ctx)`, which returns its section (a dataclass with `id`, `title`, `nav`, `template`,
`omitted` and the `files` it wrote) or None when it has nothing to show; templates/<template>.html.j2 and .md.j2
render it. Adding a section: one module here, one entry in SECTIONS, and its two templates unless the common
`figures` ones fit."""
from __future__ import annotations

from bench.report.sections import (collectives, cost, data, expected, failures, framework, gpus, headline, history, ib,
                                   layouts, mfu, mpi, precision, prediction, references, scaling, study, what_ran,
                                   workloads)
from bench.report.sections.context import Context

SECTIONS = (headline, scaling, expected, workloads, layouts, study, gpus, mfu, framework, mpi, ib, data, cost,
            precision, prediction, collectives, history, references, failures, what_ran)


def build_sections(ctx: Context) -> list:
    """Every section that has something to show, in SECTIONS order (a module may give several: one per workload)."""
    out = []
    for module in SECTIONS:
        built = module.build(ctx)
        out += [s for s in (built if isinstance(built, list) else [built]) if s is not None]
    return out
