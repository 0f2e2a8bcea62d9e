"""What a finished cell is (`Outcome`), and turning what a job left behind into one the same way on every backend:
one ladder (`classify`) from how the job ended (stopped by bench, lost, a scheduler's limit, a process dead on a
node, a non-zero exit) to its records, and the log lines that say why it failed."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Outcome:
    """What a finished cell left behind: worker records (raw dicts) and, if it went wrong, why."""

    status: str  # ok | failed | timeout | interrupted
    records: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None
    log_tail: str | None = None
    returncode: int | None = None
    # The job's combined log, where the backend kept it: the runner reads the transport actually used from it.
    log_path: Path | None = None


@dataclass(frozen=True)
class JobEnd:
    """How a job ended and what it left, as its backend saw it: the input of `classify`."""

    records: list[dict] = field(default_factory=list)
    bad: str | None = None  # why records.jsonl could not be read whole
    log: str = ""  # the end of its log: where the error lines are
    tail: str | None = None  # the log's last lines, kept with the outcome
    rc: int | None = None  # the launcher's (or job's) exit status
    error: str | None = None  # it never ran, or could not be followed: the whole reason, nothing else counts
    stopped: str | None = None  # "timeout" | "interrupted": bench ended it
    lost: str | None = None  # a host (or the scheduler) stopped answering during it: the whole reason
    time_limit: str | None = None  # the scheduler ended it at its own time limit: the whole reason
    failure: str | None = None  # how the backend saw it fail, when not by its exit code alone ("Slurm job 7 FAILED")


def classify(end: JobEnd, repeats: int, timeout_s: float, ended_by: str, hosts: tuple[str, ...] = (),
             per_node: int = 0, fallback: str = "see log.txt") -> Outcome:
    """The ladder, most telling first. `ended_by` says what bench did to end the job ("the process group was
    killed"); `hosts` and `per_node` place a rank the launcher reported dead on its host; `fallback` is the
    reason's end when the log holds no error line."""
    records, tail, rc = end.records, end.tail, end.rc
    if end.error:
        return Outcome("failed", [], end.error)
    if end.stopped == "timeout":
        return Outcome("timeout", records, f"timed out after {timeout_s:g} s; {ended_by}", tail, rc)
    if end.stopped == "interrupted":
        return Outcome("interrupted", records, f"interrupted; {ended_by}", tail, rc)
    if end.lost:
        return Outcome("failed", records, end.lost, tail, rc)
    if end.time_limit:
        return Outcome("timeout", records, end.time_limit, tail, rc)
    failed = end.failure is not None or (rc is not None and rc != 0)
    if failed:
        why = last_error(end.log) or fallback
        died = failed_node(end.log, hosts, per_node) if hosts and end.failure is None else None
        if died:
            return Outcome("failed", records, f"{died[0]}: {died[1]} (exit code {rc}; {ended_by}): {why}", tail, rc)
        how = end.failure or f"exit code {rc}" + (f" (on {', '.join(hosts)})" if hosts else "")
        return Outcome("failed", records, f"{how}: {why}", tail, rc)
    # It ended cleanly: ok only with exactly the records it was asked for, all of them readable.
    if end.bad:
        return Outcome("failed", records, end.bad, tail, rc)
    if len(records) != repeats:
        return Outcome("failed", records, f"expected {repeats} records, got {len(records)}", tail, rc)
    return Outcome("ok", records, None, tail, rc)


# Most telling first: the worker's own words, then a Python exception or an MPI error report, then launcher-level
# complaints. horovodrun prefixes worker lines with "[rank]<stderr>:", hence the leading `.*?`. Consequences are
# not causes: "Horovod has been shut down" is what the healthy ranks say after another rank died.
_ERROR_LINES = (
    re.compile(r"^.*?(bench worker: (?!repeat \d+: [\d.]+ img/s)(?!rank \d+ skipped).*)$"),  # not its progress lines
    re.compile(r"^(?:\[\d+\]<std(?:err|out)>:)?\s*((?!RuntimeError: Horovod detected that)"
               r"(?!.*Horovod has been shut down)\w+(?:\.\w+)*(?:Error|Exception|Interrupt)\b.*"
               r"|.*\*\*\* An error occurred in \S+.*)$"),
    re.compile(r"^(.*Killed.*|.*exited on signal.*|.*signal \d+.*|.*ORTE_ERROR_LOG: .*|.*MPI_ABORT.*)$"),
    re.compile(r"^(.*exited with non-zero status.*)$"),  # the launcher's summary: only when nothing says more
)


def last_error(log: str) -> str | None:
    lines = log.splitlines()
    for pattern in _ERROR_LINES:
        for line in reversed(lines):
            m = pattern.match(line)
            if m:
                return m.group(1).strip()[:300]
    return None


# Where a launcher says a process of the job died (the first one it noticed), by host or by rank:
# Open MPI: "mpirun noticed that process rank 1 with PID 761 on node node2 exited on signal 9 (Killed)."
# Hydra (MPICH, Intel MPI): "=   RANK 1 PID 1700 RUNNING AT node2" / "=   PID 1466 RUNNING AT node2", then
#   "=   KILLED BY SIGNAL: 9 (Killed)" or "=   EXIT CODE: 9"
# horovodrun, Open MPI's exit-status report: "Process name: 1" (or "[[29473,1],1]") then "Exit code: 255"
_DIED_ON_HOST = re.compile(r"process rank (\d+) with PID \d+ on node (\S+) (exited on signal \d+(?: \([^)]*\))?|"
                           r"exited[^.]*)")
_HYDRA_AT = re.compile(r"^=\s+(?:RANK (\d+) )?PID \d+ RUNNING AT (\S+)")
_HYDRA_HOW = re.compile(r"^=\s+(KILLED BY SIGNAL: .*?|EXIT CODE: \d+)\s*$")
_PROCESS_NAME = re.compile(r"^\s*Process name:\s*(?:\[\[\d+,\d+\],(\d+)\]|(\d+))\s*$")
_EXIT_CODE = re.compile(r"^\s*Exit code:\s*(-?\d+)")


def failed_node(log: str, hosts: tuple[str, ...], per_node: int) -> tuple[str, str] | None:
    """(host, what happened) for the first process the launcher reported dead, from its own lines; a rank without
    a host is placed by the launchers' block mapping (ranks per_node*i .. per_node*(i+1)-1 on hosts[i])."""
    lines = log.splitlines()
    for line in lines:
        if m := _DIED_ON_HOST.search(line):
            return m.group(2), f"rank {m.group(1)} {m.group(3).rstrip('. ')}"
    for i, line in enumerate(lines):
        if m := _HYDRA_AT.match(line):
            how = next((h.group(1) for h in map(_HYDRA_HOW.match, lines[i + 1:i + 3]) if h), "")
            how = (f"killed by signal {how.split(':', 1)[1].strip()}" if how.startswith("KILLED") else
                   f"exited with code {how.split(':', 1)[1].strip()}" if how else "terminated badly")
            return m.group(2), f"{f'rank {m.group(1)}' if m.group(1) else 'a process'} {how}"
    for i, line in enumerate(lines):
        if m := _PROCESS_NAME.match(line):
            rank = int(m.group(1) or m.group(2))
            code = next((c.group(1) for c in map(_EXIT_CODE.match, lines[i + 1:i + 3]) if c), "?")
            if per_node > 0 and rank // per_node < len(hosts):
                return hosts[rank // per_node], f"rank {rank} exited with code {code}"
    return None
