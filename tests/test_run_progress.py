"""`bench run`'s progress where no terminal shows rich's live bar (a pipe, a CI log): each finished cell's line ends
with how far the run is, `[k/N, m:ss elapsed, ~m:ss left]`, one line per cell as before; on a terminal the bar, and
the lines as they were. The runner is driven here through a backend whose jobs finish at once with records from the
worker-side meter (tests/factories.py), one of them failing, into a real store."""
from __future__ import annotations

import io
import re
from types import SimpleNamespace

import pytest
from rich.console import Console

from bench.backends.base import Backend
from bench.backends.shared.outcome import Outcome
from bench.execution import progress as progress_module
from bench.execution.progress import CellProgress, clock
from bench.execution.runner import run_plan
from bench.launch.spec import Rendered
from bench.planning.matrix import load_matrix_text
from bench.planning.plan import plan_cells
from bench.store import Store
from tests.factories import record

SUFFIX = re.compile(r"  \[(\d+)/(\d+), (\d+:\d\d) elapsed, ~(\d+:\d\d) left\]$")


class InstantBackend(Backend):
    """Every job ends as soon as it starts: the 4-worker cell fails, the others leave two ok windows each."""
    name = "instant"

    def submit(self, planned, run_id, job=0):
        return SimpleNamespace(planned=planned, run_id=run_id, rendered=Rendered(("worker",), {}), token=None)

    def poll(self, handle):
        return True

    def collect(self, handle):
        p = handle.planned
        if p.cell["gpus"] == 4:
            return Outcome("failed", [], "the worker fell over")
        return Outcome("ok", [{**record(run_id=handle.run_id, repeat=i, **p.cell), "cell_id": p.cell_id}
                              for i in range(2)])


def run_lines(tmp_path, live: bool) -> list[str]:
    cells = plan_cells(load_matrix_text("name: t\naxes: {gpu: [cpu], mpi: [gloo], gpus: [1, 2, 4]}\n").cells(), None)
    out = io.StringIO()
    console = Console(file=out, width=120, soft_wrap=True, color_system=None)
    with Store(tmp_path / "bench.db") as store:
        store.begin_run("r1", matrix_name="t", matrix_path="m.yaml", backend="instant", host="h", bench_version="0",
                        plan={})
        summary = run_plan(cells, InstantBackend(), store, run_id="r1", console=console, live=live)
    assert (summary.ok, len(summary.failed)) == (2, 1)
    return out.getvalue().splitlines()


def test_off_a_terminal_each_finished_cells_line_says_how_far_the_run_is(tmp_path):
    lines = [line for line in run_lines(tmp_path, live=False) if line.startswith(("ok ", "failed "))]
    assert len(lines) == 3, lines
    suffixes = [SUFFIX.search(line) for line in lines]
    assert all(suffixes), lines
    assert [(m.group(1), m.group(2)) for m in suffixes] == [("1", "3"), ("2", "3"), ("3", "3")]
    assert suffixes[-1].group(4) == "0:00"  # nothing left after the last cell
    assert lines[2].startswith("failed ") and "the worker fell over" in lines[2]
    assert not any("━" in line for line in run_lines(tmp_path / "again", live=False))  # no bar drawn at the end


def test_on_a_terminal_the_bar_keeps_the_lines_as_they_were(tmp_path):
    lines = run_lines(tmp_path, live=True)
    finished = [line for line in lines if line.startswith(("ok ", "failed "))]
    assert len(finished) == 3 and not any(SUFFIX.search(line) for line in finished)
    assert re.search(r"ok +cpu/pytorch/gloo/ib=off/1w fp32 .* via \S+$", finished[0]), finished[0]


def test_time_left_is_the_time_per_measured_cell_times_the_cells_to_go(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    with CellProgress(None, 4, live=False) as p:
        now[0] = 130.0
        assert p.finished() == "  [1/4, 0:30 elapsed, ~1:30 left]"
        assert p.finished(measured=False) == "  [2/4, 0:30 elapsed, ~1:00 left]"  # another run measured it: no time
        now[0] = 3700.0
        assert p.finished() == "  [3/4, 1:00:00 elapsed, ~30:00 left]"


@pytest.mark.parametrize("seconds, text", [(0, "0:00"), (59.6, "1:00"), (61, "1:01"), (3600, "1:00:00"),
                                           (3725, "1:02:05"), (-3, "0:00")])
def test_clock(seconds, text):
    assert clock(seconds) == text
