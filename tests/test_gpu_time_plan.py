"""scripts/gpu_time_plan.py --against: the loan's time plan beside what a loan took, read from the 2026-11-26 H200
loan's real store (benchmarks/results/h200-resnet50.db), from a session folder with phase markers and from
its archive; a loan slower than its plan exits 1 naming the fix; bad input is one line and exit 2."""
import re
import shutil
import sqlite3
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "gpu_time_plan.py"
H200_STORE = ROOT / "benchmarks" / "results" / "h200-resnet50.db"
HEADLINE = "87f3f262f3d7"  # Horovod, AMP fp16, channels-last, batch 256, synthetic: in matrix-gpu.yaml then and now


def against(path, *extra):
    return subprocess.run([sys.executable, str(SCRIPT), "--against", str(path), *extra], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)


def test_the_documented_line_sets_the_headline_cell_beside_its_plan():
    doc = (ROOT / "docs" / "gpu.md").read_text()
    line = next(doc_line for doc_line in doc.splitlines()
                if doc_line.startswith(".venv/bin/python scripts/gpu_time_plan.py --against"))
    done = subprocess.run([sys.executable, *line.split()[1:]], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    # Taken: from the run's start to the cell's last record (it was its run's first cell), read here independently.
    with sqlite3.connect(H200_STORE) as db:
        written, started = db.execute(
            "SELECT max(r.written_unix), u.started_unix FROM records r JOIN runs u USING (run_id) "
            "WHERE r.cell_id = ? AND r.status = 'ok'", (HEADLINE,)).fetchone()
    headline = next(out_line for out_line in done.stdout.splitlines() if out_line.strip().startswith(
        "cell H200/pytorch/gloo/ib=off/1w fp16 b256 20+50x3 "))
    planned, taken, ratio = re.findall(r"(\d+) s\s+(\d+) s\s+(\d+\.\d\d)", headline)[0]
    assert int(taken) == round(written - started)
    assert abs(float(ratio) - (written - started) / float(planned)) < 0.05
    # What the doc quotes of it.
    assert f"{planned} s planned and {taken} s taken ({ratio})" in " ".join(doc.split())
    assert done.stdout.count("not in the plan") == 4 and "(interrupted)" in done.stdout
    assert re.search(r"^  report\s+15 s\s+-\s+not run$", done.stdout, re.M)


@pytest.fixture
def session(tmp_path):
    """A session folder as gpu_session.sh leaves it: the H200 store and the phase markers it writes."""
    work = tmp_path / ".gpu-session"
    (work / "done").mkdir(parents=True)
    shutil.copy(H200_STORE, work / "bench.db")
    for phase, seconds in (("install", 11), ("build", 14), ("doctor", 20), ("cells", 400)):
        (work / "done" / phase).write_text(f"2026-11-26T01:3{len(phase)}:00Z in {seconds} s\n")
    return work


def test_a_session_folder_and_its_archive_give_the_same_rows(session, tmp_path):
    folder = against(session)
    assert folder.returncode == 0, folder.stderr
    assert re.search(r"^  install\s+15 s\s+11 s\s+0\.73$", folder.stdout, re.M)
    assert re.search(r"^  build \(the kit's Horovod wheel\)\s+15 s\s+14 s\s+0\.93$", folder.stdout, re.M)
    assert re.search(r"^  data\s+40 s\s+-\s+not run$", folder.stdout, re.M)
    assert not re.search(r"^  cells\b", folder.stdout, re.M)  # the cells phase is its cells' rows
    # The compared total: the three phases and the headline cell.
    assert re.search(r"^  compared\s+84 s\s+75 s\s+0\.89$", folder.stdout, re.M), folder.stdout
    archive = tmp_path / "gpu-session.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in ("bench.db", "done"):
            tar.add(session / name, arcname=name)
    packed = against(archive)
    assert packed.returncode == 0, packed.stderr
    assert packed.stdout.splitlines()[1:] == folder.stdout.splitlines()[1:]


def test_a_loan_slower_than_its_plan_exits_1_naming_the_fix(session):
    (session / "done" / "build").write_text("2026-11-26T01:35:00Z in 118 s\n")  # the sdist, where the wheel was planned
    done = against(session)
    assert done.returncode == 1
    assert re.search(r"^  build \(the kit's Horovod wheel\)\s+15 s\s+118 s\s+7\.87$", done.stdout, re.M)
    assert "correct the constants in scripts/gpu_time_plan.py before the next loan" in done.stderr
    assert done.stderr.count("\n") == 1
    # Planned with the sdist build, the same loan fits.
    assert against(session, "--prebuilt", "no").returncode == 0


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    missing = against(tmp_path / "nowhere")
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr
    junk = tmp_path / "bench.db"
    junk.write_text("not a database\n")
    refused = against(junk)
    assert refused.returncode == 2 and "not a session folder, archive or store" in refused.stderr
    for done in (missing, refused):
        assert done.stderr.count("\n") == 1 and done.stdout == ""


def test_a_skip_of_an_unknown_phase_is_one_line_and_exit_2():
    done = subprocess.run([sys.executable, str(SCRIPT), "--skip", "build,install"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "gpu_time_plan: --skip takes build and data, got 'build,install'\n"
