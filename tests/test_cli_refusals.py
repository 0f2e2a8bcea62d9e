"""Bad input to the options the reading verbs share (`--format`, `--where`, `--cell`) is refused the same way
everywhere: one line on stderr, `bench: error: ` and the option with what is wrong, exit 2, nothing on stdout and
nothing written. `--where` is one parser and one filter (bench/cells/selection.py) for plan, run, report and status,
so the same bad selection reads the same in all four. And every verb that prints a table hands a reader that went
away (`bench status | head -1`) to bench.cli the same way: exit 141, nothing on stderr.

(tests/test_refusals.py's REFUSALS is the worker code's refusals, read from models/; the CLI's are here.)"""
from __future__ import annotations

import contextlib
import io
import os
import sys

import pytest

from bench.cli import EXIT_PIPE, main
from bench.store import Store
from tests.conftest import TINY_WORKLOAD
from tests.test_regress import store_run

MATRIX = f"name: t\n{TINY_WORKLOAD}\naxes: {{gpu: [cpu], mpi: [gloo], gpus: [1, 2]}}\n"
UNKNOWN = "--where: unknown key 'nosuchkey' (known: cell_id, "

# argv (in a folder holding m.yaml and results/bench.db, a store of two runs of two cells) → words stderr's one line
# must hold.
REFUSALS = {
    ("check", "--baseline", "base", "--candidate", "slow", "--format", "nope"): "--format: invalid choice: 'nope'",
    ("history", "--format", "nope"): "--format: invalid choice: 'nope'",
    ("model", "--validate", "--format", "nope"): "--format: invalid choice: 'nope'",
    ("ab", "m.yaml", "--b", "cpus=0.5", "--format", "nope"): "--format: invalid choice: 'nope'",
    ("status", "--format", "nope"): "--format: invalid choice: 'nope'",
    ("check", "--baseline", "base", "--format", "json", "--github"): "--format json prints one JSON document",
    ("ab", "m.yaml", "--b", "cpus=0.5", "--format", "json", "--github"): "--format json prints one JSON document",
    ("status", "--cell", "fedcba987654"): "--cell: no cell 'fedcba987654' in the store",
    ("model", "--layouts", "--gpu", "H999"): "--gpu: unknown GPU 'H999'",
    ("model", "--layouts", "--nodes", "8", "--layout", "dp_shard=8,tp=4"): "not the world size 64",
    ("model", "--layouts", "--layout", "dp_shard=-8"): "--layout: layout: dp_shard must be a positive whole number",
    ("model", "--layouts", "--model", "llama9"): "--model: unknown model 'llama9'",
    ("model", "--layouts", "--nodes", "0"): "--nodes: must be a positive whole number",
    ("model", "--layouts", "--layout", "dp_shard=4", "--emit-matrix", "out.yaml"): "not the world size 8",
    ("plan", "m.yaml", "--where", "nosuchkey=1"): UNKNOWN,
    ("run", "m.yaml", "--where", "nosuchkey=1"): UNKNOWN,
    ("report", "--where", "nosuchkey=1"): UNKNOWN,
    ("status", "--where", "nosuchkey=1"): UNKNOWN,
    ("plan", "m.yaml", "--where", "gpus"): "--where: 'gpus' is not key=value",
    ("run", "m.yaml", "--where", "gpus=two"): "--where: 'gpus' takes a whole number, got 'two'",
    ("report", "--where", "ib=maybe"): "--where: 'ib' takes true/false (on/off), got 'maybe'",
    ("status", "--where", "gpu="): "--where: empty value for 'gpu'",
    ("plan", "m.yaml", "--where", "gpu=H100"): "--where: 'gpu=H100' matches none of the matrix's 2 cells",
    ("run", "m.yaml", "--where", "gpu=H100"): "--where: 'gpu=H100' matches none of the matrix's 2 cells",
    ("report", "--where", "gpu=H100"): "--where: 'gpu=H100' matches none of the 2 cells in the store",
    ("status", "--where", "gpu=H100"): "--where: 'gpu=H100' matches none of the 2 cells with a complete run",
}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "m.yaml").write_text(MATRIX, encoding="utf-8")
    with Store(tmp_path / "results" / "bench.db") as store:
        store_run(store, "base", {1: [1.0, 1.01, 0.99], 2: [1.0, 1.01, 0.99]})
        store_run(store, "slow", {1: [1.0, 0.99, 1.01], 2: [0.8, 0.79, 0.81]})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def files(folder) -> dict[str, int]:
    """Every file under the folder with when it was last written (a reader's SQLite may come and go beside it)."""
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def bench(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv", list(REFUSALS), ids=" ".join)
def test_bad_input_is_one_line_exit_2_and_nothing_written(argv, folder):
    before = files(folder)
    code, out, err = bench(*argv)
    assert (code, out) == (2, ""), err
    (line,) = err.splitlines()
    assert line.startswith("bench: error: ") and REFUSALS[argv] in line, line
    assert files(folder) == before  # nothing made, nothing touched (the store is opened read-only)


def test_one_bad_selection_reads_the_same_in_every_verb_that_takes_where(folder):
    for bad in ("nosuchkey=1", "gpus=two", "gpus"):
        lines = {bench(*verb, "--where", bad)[2] for verb in (("plan", "m.yaml"), ("run", "m.yaml"), ("report",),
                                                              ("status",))}
        assert len(lines) == 1, lines


def test_where_selects_the_same_cells_in_plan_and_status(folder):
    import json

    code, out, _ = bench("plan", "m.yaml", "--where", "gpus=2", "--format", "json")
    assert code == 0 and [c["gpus"] for c in json.loads(out)] == [2]
    code, out, _ = bench("status", "--where", "gpus=2", "--format", "json")
    assert code == 0 and [r["gpus"] for r in json.loads(out)] == [2]


# --- a reader that goes away ---------------------------------------------------------------------------------------

@contextlib.contextmanager
def closed_stdout():
    """stdout a pipe whose reader has gone (every write raises BrokenPipeError: Python ignores SIGPIPE); yields what
    the verb says on stderr. Set in the test itself: pytest puts its own capture back between a fixture and the test."""
    read, write = os.pipe()
    os.close(read)
    pipe = open(write, "w", buffering=1, encoding="utf-8")  # line-buffered: the first line meets the closed pipe
    err = io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = pipe, err
    try:
        yield err
    finally:
        sys.stdout, sys.stderr = saved
        with contextlib.suppress(OSError):
            pipe.close()


@pytest.mark.parametrize("argv", [
    ("plan", "m.yaml"), ("plan", "m.yaml", "--all"), ("status",), ("status", "--format", "md"),
    ("check", "--baseline", "base", "--candidate", "slow"), ("history",), ("history", "--format", "json"),
    ("model", "--validate"),
], ids=" ".join)
def test_a_closed_pipe_ends_every_table_verb_with_141(argv, folder):
    with closed_stdout() as err:
        code = main(list(argv))
    assert (code, err.getvalue()) == (EXIT_PIPE, "")


def test_the_pipe_check_can_fail(folder, monkeypatch):
    """A verb that caught the closed pipe itself (as `plan` did: exit 0) is told apart."""
    import bench.commands.model as model

    def swallows(args):
        try:
            print("the first line")
        except BrokenPipeError:
            pass
        return 0

    monkeypatch.setattr(model, "run", swallows)
    with closed_stdout():
        assert main(["model", "--validate"]) == 0
