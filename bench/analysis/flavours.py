"""What analysis needs to know of the MPI flavours, handed in by its callers.

Analysis sits below bench/launch (docs/architecture.md, "Layers"), so it cannot ask a flavour. Each fact is an
attribute of the flavour in its own module under bench/launch/; the callers (the report, `bench status`, the local
backend) build this from the registry with `bench.launch.analysis_facts()` and hand it down, as
whatif.predict_table takes `host_path_mpis`. Nothing in analysis lists flavour names.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class FlavourFacts:
    # flavour → who runs Horovod's allreduce beside the compute under it, as the step's split names it
    # ("Open MPI's threads": the MPI library's progress and polling threads, or Gloo's)
    threads: Mapping[str, str]
    # the flavours, most preferred first, when the 1-worker cell that stands in for X(1) differs in its flavour
    stand_in_order: tuple[str, ...]

    def threads_of(self, mpi: object) -> str:
        """The words for a flavour; a value no registered flavour has (a record imported from elsewhere) is named
        as it stands."""
        return self.threads.get(str(mpi), f"{mpi}'s threads")
