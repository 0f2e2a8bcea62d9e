"""Run a plan on a backend: one cell at a time, records into the store as each cell ends, failures kept too."""
from __future__ import annotations

import statistics
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape

from bench.backends.base import Backend
from bench.backends.shared.outcome import Outcome
from bench.core.errors import BenchInputError, RunFailed
from bench.core.redact import redact_argv, redact_env, redact_text
from bench.execution.progress import CellProgress
from bench.facts.catalog import sku_of_gpu
from bench.launch.evidence import parse_transport
from bench.planning.cell import PlannedCell
from bench.records.schema import Record, parse_record
from bench.records.transport import verdict
from bench.store import Store, StoreError

POLL_S = 0.2


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


@dataclass
class RunSummary:
    run_id: str
    ran: int = 0
    ok: int = 0
    failed: list[tuple[PlannedCell, str]] = field(default_factory=list)
    resumed: int = 0
    skipped: int = 0
    not_retried: int = 0  # runnable cells left alone by --skip-failed: their last attempt failed
    cells_s: float = 0.0  # wall time of the cells run (their jobs, from submit to the last record stored)
    probe_s: float = 0.0  # wall time of the compute probes measured before them (bench/backends/local/compute_probe.py)
    probes_measured: int = 0
    probes_reused: int = 0
    probes_failed: int = 0

    @property
    def exit_code(self) -> int:
        # A cell left failed by --skip-failed still stands failed: the matrix is not measured.
        return 1 if self.failed or self.not_retried else 0


def transport_of(planned: PlannedCell, outcome: Outcome) -> dict[str, Any]:
    """Requested fabric (the `ib` axis) next to the one the job's log shows it used, and their verdict."""
    requested = "ib" if planned.cell["ib"] else "tcp"
    found = parse_transport(_read_log_head(outcome.log_path), planned.cell["mpi"], not planned.sku.is_cpu,
                            planned.nodes, planned.cell["engine"])
    return {"requested_transport": requested, "effective_transport": found.effective,
            "transport_verdict": verdict(requested, found.effective, nodes=planned.nodes).value,
            "transport_evidence": redact_text(found.evidence)}


def _read_log_head(path, limit: int = 4 * 1024 * 1024) -> str:
    """Transports are chosen and printed at start-up: the head of the log is where they are."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""


def records_for(planned: PlannedCell, run_id: str, job: int, outcome: Outcome, argv: list[str],
                env: dict[str, str], transport: dict[str, Any] | None = None) -> tuple[list[Record], Outcome]:
    """Worker dicts → validated Records, plus one failure record if the cell did not finish cleanly.

    A record that fails validation turns the cell into a failure: a wrong number is worse than none."""
    around = {"run_id": run_id, "cell_id": planned.cell_id, "job": job, "cell": planned.cell, "nodes": planned.nodes,
              "command": redact_argv(argv), "launch_env": redact_env(env), **(transport or {})}
    records: list[Record] = []
    problem = None
    for i, raw in enumerate(outcome.records):
        if raw.get("cell_id") != planned.cell_id or raw.get("run_id") != run_id:
            problem = f"record {i} belongs to another cell or run"
            break
        if isinstance(raw.get("gpu"), dict):  # the catalogue SKU of the GPU the worker named
            raw = {**raw, "gpu": {**raw["gpu"], "sku": sku_of_gpu(raw["gpu"].get("name"))}}
        try:
            record = parse_record({**raw, **around}, where=f"record {i}")
        except BenchInputError as e:
            problem = f"invalid record: {e}"
            break
        if record.world_size != planned.cell["gpus"]:
            problem = f"record {i}: {record.world_size} workers ran, the cell asked for {planned.cell['gpus']}"
            break
        records.append(record)
    if problem:
        outcome = Outcome("failed", outcome.records, problem, outcome.log_tail, outcome.returncode)
    if outcome.status != "ok":
        records.append(Record.model_validate({**around, "repeat": len(records), "status": outcome.status,
                                              "error": redact_text(outcome.reason),
                                              "log_tail": redact_text(outcome.log_tail)}))
    return records, outcome


class StoreWriteFailed(RunFailed):
    """The store refused a cell's records (disk full, read-only, I/O error): the cell is not recorded as done."""


HEARTBEAT_S = 5.0  # well inside the claim lease (store.CLAIM_LEASE_S)
BUSY_WAIT_S = 1.0  # every remaining cell is claimed by another live run: look again after this


def run_plan(planned: list[PlannedCell], backend: Backend, store: Store, *, run_id: str, rerun: bool = False,
             skip_failed: bool = False, console: Console | None = None, live: bool | None = None) -> RunSummary:
    """Each cell is claimed in the store before it runs, so two runs on one store never measure the same cell at
    once: a cell another live run holds is put back in the queue and looked at again later (measured by then:
    counted as resumed; abandoned by a dead run: claimed, its leftover processes swept, and run here).

    skip_failed: cells whose last attempt failed or timed out are not tried again (a cell that hangs until its
    timeout would cost that timeout on every resume). With rerun every cell runs; the CLI refuses the two together.

    live: rich's progress bar (a terminal: the default where the console's file is one); otherwise each finished
    cell's line ends with how far the run is (bench/execution/progress.py)."""
    console = console or Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 120)
    live = _is_terminal(console) if live is None else live
    summary = RunSummary(run_id)
    done = set() if rerun else store.completed_cells()
    runnable = [p for p in planned if p.runnable]
    summary.skipped = len(planned) - len(runnable)
    todo = [p for p in runnable if p.cell_id not in done]
    summary.resumed = len(runnable) - len(todo)
    if summary.resumed:
        console.print(f"resume: {summary.resumed} cell(s) already measured in the store, not rerun "
                      f"(use --rerun to measure again)")
    if skip_failed and not rerun:
        failed_before = store.failed_cells()
        held = [p for p in todo if p.cell_id in failed_before]
        todo = [p for p in todo if p.cell_id not in failed_before]
        summary.not_retried = len(held)
        for p in held:
            console.print(f"not retried {p.label()}: its last attempt (run {failed_before[p.cell_id]}) failed; "
                          f"--skip-failed  {p.cell_id}", highlight=False)
    queue = deque(todo)
    width = max((len(p.label()) for p in todo), default=0)  # the labels line up, however long the run's are
    told_busy: set[str] = set()
    idle = 0  # cells looked at since the last one that could be claimed
    with CellProgress(console, len(todo), live) as progress:
        while queue:
            cell = queue.popleft()
            claim = store.claim(cell.cell_id, run_id, skip_done=not rerun)
            if claim.status == "busy":
                if cell.cell_id not in told_busy:
                    told_busy.add(cell.cell_id)
                    console.print(f"wait   {cell.label():<{width}} being measured by run {claim.holder}; back to it "
                                  f"later  {cell.cell_id}", highlight=False)
                queue.append(cell)
                idle += 1
                if idle >= len(queue):
                    time.sleep(BUSY_WAIT_S)
                    idle = 0
                continue
            idle = 0
            if claim.status == "done":
                summary.resumed += 1
                console.print(f"resume {cell.label():<{width}} measured meanwhile by another run  {cell.cell_id}"
                              f"{progress.finished(measured=False)}", highlight=False)
                continue
            if claim.stale_token:
                swept = backend.sweep(claim.stale_token)
                if swept:
                    console.print(f"swept {swept} leftover process(es) of a dead run's claim on {cell.cell_id}")
            progress.running(f"cell {len(todo) - len(queue)}/{len(todo)} {cell.label()}")
            try:
                _probe(cell, backend, summary, console, width)
                _run_cell(cell, backend, store, run_id, summary, console, progress, width)
            finally:
                try:
                    store.release(cell.cell_id, run_id)
                except StoreError:
                    pass  # the claim's owner is this process: once it exits, the claim is free anyway
    return summary


def _is_terminal(console: Console) -> bool:
    """Whether the console writes to a terminal (not rich's is_terminal, which FORCE_COLOR makes true in a CI log)."""
    try:
        return console.file.isatty()
    except (AttributeError, ValueError):
        return False


def _probe(cell: PlannedCell, backend: Backend, summary: RunSummary, console: Console, width: int = 0) -> None:
    """The backend's preparation of one cell (the local backend's compute probe; none elsewhere), counted apart
    from the cells' time."""
    for outcome in _listed(backend.before_cell(cell)):
        _count_probe(outcome, summary, cell, console, width)


def _listed(outcomes) -> list:
    """A backend's probe outcomes (before_cell, after_cell: one, a list, or None) as a list."""
    return outcomes if isinstance(outcomes, list) else [outcomes] if outcomes is not None else []


def _count_probe(outcome, summary: RunSummary, cell: PlannedCell, console: Console, width: int) -> None:
    summary.probe_s += outcome.seconds
    if outcome.reused:
        summary.probes_reused += 1
    elif outcome.result is None:
        summary.probes_failed += 1
    else:
        summary.probes_measured += 1
    console.print(f"probe  {cell.label():<{width}} {escape(outcome.note)}", highlight=False)


def _after(cell: PlannedCell, backend: Backend, run_id: str, records: list[Record], console: Console):
    """The backend's bookkeeping after a measured cell (the local backend keeps what a co-located cell measured
    beyond its compute probe, and measures an engine probe again that the cell disagreed with; none elsewhere):
    those probes' outcomes, or None. Never fails the run: the records are stored already."""
    try:
        return backend.after_cell(cell, run_id, [r.model_dump(mode="json") for r in records if r.status == "ok"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        console.print(f"[yellow]  not kept beside the compute probe[/]: {escape(str(e))}", highlight=False)
        return None


def _run_cell(cell: PlannedCell, backend: Backend, store: Store, run_id: str, summary: RunSummary,
              console: Console, progress: CellProgress, width: int = 0) -> None:
    started = time.monotonic()
    records: list[Record] = []
    for job in range(cell.cell["jobs"]):
        try:
            handle = backend.submit(cell, run_id, job)
        except OSError as e:  # the launcher is not installed, or cannot be executed: this cell fails, others go on
            what = e.filename or "the launcher"
            outcome = Outcome("failed", [], f"could not start {what}: {e.strerror or e}")
            rendered = backend.render(cell, run_id, job)
            failed, outcome = records_for(cell, run_id, job, outcome, list(rendered.argv), rendered.env,
                                          transport_of(cell, outcome))
            _write(store, cell, failed)
            break
        token = getattr(handle, "token", None)
        _heartbeat(store, cell, run_id, token)
        beat = time.monotonic()
        try:
            while not backend.poll(handle):
                time.sleep(POLL_S)
                if time.monotonic() - beat > HEARTBEAT_S:
                    _heartbeat(store, cell, run_id, token)
                    beat = time.monotonic()
            outcome = backend.collect(handle)
        except KeyboardInterrupt:
            backend.cancel(handle)
            _store_outcome(cell, run_id, job, backend.collect(handle), handle, store)
            raise
        job_records, outcome = _store_outcome(cell, run_id, job, outcome, handle, store)
        records += job_records
        if outcome.status != "ok":
            break  # the cell has failed; its remaining jobs would not change that
    summary.ran += 1
    elapsed = time.monotonic() - started
    if outcome.status == "ok":
        summary.ok += 1
        again = _after(cell, backend, run_id, records, console)
        # an engine probe run first in the cell's launch is counted as a probe's time, not the cell's
        elapsed -= sum(o.seconds for o in _listed(again) if getattr(o, "in_cell_launch", False))
        summary.cells_s += elapsed
        console.print(f"[green]ok[/]     {cell.label():<{width}} {_headline(records)}  (median of {len(records)}, "
                      f"{elapsed:.0f} s)  {cell.cell_id}  via {records[0].effective_transport}{progress.finished()}")
        for outcome in _listed(again):
            _count_probe(outcome, summary, cell, console, width)
        if any(r.transport_verdict == "mismatch" for r in records):
            console.print(f"[yellow]  transport mismatch[/]: asked {records[0].requested_transport}, the log "
                          f"shows {records[0].effective_transport} ({records[0].transport_evidence})",
                          highlight=False)
    else:
        summary.cells_s += elapsed
        reason = redact_text(outcome.reason) or outcome.status
        summary.failed.append((cell, reason))
        console.print(f"[red]{outcome.status:<6}[/] {cell.label():<{width}} {escape(reason)}  {cell.cell_id}"
                      f"{progress.finished()}", highlight=False)


def _headline(records: list[Record]) -> str:
    """The figure a finished cell is summed up by: its rate in the unit users quote (img/s, tokens/s), or a
    collective's bus bandwidth at its largest size."""
    if records[0].collective:
        top = [r.collective[-1] for r in records]
        busbw = statistics.median(t.busbw_bytes_per_s for t in top)
        return f"{busbw / 1e9:8.3f} GB/s busbw at {top[0].bytes:,} B"
    from bench.cells.units import IMAGES, format_rate, unit_of_cell

    unit = unit_of_cell(records[0].cell) or IMAGES
    return format_rate(statistics.median(r.samples_per_sec for r in records), unit, width=10)


def _heartbeat(store: Store, cell: PlannedCell, run_id: str, token: str | None) -> None:
    try:
        store.heartbeat(cell.cell_id, run_id, token)
    except StoreError:
        pass  # a missed beat only shortens the claim; the records' own write reports a broken store


def _store_outcome(cell: PlannedCell, run_id: str, job: int, outcome: Outcome, handle: Any, store: Store):
    records, outcome = records_for(cell, run_id, job, outcome, list(handle.rendered.argv), handle.rendered.env,
                                   transport_of(cell, outcome))
    _write(store, cell, records)
    return records, outcome


def _write(store: Store, cell: PlannedCell, records: list[Record]) -> None:
    try:
        store.write_many(records)
    except (StoreError, OSError) as e:
        reason = e.reason if isinstance(e, StoreError) else e
        raise StoreWriteFailed(f"{cell.label()} ({cell.cell_id}): the store refused its records ({reason}); the cell "
                               f"is not recorded as done and runs again next time") from None
