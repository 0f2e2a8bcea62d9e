"""How far a run is, as `bench run` shows it: on a terminal rich's live bar (cells done, elapsed, time left); in a
pipe or a CI log, where a live bar shows nothing until it ends, the same figures at the end of each finished cell's
line, `[3/12, 4:05 elapsed, ~12:15 left]`, so a log read halfway says as much as the bar."""
from __future__ import annotations

import time

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def clock(seconds: float) -> str:
    """m:ss, or h:mm:ss from an hour on."""
    s = max(0, round(seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


class CellProgress:
    """The run's cells done of `total`. `live`: rich's bar on `console` (a terminal); otherwise finished() gives
    the suffix of a cell's line. The time left is the time per cell measured so far (probes included) times the
    cells still to run; cells another run measured meanwhile count as done but took no time."""

    def __init__(self, console, total: int, live: bool):
        self.total, self.live, self.done, self.measured = total, live, 0, 0
        self.started = time.monotonic()
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("cells"),
                             TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console,
                             transient=False) if live else None
        self._task = None

    def __enter__(self) -> CellProgress:
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task("running", total=self.total)
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    def running(self, description: str) -> None:
        """The cell now running, named on the bar."""
        if self._bar is not None:
            self._bar.update(self._task, description=description)

    def finished(self, measured: bool = True) -> str:
        """One more cell done (`measured`: run here, not by another run): "" on a terminal, where the bar moves;
        elsewhere the suffix for its line."""
        self.done += 1
        self.measured += measured
        if self._bar is not None:
            self._bar.advance(self._task)
            return ""
        elapsed = time.monotonic() - self.started
        left = elapsed / self.measured * (self.total - self.done) if self.measured else 0.0
        return f"  [{self.done}/{self.total}, {clock(elapsed)} elapsed, ~{clock(left)} left]"
