"""The small interface every backend implements: where cells run (local, Slurm, Azure ML) — not how processes
start, which is the launcher's job."""
from __future__ import annotations

from typing import Any, Protocol

from bench.backends.outcome import Outcome
from bench.cell import PlannedCell
from bench.launch import Rendered


class Backend(Protocol):
    name: str

    def reach_reason(self, cell: dict[str, Any], nodes: int) -> str | None:
        """Why this backend cannot run the cell (None if it can)."""

    @classmethod
    def from_settings(cls, settings: Any, results_dir: Any, timeout_s: float | None = None) -> "Backend":
        """Built from the matrix's `backend` section; `timeout_s` (from --timeout) overrides its limit."""

    def check(self, planned: list[PlannedCell]) -> None:
        """Optional: the backend's preconditions for `run` (tools, a cluster that answers, a workspace), checked
        before anything is written; raises BenchInputError with one line."""

    def prepare(self, planned: list[PlannedCell], say: Any = print) -> None:
        """One-time work before the first cell (make a sample data set, check the cluster is reachable)."""

    def render(self, planned: PlannedCell, run_id: str, job: int = 0) -> Rendered:
        """The exact argv and env the cell's job will be started with."""

    def describe(self, planned: PlannedCell, run_id: str) -> dict[str, Any]:
        """What `plan --show-commands` shows and its JSON carries: JSON-able parts such as "argv", "env", or a
        whole document ("sbatch", "job_yaml")."""

    def submit(self, planned: PlannedCell, run_id: str, job: int = 0) -> Any:
        """Start one job (of the cell's `jobs`). The handle it returns must carry `rendered`, the Rendered it started:
        the runner stores that argv and env with the cell's records."""

    def poll(self, handle: Any) -> bool:
        """True once the cell has finished (or was stopped)."""

    def collect(self, handle: Any) -> Outcome: ...

    def cancel(self, handle: Any) -> None: ...
