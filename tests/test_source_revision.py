"""The source a run ran (bench/core/source_revision.py) and "what changed" naming it first: a real git repository made
here, a real `bench run` recording its checkout's commit, and a real `bench ab` of two git refs (e2e) whose
what-changed starts with the source revision and the file under models/ that differs, with no per-run value."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.analysis.envdiff import diff_environments, environment_of
from bench.core.source_revision import SourceRevision, differing_files, of_checkout, source_text
from tests.conftest import ROOT, TINY_WORKLOAD, bench_cli


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    for path, text in {"bench/run.py": "a = 1\n", "models/step.py": "b = 1\n", "README.md": "x\n",
                       ".gitignore": "__pycache__/\n"}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    git(root.parent, "init", "--quiet", str(root))
    git(root, "add", "-A")
    git(root, "commit", "--quiet", "-m", "one")
    return root


def test_a_clean_checkout_is_its_commit_and_edits_under_bench_and_models_are_uncommitted(repo):
    first = of_checkout(repo)
    assert first == SourceRevision(git(repo, "rev-parse", "HEAD")) and first.text() == first.commit[:12]
    (repo / "models" / "step.py").write_text("b = 2\n")
    (repo / "models" / "new.py").write_text("c = 1\n")  # untracked: a new module is a change
    (repo / "README.md").write_text("y\n")              # outside bench/ and models/: not the measured code
    (repo / "bench" / "__pycache__").mkdir()
    (repo / "bench" / "__pycache__" / "run.pyc").write_bytes(b"\0")  # ignored
    dirty = of_checkout(repo)
    assert dirty.commit == first.commit and dirty.uncommitted == ("models/new.py", "models/step.py")
    assert dirty.text() == f"{first.commit[:12]} + uncommitted changes in 2 files"
    assert SourceRevision.from_json(dirty.to_json()) == dirty


def test_files_that_differ_between_two_commits_and_a_dirty_tree(repo):
    one = of_checkout(repo)
    (repo / "models" / "step.py").write_text("b = 2  # more work a step\n")
    (repo / "README.md").write_text("y\n")
    git(repo, "commit", "--quiet", "-am", "two")
    two = of_checkout(repo)
    assert differing_files(one, two, repo) == ["models/step.py"]
    assert differing_files(two, two, repo) == []
    (repo / "bench" / "run.py").write_text("a = 2\n")
    assert differing_files(one, of_checkout(repo), repo) == ["bench/run.py", "models/step.py"]
    assert differing_files(one, SourceRevision(None), repo) is None
    assert differing_files(one, SourceRevision("0" * 40), repo) is None  # not a commit of this repository


def test_outside_a_git_checkout_nothing_is_claimed(tmp_path, repo):
    # A bench installed into a folder inside some other repository (a project's .venv) is not that repository.
    inside = repo / ".venv" / "site-packages"
    inside.mkdir(parents=True)
    assert of_checkout(inside) == SourceRevision(None)
    unknown = of_checkout(tmp_path)
    assert unknown.commit is None and unknown.text() == "unknown (not a git checkout)"
    assert source_text({"source_json": unknown.to_json()}) == "" and source_text({"source_json": None}) == ""
    assert SourceRevision.from_json("{not json") is None


def test_the_source_revision_and_the_files_come_first_in_what_changed():
    a = environment_of([{"env_probe": {"packages": {"torch": "2.13.0"}}}], ["0.1"], ["aaaaaaaaaaaa"])
    b = environment_of([{"env_probe": {"packages": {"torch": "2.14.0"}}}], ["0.1"], ["bbbbbbbbbbbb"])
    changes = diff_environments(a, b, ["models/step.py"])
    assert [c.line() for c in changes] == ["source revision: aaaaaaaaaaaa → bbbbbbbbbbbb",
                                           "source files that differ (bench/, models/): models/step.py",
                                           "package torch: 2.13.0 → 2.14.0"]
    assert diff_environments(a, a, []) == [] and diff_environments(a, a, None) == []


# A value every run draws afresh, under the names the launchers and bench give them.
PER_RUN_NAMES = ("HOROVOD_GLOO_RENDEZVOUS_PORT", "HOROVOD_GLOO_RENDEZVOUS_ADDR", "MASTER_PORT", "MASTER_ADDR",
                 "BENCH_CELL_TOKEN", "BENCH_RUN_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
port = st.integers(1024, 65535).map(str)
scratch = st.text("abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12).map(lambda s: f"/tmp/bench-{s}")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PER_RUN_NAMES), port | scratch), min_size=1, max_size=8),
       st.lists(st.tuples(st.sampled_from(PER_RUN_NAMES), port | scratch), min_size=1, max_size=8),
       st.sampled_from(["TMPDIR", "HOROVOD_LOG_DIR", "BENCH_SCRATCH"]), scratch, scratch)
def test_no_per_run_value_is_ever_a_change(env_a, env_b, path_name, path_a, path_b):
    """Ports, rendezvous addresses, run and job ids, temporary paths: drawn at random on each side, never listed,
    while the same source revision on both sides is not a change either."""
    def side(env, path):
        rec = {"status": "ok", "env_probe": {"tuning_env": {**dict(env), path_name: path}},
               "launch_env": {n: v for n, v in env}}
        return environment_of([rec], ["0.1"], ["1234567890ab"])
    assert diff_environments(side(env_a, path_a), side(env_b, path_b), []) == []


def test_ab_puts_the_sides_revisions_and_the_files_between_them_first(repo, tmp_path, monkeypatch):
    """ab's what-changed from the runs table: a side whose bench recorded no revision (a git ref older than schema
    11) gets the one the session knows (copy_labelled), and the files between the two sides' commits follow."""
    import bench.core.source_revision as source
    from bench.ab.session import copy_labelled
    from bench.commands.ab import side_differences
    from bench.records.schema import parse_record
    from bench.store import Store
    from tests.factories import record

    monkeypatch.setattr(source, "SOURCE_ROOT", repo)  # the repository both sides' worktrees came from
    one = of_checkout(repo)
    (repo / "models" / "step.py").write_text("b = 2  # more work a step\n")
    git(repo, "commit", "--quiet", "-am", "two")
    two = of_checkout(repo)
    with Store(tmp_path / "main.db") as main:
        for side, revision in (("A", one), ("B", two)):
            with Store(tmp_path / f"{side}.db") as scratch:  # as an older bench writes it: no source_json
                scratch.begin_run(f"run-{side}", matrix_name="t", matrix_path="m.yaml", backend="local", host="h",
                                  bench_version="0", plan={})
                scratch.write(parse_record({**record(run_id=f"run-{side}"), "launch_env": {
                    "HOROVOD_GLOO_RENDEZVOUS_PORT": str(20000 + ord(side)), "TMPDIR": f"/tmp/bench-{side}"}}))
            assert copy_labelled(tmp_path / f"{side}.db", main, {"side": side, "pair": 0}, revision) == f"run-{side}"
        runs = main.runs()
        df = main.dataframe()
    assert [SourceRevision.from_json(r["source_json"]) for r in runs] == [one, two]
    changes = side_differences(df, {"run-A": (0, "A"), "run-B": (0, "B")}, runs)
    assert [c.line() for c in changes] == [f"source revision: {one.commit[:12]} → {two.commit[:12]}",
                                           "source files that differ (bench/, models/): models/step.py"]


@pytest.mark.e2e
def test_bench_run_records_the_checkouts_revision(tmp_path):
    from bench.store import Store

    (tmp_path / "m.yaml").write_text("name: src\n" + TINY_WORKLOAD + "axes:\n  gpu: [cpu]\n  framework: [pytorch]\n"
                                     "  mpi: [gloo]\n  gpus: [1]\nbackend:\n  name: local\n  timeout_s: 300\n")
    r = bench_cli("run", "m.yaml", "--store", "s.db", cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    with Store(tmp_path / "s.db", create=False) as store:
        [run] = store.runs()
    assert SourceRevision.from_json(run["source_json"]) == of_checkout(ROOT)
    status = bench_cli("status", "-v", "--store", "s.db", cwd=tmp_path)  # -v: the run's line names its source
    assert f"finished  source {of_checkout(ROOT).text()}" in status.stdout, status.stdout


@pytest.mark.e2e
def test_an_ab_of_two_git_refs_names_the_source_and_the_changed_file_first(tmp_path):
    """The issue's A/B: side B is a commit that changes a file under models/. What changed starts with the two
    revisions and that file; no port, id or temporary path is listed."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], check=True, timeout=300)
    step = clone / "models" / "measure" / "phases.py"
    step.write_text(step.read_text() + "\n# side B: a change under models/\n")
    git(clone, "commit", "--quiet", "-am", "side B")
    before, after = git(clone, "rev-parse", "HEAD~1"), git(clone, "rev-parse", "HEAD")
    (tmp_path / "m.yaml").write_text("name: ab-src\n" + TINY_WORKLOAD + "axes:\n  gpu: [cpu]\n  framework: [pytorch]"
                                     "\n  mpi: [gloo]\n  gpus: [1]\nbackend:\n  name: local\n  timeout_s: 300\n")
    env = {**os.environ, "PYTHONPATH": str(clone)}
    r = subprocess.run([sys.executable, "-m", "bench", "ab", str(tmp_path / "m.yaml"), "--a", "git=HEAD~1",
                        "--b", "git=HEAD", "--pairs", "2", "--store", str(tmp_path / "ab.db"),
                        "--json", str(tmp_path / "ab.json")], cwd=clone, env=env, capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-3000:]
    changes = json.loads((tmp_path / "ab.json").read_text())["changes"]
    assert [(c["what"], c["a"], c["b"]) for c in changes[:2]] == [
        ("source revision", before[:12], after[:12]),
        ("source files that differ (bench/, models/)", "", "models/measure/phases.py")], changes
    listed = " ".join(f"{c['what']} {c['a']} {c['b']}" for c in changes)
    assert "PORT" not in listed and "/tmp/" not in listed and "RUN_ID" not in listed, changes
    assert "source revision: " in r.stdout and "models/measure/phases.py" in r.stdout
