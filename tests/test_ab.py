"""`bench ab`: bad input refused before anything runs, and a real interleaved session in which side B runs under a
CPU quota of half a CPU (a real slowdown through the cgroup cpu controller) and is caught, with the quota named as
what changed and every side run labelled in the store."""
import json
import os
from pathlib import Path

import pytest

from bench.ab.cpuquota import cpu_controller_root
from tests.conftest import TINY_WORKLOAD, bench_cli

MATRIX = "name: ab-test\n" + TINY_WORKLOAD + """
axes:
  gpu: [cpu]
  framework: [pytorch]
  mpi: [gloo]
  gpus: [1]
backend:
  name: local
  timeout_s: 300
"""


@pytest.mark.parametrize("args,message", [
    (["--b", "cpus=fast"], "cpus must be a number"),
    (["--b", "current", "--pairs", "1"], "--pairs must be between 2"),
    (["--b", "current", "--pairs", "3", "--budget", "5m"], "give it or --budget/--max-pairs, not both"),
    (["--b", "current", "--budget", "soon"], "--budget must be a positive duration"),
    (["--b", "current", "--budget", "0s"], "--budget must be a positive duration"),
    (["--b", "current", "--max-pairs", "1"], "--max-pairs must be between 2"),
    (["--b", "current", "--min-effect", "0"], "--min-effect must be between 0 and 1"),
    (["--b", "current", "--min-effect", "1.5"], "--min-effect must be between 0 and 1"),
    (["--b", "current", "--cpu-weight", "lots"], "--cpu-weight must be a number"),
    (["--b", "python=/no/such/python"], "not an executable Python"),
    (["--b", "git=no-such-ref-anywhere"], "not a commit of this repository"),
    (["--b", "image=bench:1,git=HEAD"], "does not combine with python= or git="),
    (["--b", "image=-bad"], "is not an image name"),
    (["--b", "current", "--cpu-weight", "0"], "--cpu-weight must be between"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, args, message):
    (tmp_path / "m.yaml").write_text(MATRIX)
    r = bench_cli("ab", "m.yaml", *args, "--store", "s.db", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.yaml"]


def test_a_bad_matrix_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "m.yaml").write_text("name: x\naxes: {gpu: [no-such-gpu]}\n")
    r = bench_cli("ab", "m.yaml", "--b", "current", "--store", "s.db", cwd=tmp_path)
    assert r.returncode == 2 and not (tmp_path / "s.db").exists()


def _groups(session: str) -> set[str]:
    root = cpu_controller_root()
    return {p.name for p in root[0].iterdir() if p.name.startswith(f"bench-ab-{session}")} if root else set()


@pytest.mark.e2e
@pytest.mark.alone
@pytest.mark.skipif(cpu_controller_root() is None or not os.access(cpu_controller_root()[0], os.W_OK),
                    reason="needs a writable cgroup cpu controller (root)")
def test_a_half_cpu_quota_on_side_b_is_caught_named_and_the_session_stops_once_decided(tmp_path):
    (tmp_path / "m.yaml").write_text(MATRIX)
    r = bench_cli("ab", "m.yaml", "--b", "cpus=0.5", "--max-pairs", "6", "--cpu-weight", "10", "--store", "ab.db",
                  "--json", "ab.json", cwd=tmp_path, timeout=1200)
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    doc = json.loads((tmp_path / "ab.json").read_text())
    (cell,) = doc["cells"]
    # Halving the CPU is decided in a few pairs; the session stops there rather than at --max-pairs.
    assert cell["verdict"] == "regressed" and cell["ratio"] < 0.8 and cell["ci_high"] < 1, cell
    assert doc["course"]["stopped"] == "every cell decided" and cell["pairs"] == doc["course"]["pairs_run"] < 6, doc
    assert cell["why"].startswith("B slower by") and "ab after 2 pairs" in r.stderr
    changes = {c["what"]: (c["a"], c["b"]) for c in doc["changes"]}
    assert changes.get("CPU quota") == ("none", "0.5 CPUs"), doc["changes"]
    assert "CPU quota: none → 0.5 CPUs" in r.stdout
    # Every side run is in the store, labelled with its side and pair; the cgroups are gone.
    from bench.store import Store

    with Store(tmp_path / "ab.db", create=False) as store:
        labels = sorted((json.loads(run["plan_json"])["ab"]["pair"], json.loads(run["plan_json"])["ab"]["side"])
                        for run in store.runs())
    assert labels == [(k, side) for k in range(cell["pairs"]) for side in ("A", "B")]
    assert _groups(doc["session"]) == set()
    assert not list(Path(tmp_path).glob("bench-ab-*"))


def test_a_relative_workdir_is_made_absolute(tmp_path, monkeypatch):
    """Host side runs start in their source tree, not the caller's cwd: a relative --workdir must not move with them
    (it did: side A's stores landed under the source tree and the session found no records)."""
    from bench.ab.session import Session
    from bench.ab.spec import parse_side

    monkeypatch.chdir(tmp_path)
    session = Session([parse_side("A", "current"), parse_side("B", "current")], Path("w"))
    assert session.workdir == tmp_path / "w" and session.workdir.is_dir()


@pytest.mark.e2e
@pytest.mark.alone
@pytest.mark.skipif(cpu_controller_root() is None or not os.access(cpu_controller_root()[0], os.W_OK),
                    reason="needs a writable cgroup cpu controller (root)")
def test_a_session_stopped_by_sigterm_leaves_no_worktree_cgroup_or_process(tmp_path):
    """What a session makes outside its own process (side A's git worktree, both sides' CPU groups, the side run's
    process tree) is gone when `timeout` or a CI runner stops it with SIGTERM mid-way through a side run."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT

    (tmp_path / "m.yaml").write_text(MATRIX)
    proc = subprocess.Popen([sys.executable, "-m", "bench", "ab", "m.yaml", "--a", "git=HEAD", "--b", "cpus=0.9",
                             "--pairs", "3", "--workdir", "w", "--store", "ab.db"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    groups = lambda: sorted(cpu_controller_root()[0].glob(f"bench-ab-*-{proc.pid}-*"))  # noqa: E731
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "w" / "pair0-A.log").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert (tmp_path / "w" / "tree-A").is_dir() and len(groups()) == 2, proc.poll()
        time.sleep(3)  # inside side A's `bench run`
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 143, err[-2000:]
        assert not (tmp_path / "w" / "tree-A").exists() and groups() == []
        trees = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout
        assert str(tmp_path / "w" / "tree-A") not in trees
        left = subprocess.run(["pgrep", "-f", str(tmp_path / "w")], capture_output=True, text=True).stdout.split()
        assert left == [], subprocess.run(["ps", "-o", "pid,args", "-p", ",".join(left)], capture_output=True,
                                          text=True).stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _plan(**given):
    from argparse import Namespace

    from bench.commands.ab import Plan

    return Plan(Namespace(**{"pairs": None, "budget": None, "max_pairs": None, **given}))


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("10m", 600), ("1.5h", 5400), ("45", 45), (" 2m ", 120)])
def test_budgets_read_as_durations(text, seconds):
    from bench.commands.ab import parse_duration

    assert parse_duration("--budget", text) == seconds


def test_a_session_stops_when_every_cell_is_decided_not_before_two_pairs_and_never_past_its_budget():
    plan = _plan(budget="5m", max_pairs=10)
    decided, open_ = [{"verdict": "regressed"}, {"verdict": "unchanged"}], [{"verdict": "undecided"}]
    assert plan.stop_reason(1, [{"verdict": "regressed"}], 30, 30) is None  # one pair never decides
    assert plan.stop_reason(2, decided, 60, 30) == "every cell decided"
    assert plan.stop_reason(2, decided + open_, 60, 30) is None  # one cell still open: go on
    assert plan.stop_reason(9, open_, 270, 30) is None  # 270 + 30 s ends exactly at the budget
    assert plan.stop_reason(9, open_, 271, 30).startswith("budget of 5 min spent")
    assert plan.stop_reason(10, open_, 100, 10) == "--max-pairs 10 reached"
    fixed = _plan(pairs=3)
    assert fixed.budget_s is None and fixed.stop_reason(2, decided, 1e6, 1e6) is None  # exactly 3, whatever
    assert fixed.stop_reason(3, open_, 0, 0) == "3 pairs run"
