"""Local backend: each cell is a real launcher process group (mpirun or horovodrun) on this machine."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.backends.base import Backend
from bench.backends.shared import launcher_job
from bench.backends.shared.cell_launch import CellLaunch, Placement, launch_for, threads_for
from bench.backends.shared.data_reach import imagenet_reach_reason, make_imagenet_sample_if_needed
from bench.backends.shared.launcher_job import Handle
from bench.backends.shared.outcome import Outcome, classify
from bench.backends.shared.process import kill_family
from bench.facts.catalog import catalog
from bench.launch import Rendered
from bench.launch.bindings import binding_reason
from bench.planning.cell import PlannedCell


@functools.cache
def local_gpus() -> tuple[str, ...]:
    if not shutil.which("nvidia-smi"):
        return ()
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(line.strip() for line in out.splitlines() if line.strip())


class LocalBackend(Backend):
    name = "local"
    # Before a co-located multi-worker CPU cell, the compute probe for its settings
    # (bench/backends/local/compute_probe.py); `bench run --no-probe` turns it off (the cells' expected values then fall
    # back to N × the 1-worker rate).
    probe_compute = True

    def __init__(self, results_dir: Path, timeout_s: float, python: str = sys.executable,
                 imagenet_dir: str | None = None, imagenet_sample=None):
        self.results_dir = Path(results_dir).resolve()  # workers may run elsewhere: no relative paths
        self.timeout_s = timeout_s
        self.python = python
        self.imagenet_dir = Path(imagenet_dir).resolve() if imagenet_dir else None
        self.imagenet_sample = imagenet_sample
        self._probed: dict = {}  # cell_id → the compute probe its run rests on (before_cell → after_cell)
        self._engines: dict = {}  # cell_id → (its engine probe, the compute probe's step), likewise
        # cell_id → the engine probe its launch runs first (before_cell → submit, after_cell)
        self._first: dict = {}

    @classmethod
    def from_settings(cls, settings, results_dir: Path, timeout_s: float | None = None) -> "LocalBackend":
        return cls(results_dir, timeout_s or settings.timeout_s, imagenet_dir=settings.imagenet_dir,
                   imagenet_sample=settings.imagenet_sample)

    def prepare(self, planned: list[PlannedCell], say=print) -> None:
        """Makes the generated ImageNet sample if runnable cells need it and the matrix asked for one."""
        make_imagenet_sample_if_needed(planned, self.imagenet_dir, self.imagenet_sample, say)

    # --- planning -----------------------------------------------------------------------------------------------
    def reach_reason(self, cell: dict[str, Any], nodes: int) -> str | None:
        if reason := imagenet_reach_reason(cell, self.imagenet_dir, self.imagenet_sample):
            return reason
        if nodes > 1:
            return f"needs {nodes} nodes; the local backend runs on this one machine"
        sku = catalog()[cell["gpu"]]
        workers = cell["gpus"]
        if sku.is_cpu:
            cores = os.cpu_count() or 1
            if workers > cores:
                return f"{workers} CPU workers would oversubscribe this machine's {cores} cores"
        else:
            gpus = local_gpus()
            if not gpus:
                return f"{cell['gpu']} cell needs {workers}x {sku.gpu_model}; this machine has no GPU"
            matching = [g for g in gpus if sku.is_this_gpu(g)]
            if len(matching) < workers:
                return f"{cell['gpu']} cell needs {workers}x {sku.gpu_model}; this machine has {len(gpus)}x {gpus[0]}"
        # what the installed build serves: the worker would refuse a Horovod binding its environment lacks
        return binding_reason(cell, self.python)

    def launch(self, planned: PlannedCell, run_id: str, job: int = 0) -> CellLaunch:
        """Every worker on this machine; CPU workers share its cores."""
        return launch_for(planned, run_id, job, where=Placement(self.results_dir, self.python,
                                                                cores=os.cpu_count() or 1,
                                                                data_dir=self.imagenet_dir))

    def render(self, planned: PlannedCell, run_id: str, job: int = 0) -> Rendered:
        return self.launch(planned, run_id, job).render()

    def describe(self, planned: PlannedCell, run_id: str) -> dict[str, Any]:
        r = self.render(planned, run_id)
        return {"argv": list(r.argv), "env": r.env}

    # --- running ------------------------------------------------------------------------------------------------
    def before_cell(self, planned: PlannedCell):
        """The probes a co-located multi-worker CPU cell's expected value needs: the compute probe, and the engine
        probe where the worker has one; each the stored one while it stands (same settings, same machine, under 7
        days old), else measured: the compute probe now, the engine probe first in the cell's own launch. None for
        every other cell."""
        from bench.analysis.probe import colocated
        from bench.backends.local import engine_probe
        from bench.backends.local.compute_probe import ensure

        self._first.pop(planned.cell_id, None)  # a launch that failed before after_cell leaves its own
        if not self.probe_compute or not colocated({**planned.cell, "nodes": planned.nodes}):
            return None
        threads = threads_for(planned, os.cpu_count() or 1)
        outcome = ensure(planned, self.results_dir, self.python, threads, self.imagenet_dir)
        self._probed[planned.cell_id] = outcome.result  # what after_cell compares the cell with
        if not engine_probe.probed(planned.cell):
            return outcome
        # and the cell's own launch with its engine up and no gradient traffic: what its ranks compute beside the
        # engine, measured apart from the cell's windows (bench/backends/local/engine_probe.py): the stored one, or
        # one run first in the cell's launch (submit), its outcome told after the cell (after_cell)
        step_s = outcome.result.step_s if outcome.result is not None else None
        engine = engine_probe.first_or_stored(planned, self.results_dir, step_s=step_s)
        if isinstance(engine, engine_probe.First):
            self._first[planned.cell_id] = engine
            self._engines[planned.cell_id] = (None, step_s)
            return outcome
        self._engines[planned.cell_id] = (engine.result, step_s)
        return [outcome, engine]

    def after_cell(self, planned: PlannedCell, run_id: str, records: list[dict[str, Any]]):
        """After a co-located cell measured: its parts beyond the probe, kept beside the probe for later runs; the
        engine probe its launch ran first, read and stored; and where the cell ran faster than its engine probe
        allowed, the engine probe measured again for it, up to engine_probe.AGAIN_AT_MOST times until it agrees, or
        once where it ran slower with nothing outside the cell named (their outcomes returned, to be shown as
        probes'; None otherwise)."""
        from bench.analysis.expected_probes import ran_faster_than_probe, ran_slower_than_probe
        from bench.analysis.outside import beside_cell
        from bench.backends.local import engine_probe
        from bench.backends.local.compute_probe import record_costs

        probe = self._probed.pop(planned.cell_id, None)  # set by before_cell for co-located cells only
        if probe is not None:
            record_costs(planned, self.results_dir, run_id, records, probe)
        ep, step_s = self._engines.pop(planned.cell_id, (None, None))
        outcomes = []
        first = self._first.pop(planned.cell_id, None)
        if first is not None and first.path is not None:  # run first in the cell's launch: now read and stored
            outcomes.append(engine_probe.from_first(planned, self.results_dir, first))
            ep = outcomes[-1].result
        rates = [float(r["samples_per_sec"]) for r in records if r.get("samples_per_sec")]
        starts = [float(r["start_unix"]) for r in records if r.get("start_unix")]
        if not starts:
            return outcomes or None
        beside = beside_cell([r.get("per_rank") or [] for r in records])
        for i in range(engine_probe.AGAIN_AT_MOST):
            off = ran_faster_than_probe(planned.cell, planned.cell_id, rates, ep, min(starts))
            # slower: once, the first time only (a second launch that agrees with the first decides the verdict)
            off = off or (ran_slower_than_probe(planned.cell, planned.cell_id, rates, ep, min(starts), beside)
                          if i == 0 else None)
            if off is None:
                break
            outcomes.append(engine_probe.again(planned, self, self.results_dir, off, min(starts),
                                               min(self.timeout_s, engine_probe.ENGINE_TIMEOUT_S), step_s=step_s))
            ep = outcomes[-1].result
            if off.gap > 0:
                break
        return outcomes or None

    def submit(self, planned: PlannedCell, run_id: str, job: int = 0) -> Handle:
        from bench.backends.local import engine_probe

        launch = self.launch(planned, run_id, job)
        first, extra = self._first.get(planned.cell_id), {}
        if first is not None and first.path is None:  # the cell's first job runs its engine probe first
            first.path = launch.dir / engine_probe.FIRST_FILE
            first.path.unlink(missing_ok=True)
            extra = engine_probe.first_env(first)
        return launcher_job.start(planned, launch.render(), launch.dir, self.timeout_s, launch.runtime.bin_dirs,
                                  extra_env=extra)

    def poll(self, handle: Handle) -> bool:
        return launcher_job.poll(handle, launcher_job.kill)

    def cancel(self, handle: Handle) -> None:
        handle.stopped = handle.stopped or "interrupted"
        launcher_job.kill(handle)

    def collect(self, handle: Handle) -> Outcome:
        end = launcher_job.finish(handle, launcher_job.kill)
        outcome = classify(end, handle.planned.cell["repeats"], self.timeout_s, "the process group was killed")
        outcome.log_path = handle.cell_dir / "log.txt"
        return outcome

    def sweep(self, token: str) -> int:
        """Kill whatever still carries a cell token: the jobs of a controller that died (a stale claim)."""
        return kill_family(None, token)
