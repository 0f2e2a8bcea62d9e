import configparser
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def slow_marks(setup_cfg: Path = ROOT / "setup.cfg") -> tuple[str, ...]:
    """The marks registered in setup.cfg's [tool:pytest] markers: every one is a slow tier that `--fast` (make
    test-fast) leaves out. Read from the file, not config.getini("markers"), which also holds the plugins' own marks
    (timeout, benchmark) that say nothing about speed."""
    parser = configparser.ConfigParser()
    parser.read(setup_cfg, encoding="utf-8")
    lines = parser.get("tool:pytest", "markers", fallback="").splitlines()
    return tuple(line.split(":", 1)[0].strip() for line in lines if line.strip())


def pytest_addoption(parser):
    parser.addoption("--fast", action="store_true",
                     help="leave out every test with a mark registered in setup.cfg (the slow tiers): make test-fast")


# The longest modules of a full run (its --durations), in that order: under pytest-xdist (`make test`'s first phase,
# one test module per worker at a time) they start first, so that one worker is not left running a six-minute module
# while the other has nothing to do. Only the order changes; a module missing from the list starts after these.
LONGEST_FIRST = ("test_framework_grid_tf.py", "test_framework_grid_torch.py", "test_e2e.py", "test_gpu_session.py",
                 "test_collectives.py", "test_faults.py", "test_transformer_cells.py", "test_hosts.py",
                 "test_averaging.py", "test_report.py")


def _longest_first(items: list) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker: the scheduler hands out the modules in this order
        _longest_first(items)
    if not config.getoption("--fast"):
        return
    slow = set(slow_marks())
    left_out = [item for item in items if slow & {m.name for m in item.iter_markers()}]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item not in set(left_out)]


def pytest_configure(config):
    # A run ended by SIGTERM (a CI job's time limit, `timeout`) stops as Ctrl-C does: pytest then runs the fixtures'
    # finalizers, which tear down emulated clusters; Python's default for SIGTERM exits with none of them run.
    from tests.cluster import stop_sigterm_like_ctrl_c

    stop_sigterm_like_ctrl_c()


def pytest_sessionfinish(session, exitstatus):
    # After every finalizer: this session's emulated cluster, should one still be up.
    from tests.cluster import down_own

    down_own()


# The verbs that only read and write files (the store, matrices, baselines, reports): bench_cli runs them through
# bench.cli.main in the test's own process, which is what `python -m bench` runs (the same parser, commands, error
# lines and exit codes) without a second interpreter's second of imports, ~200 times a suite. The verbs that start
# processes, hold signals or run cells (run, ab, images, data, doctor, diagnose) keep their own process, and so does a
# call given an environment: a variable can take effect when bench is imported (BENCH_WORKLOADS, PYTHONPATH), which
# this process did long before. BENCH_TEST_CLI=subprocess runs every call in its own process (to time the difference,
# or rule it out).
IN_PROCESS_VERBS = frozenset({"plan", "report", "status", "check", "import", "baseline", "export", "history", "model"})


def bench_cli(*args: str, cwd: Path, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs `python -m bench ...` as a user would, in `cwd`, with `env` added to the environment: a verb of
    IN_PROCESS_VERBS without `env` in this process (bench.cli.main: stdout and stderr captured, the directory
    restored after), any other call in a subprocess."""
    if args and args[0] in IN_PROCESS_VERBS and not env and os.environ.get("BENCH_TEST_CLI") != "subprocess":
        return _in_process(list(args), cwd)
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def _in_process(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    import contextlib
    import io

    from bench.cli import main

    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as e:  # argparse's usage errors and --help; sys.exit("text") prints it and exits 1
                if isinstance(e.code, str):
                    print(e.code, file=sys.stderr)
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess([sys.executable, "-m", "bench", *args], code, out.getvalue(), err.getvalue())


@pytest.fixture
def write_matrix(tmp_path):
    def write(text: str, name: str = "m.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path
    return write


TINY_WORKLOAD = """
workload:
  batch_per_gpu: 4
  image_size: 32
  warmup_steps: 1
  steps: 2
  repeats: 2
  threads: 1
  channels_last: false
"""


@pytest.fixture(scope="session")
def cluster():
    """A 2-node emulated cluster (tests/cluster.py), up for the whole session and torn down after it, failed or not.

    Skipped, loudly, only where the machine cannot host one (not root, or no network namespaces); anything else that
    stops it from coming up fails the tests that use it.
    """
    from tests import cluster as emulated

    reason = emulated.unavailable()
    if reason:
        pytest.skip(f"EMULATED CLUSTER NOT AVAILABLE, multi-node tests NOT RUN: {reason}")
    made = emulated.start(2)
    try:
        yield made
    finally:
        made.down()

