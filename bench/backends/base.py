"""The interface every backend implements: where cells run (local, hosts, Slurm, Azure ML, Kubernetes) — not how
processes start, which is the launcher's job (bench/launch/).

`Backend` declares every method and attribute the runner (bench/execution/runner.py) and `bench run`
(bench/commands/run.py) use, each optional hook with its default, so a backend overrides only what it does and
the callers never ask `hasattr`. tests/test_backend_contract.py fails on a call to a name declared nowhere here.
"""
from __future__ import annotations

from typing import Any

from bench.backends.shared.outcome import Outcome
from bench.launch import Rendered
from bench.planning.cell import PlannedCell


class Backend:
    name: str
    # Whether `before_cell` measures the compute probe a co-located cell's expected value rests on; `bench run
    # --no-probe` sets it False. Only the local backend probes.
    probe_compute: bool = False

    # --- built and checked ----------------------------------------------------------------------------------------
    @classmethod
    def from_settings(cls, settings: Any, results_dir: Any, timeout_s: float | None = None) -> "Backend":
        """Built from the matrix's `backend` section; `timeout_s` (from --timeout) overrides its limit."""
        raise NotImplementedError(f"{cls.__name__}: no from_settings")

    def reach_reason(self, cell: dict[str, Any], nodes: int) -> str | None:
        """Why this backend cannot run the cell (None if it can)."""
        return None

    def check(self, planned: list[PlannedCell]) -> None:
        """The backend's preconditions for `run` (tools, a cluster that answers, a workspace), checked before
        anything is written; raises BenchInputError with one line. Default: none."""

    def prepare(self, planned: list[PlannedCell], say: Any = print) -> None:
        """One-time work before the first cell (make a sample data set, check the cluster is reachable)."""

    # --- planning -------------------------------------------------------------------------------------------------
    def render(self, planned: PlannedCell, run_id: str, job: int = 0) -> Rendered:
        """The exact argv and env the cell's job will be started with."""
        raise NotImplementedError(f"backend {self.name}: no render")

    def describe(self, planned: PlannedCell, run_id: str) -> dict[str, Any]:
        """What `plan --show-commands` shows and its JSON carries: JSON-able parts such as "argv", "env", or a
        whole document ("sbatch", "job_yaml")."""
        raise NotImplementedError(f"backend {self.name}: no describe")

    # --- running --------------------------------------------------------------------------------------------------
    def sweep(self, token: str) -> int:
        """Kill what still carries a dead run's cell token (a stale claim's jobs); how many processes it killed.
        Default: nothing to sweep (a scheduler ends its own jobs)."""
        return 0

    def before_cell(self, planned: PlannedCell) -> Any:
        """Work before one cell, counted apart from the cells' time: an outcome with `seconds`, `reused`,
        `result` and `note` (the local backend's compute probe), a list of them (and its engine probe), or None
        when there is none."""
        return None

    def submit(self, planned: PlannedCell, run_id: str, job: int = 0) -> Any:
        """Start one job (of the cell's `jobs`). The handle it returns must carry `rendered`, the Rendered it started:
        the runner stores that argv and env with the cell's records."""
        raise NotImplementedError(f"backend {self.name}: no submit")

    def poll(self, handle: Any) -> bool:
        """True once the cell has finished (or was stopped)."""
        raise NotImplementedError(f"backend {self.name}: no poll")

    def collect(self, handle: Any) -> Outcome:
        raise NotImplementedError(f"backend {self.name}: no collect")

    def cancel(self, handle: Any) -> None:
        raise NotImplementedError(f"backend {self.name}: no cancel")

    def after_cell(self, planned: PlannedCell, run_id: str, records: list[dict[str, Any]]):
        """Bookkeeping after a measured cell, given its ok records as JSON dicts (the local backend keeps what a
        co-located cell measured beyond its probe, and measures an engine probe again that the cell disagreed with:
        that probe's outcome is returned, shown and counted as a probe's). Default: none."""
