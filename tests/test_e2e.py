"""End to end, for real: matrix → Horovod ResNet-50 under horovodrun (Gloo) and mpirun (Open MPI) → SQLite store
→ report opened in a headless browser. Also: resume, failure isolation, timeout with no orphan processes."""
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest

from models.probes.cpufeatures import cpu_probe
from tests import framework_grid
from tests.conftest import TINY_WORKLOAD, bench_cli

pytestmark = pytest.mark.e2e

MATRIX = f"""
name: e2e
{TINY_WORKLOAD}
axes:
  gpu: [cpu, V100]
  mpi: [gloo, openmpi]
  gpus: [2]
"""


@pytest.fixture(scope="module")
def workdir():
    d = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    (d / "m.yaml").write_text(MATRIX, encoding="utf-8")
    first = bench_cli("run", "m.yaml", cwd=d)
    yield d, first
    shutil.rmtree(d, ignore_errors=True)


def read_records(d: Path) -> pd.DataFrame:
    with sqlite3.connect(d / "results" / "bench.db") as conn:
        return pd.read_sql("SELECT * FROM records", conn)


def markdown_rows(md: str) -> list[dict[str, str]]:
    """Every row of every table in a markdown page, as {column: cell text}."""
    rows, header, lines = [], None, md.splitlines()
    for line, following in zip(lines, [*lines[1:], ""]):
        if not line.startswith("|"):
            header = None
        elif following.startswith("|---"):
            header = _cells(line)
        elif header and not line.startswith("|---"):
            rows.append(dict(zip(header, _cells(line), strict=True)))
    return rows


def _cells(line: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]


def test_run_measures_both_controllers_and_stores_consistent_records(workdir):
    d, first = workdir
    assert first.returncode == 0, first.stderr[-3000:]
    assert "2 runnable on local, 2 skipped" in first.stderr
    df = read_records(d)
    assert len(df) == 4 and set(df.status) == {"ok"}
    assert sorted(df.mpi.unique()) == ["gloo", "openmpi"] and set(df.gpus) == {2}
    for row in df.itertuples():
        rec = json.loads(row.record_json)
        # Recompute the global rate from the record's own per-rank data.
        total = sum(r["samples"] for r in rec["per_rank"])
        assert total == rec["samples"] == 2 * 4 * 2  # 2 workers × batch 4 × 2 steps
        assert rec["samples_per_sec"] == pytest.approx(total / rec["window_s"])
        assert rec["window_s"] >= max(r["window_s"] for r in rec["per_rank"])
        assert np.isfinite(row.samples_per_sec) and row.samples_per_sec > 0
        assert rec["env_probe"]["horovod_controller"] == {"gloo": "gloo", "openmpi": "mpi"}[row.mpi]
        assert rec["env_probe"]["framework_version"].startswith("2.13.0")
        # What ran, CPU side: the worker's probe read the same CPU (models/probes/cpufeatures.py) and torch's kernel
        # level
        assert rec["env_probe"]["cpu"] == cpu_probe() and rec["env_probe"]["torch_cpu_capability"]
        assert Path(rec["command"][0]).name == {"gloo": "horovodrun", "openmpi": "mpirun"}[row.mpi]
        assert (d / "results" / "runs" / row.run_id / row.cell_id / f"job{row.job}" / "log.txt").stat().st_size > 0


def test_second_run_resumes_and_reruns_nothing(workdir):
    d, _ = workdir
    before = read_records(d)
    again = bench_cli("run", "m.yaml", cwd=d)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "2 cell(s) already measured" in again.stderr
    after = read_records(d)
    assert len(after) == len(before) and set(after.run_id) == set(before.run_id)


def test_run_where_measures_only_the_selected_cells_and_a_selection_of_none_runs_nothing(workdir):
    d, _ = workdir
    before = read_records(d)
    again = bench_cli("run", "m.yaml", "--where", "mpi=gloo", "--rerun", cwd=d)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "e2e: 2 cells selected by --where mpi=gloo, 1 runnable on local, 1 skipped" in again.stderr
    after = read_records(d)
    new = after[~after.run_id.isin(before.run_id)]
    assert len(new) == 2 and set(new.mpi) == {"gloo"} and set(new.gpu) == {"cpu"}  # its two repeats, nothing else
    with sqlite3.connect(d / "results" / "bench.db") as conn:
        (plan,) = conn.execute("SELECT plan_json FROM runs WHERE run_id = ?", (new.run_id.iloc[0],)).fetchone()
    assert json.loads(plan)["where"] == "mpi=gloo"
    for where, words in (("mpi=mpich", "--where: 'mpi=mpich' matches none of the matrix's 4 cells"),
                         ("gpu=V100", "--where: the 2 cell(s) it selects are all skipped; 2 of them: V100 cell")):
        refused = bench_cli("run", "m.yaml", "--where", where, cwd=d)
        assert refused.returncode == 2 and words in refused.stderr, refused.stderr[-2000:]
    assert len(read_records(d)) == len(after)


def test_report_from_the_store_renders_in_a_headless_browser(workdir):
    d, _ = workdir
    result = bench_cli("report", cwd=d)
    assert result.returncode == 0, result.stderr
    html = (d / "reports" / "index.html").read_text()
    assert "data:image/png;base64," in html and 'src="http' not in html  # self-contained
    cells = set(read_records(d).cell_id)
    assert all(c in html for c in cells)
    cpu = cpu_probe()  # What ran names the CPU by family/model/stepping and its speed features
    assert f"family {cpu['family']} model {cpu['model']} stepping {cpu['stepping']}" in html and "AMX: " in html
    md = (d / "reports" / "summary.md").read_text()
    # Each cell is the only one of its series (gpus: [2]): no smaller run to divide by, so no speedup of 1.00×.
    scaling = [row for row in markdown_rows(md) if "baseline" in row]  # the main table (the headline has no baseline)
    assert sorted(row["cell_id"] for row in scaling) == sorted(cells)
    for row in scaling:
        assert (row["speedup"], row["efficiency"], row["baseline"]) == ("—", "—", "no smaller run in this series")
    assert (d / "reports" / "scaling_cpu.png").stat().st_size > 10_000
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("chromium is not installed (make test installs it); report checked without a browser")
    profile = tempfile.mkdtemp()
    shot = d / "shot.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--window-size=1200,1600"]
    url = (d / "reports" / "index.html").as_uri()
    dom = subprocess.run([chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    assert dom.count("<tr>") >= 1 + len(cells) and "scaling-table" in dom
    import matplotlib.image

    def colourful_pixels(page: Path) -> int:
        subprocess.run([chromium, *flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
        pixels = matplotlib.image.imread(shot)[..., :3]
        return int(((pixels.max(axis=2) - pixels.min(axis=2)) > 0.3).sum())  # chart colours, not black on white

    control = d / "reports" / "no-images.html"
    control.write_text(html.replace("<img ", "<span "), encoding="utf-8")
    with_charts, without = colourful_pixels(d / "reports" / "index.html"), colourful_pixels(control)
    assert with_charts > without + 300, f"the embedded charts did not render ({with_charts} vs {without})"


def test_a_failing_cell_is_recorded_and_the_others_still_run(tmp_path):
    (tmp_path / "m.yaml").write_text(MATRIX.replace("gpu: [cpu, V100]", "gpu: [cpu]"), encoding="utf-8")
    # A broken Open MPI configuration fails MPI_Init in the openmpi cell's workers for real; the Gloo cell does
    # not initialise MPI and must still be measured.
    # --no-probe here and in the next few tests: they prove what happens to a cell, not its expected value, and
    # the probes would double their runs' time
    result = bench_cli("run", "m.yaml", "--no-probe", cwd=tmp_path, env={"OMPI_MCA_coll": "no_such_component"})
    assert result.returncode == 1, result.stderr[-2000:]
    df = read_records(tmp_path)
    by_mpi = {m: g for m, g in df.groupby("mpi")}
    assert set(by_mpi["gloo"].status) == {"ok"} and len(by_mpi["gloo"]) == 2
    failed = by_mpi["openmpi"]
    assert list(failed.status) == ["failed"] and "exit code" in failed.error.iloc[0]
    # Open MPI's own error report is racy when ranks abort together; the reason names it when it is there.
    assert re.match(r"exit code \d+: \S", failed.error.iloc[0])
    assert json.loads(failed.record_json.iloc[0])["log_tail"]
    report = bench_cli("report", cwd=tmp_path)
    assert report.returncode == 0 and "Failed cells" in (tmp_path / "reports" / "index.html").read_text()


def test_timeout_kills_the_whole_process_group(tmp_path):
    (tmp_path / "m.yaml").write_text(MATRIX.replace("gpu: [cpu, V100]", "gpu: [cpu]")
                                     .replace("mpi: [gloo, openmpi]", "mpi: [gloo]"), encoding="utf-8")
    result = bench_cli("run", "m.yaml", "--no-probe", "--timeout", "3", cwd=tmp_path)
    assert result.returncode == 1
    df = read_records(tmp_path)
    assert list(df.status) == ["timeout"] and "timed out after 3 s" in df.error.iloc[0]
    cell_id = df.cell_id.iloc[0]
    leftovers = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(cell_id in part for part in (p.info["cmdline"] or [])):
                leftovers.append(p)
        except psutil.Error:
            continue
    assert not leftovers, f"orphan processes: {[p.pid for p in leftovers]}"
    assert os.path.exists(tmp_path / "results" / "runs" / df.run_id.iloc[0] / cell_id / "job0" / "log.txt")


# The README's samples of `make run` and `bench status` (its ```text blocks) against this real run's output, line
# kind by line kind: a change to what bench prints that leaves the README's samples behind fails here.
RUN_SHAPES = {
    # in a pipe (the README's sample, and bench_cli here) each cell's line ends with how far the run is
    "ok": re.compile(r"^ok +cpu/\S+(?: \S+)* +[\d.,]+ img/s {2}\(median of \d+, \d+ s\) {2}(?:…|[0-9a-f]{12}) {2}"
                     r"via \S+ {2}\[\d+/\d+, (?:…|\d+:\d\d(?::\d\d)?) elapsed, ~(?:…|\d+:\d\d(?::\d\d)?) left\]$"),
    "probe": re.compile(r"^probe +cpu/\S+(?: \S+)* +(?:engine(?:, again)?: )?(?:measured in \d+ s|reused) "),
    "probes": re.compile(r"^probes \(compute and engine\): \d+ measured, \d+ reused, \d+ failed; "),
    "run": re.compile(r"^run (?:…|\d{8}T\d{6}Z-[0-9a-f]+): \d+ ok, \d+ failed, \d+ already in the store, \d+ skipped; "
                      r"store: \S+$"),
}
STATUS_SHAPES = {
    "run": re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]+ {2}\S+ {2}\S+ {2}cells run: \d+ {2}failed: \d+ {2}(?:un)?finished$"),
    "row": re.compile(r"^[0-9a-f]{12} \S+ +[\d.,]+ \([\d.,]+–[\d.,]+\) .*(?:as expected|below expected by \d+%|"
                      r"above expected by \d+%|no expected value|not measured apart)$"),
    "complete": re.compile(r"^\d+ cell\(s\) complete in \S+$"),
}


def readme_samples() -> list[list[str]]:
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    return [block.splitlines() for block in re.findall(r"^```text\n(.*?)^```", text, flags=re.M | re.S)]


def test_the_readmes_samples_have_the_shape_of_a_real_runs_output(workdir):
    d, first = workdir
    run_sample, status_sample = readme_samples()
    real = first.stderr.splitlines()
    for kind, shape in RUN_SHAPES.items():
        sample_lines = [line for line in run_sample if line.startswith(f"{kind} ")]
        real_lines = [line for line in real if line.startswith(f"{kind} ")]
        assert sample_lines and real_lines, (kind, first.stderr[-2000:])
        assert [line for line in sample_lines + real_lines if not shape.match(line)] == [], kind
    status = bench_cli("status", cwd=d).stdout.splitlines()
    for lines in (status_sample, status):
        assert STATUS_SHAPES["run"].match(lines[0]) and STATUS_SHAPES["complete"].match(lines[-1]), lines
        rows = [line for line in lines if re.match(r"^[0-9a-f]{12} ", line)]
        assert rows and all(STATUS_SHAPES["row"].match(row) for row in rows), rows


def test_export_status_and_console_script(workdir):
    d, _ = workdir
    out = bench_cli("export", "--format", "csv", "-o", "out/records.csv", cwd=d)
    assert out.returncode == 0, out.stderr
    exported = pd.read_csv(d / "out" / "records.csv")
    stored = read_records(d)
    # The store's columns, then what export derives from each record (MFU, power: bench/analysis/mfu.py).
    from bench.analysis.mfu import EXPORT_COLUMNS

    # flops_per_sample is both a store column (what a transformer worker recorded) and derived for every record
    # (the MFU convention's count): the derived one, the same for a transformer, stands in the export.
    kept = [c for c in stored.columns if c not in EXPORT_COLUMNS]
    assert len(exported) == len(stored) and list(exported.columns) == [*kept, *EXPORT_COLUMNS]
    assert sorted(exported.samples_per_sec) == pytest.approx(sorted(stored.samples_per_sec))
    status = bench_cli("status", cwd=d)
    assert status.returncode == 0 and "2 cell(s) complete" in status.stdout
    script = Path(os.environ.get("VIRTUAL_ENV", Path(sys.executable).parent.parent)) / "bin" / "bench"
    plan = subprocess.run([str(script), "plan", "m.yaml", "--format", "json"], cwd=d, capture_output=True, text=True)
    assert plan.returncode == 0 and len(json.loads(plan.stdout)) == 4


def test_doctor_checks_horovod_by_importing(tmp_path):
    out = bench_cli("doctor", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "horovod      0.28.1" in out.stdout and "  pytorch    mpi, gloo" in out.stdout
    assert "  tensorflow mpi, gloo" in out.stdout and "Open MPI" in out.stdout
    # framework x flavour as the installed builds serve them: every pair on the default install
    lines = out.stdout.splitlines()
    start = lines.index("horovod binding, framework x mpi (the environment that runs the cells):")
    head, *rows = lines[start + 1:start + 5]
    assert head.split() == ["openmpi", "(.venv)", "intelmpi", "(.venv-mpich)", "mpich", "(.venv-mpich)", "gloo",
                            "(.venv)"]
    assert [row.split() for row in rows] == [[f, "ok", "ok", "ok", "ok"] for f in ("pytorch", "tensorflow", "keras")]


def test_doctor_names_what_is_missing(tmp_path, monkeypatch, capsys):
    import venv

    from bench.cli import main
    from bench.execution import doctor

    venv.create(tmp_path / "empty", with_pip=False)  # a Python with no torch, TensorFlow or Horovod
    monkeypatch.setattr(doctor.sys, "executable", str(tmp_path / "empty" / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))  # and no mpirun
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    missing = out.split("MISSING", 1)[1]
    for piece in ("pytorch", "tensorflow", "horovod for pytorch with gloo", "mpirun", "horovodrun", "tf-keras",
                  "horovod.tensorflow for keras under gloo"):
        assert piece in missing, out


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupting_run_stops_the_cell_and_records_it(tmp_path, sig, code):
    (tmp_path / "m.yaml").write_text(MATRIX.replace("gpu: [cpu, V100]", "gpu: [cpu]")
                                     .replace("mpi: [gloo, openmpi]", "mpi: [openmpi]")
                                     .replace("steps: 2", "steps: 500"), encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "bench", "run", "m.yaml", "--no-probe"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):  # wait until the workers exist
            if _workers_running(tmp_path):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the cell never started")
        time.sleep(1.0)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # never leave a run behind, whatever failed above
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
    assert proc.returncode == code, err[-2000:]
    df = read_records(tmp_path)
    assert list(df.status) == ["interrupted"]
    assert not _workers_running(tmp_path, probes=True), "workers survived the interrupt"


def test_interrupting_run_during_an_engine_probe_leaves_no_process(tmp_path):
    """Ctrl-C while the cell's launch runs its engine probe first (bench/backends/local/engine_probe.py): the run
    stops with 130, none of the launch's processes outlives it, and the cell is recorded as interrupted."""
    (tmp_path / "m.yaml").write_text(MATRIX.replace("gpu: [cpu, V100]", "gpu: [cpu]")
                                     .replace("mpi: [gloo, openmpi]", "mpi: [openmpi]"), encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "bench", "run", "m.yaml"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def probing() -> bool:  # a probe window written, none of the cell's yet
        return any(not (p.parent / "records.jsonl").exists()
                   for p in (tmp_path / "results").glob("runs/**/engine-probe.jsonl"))

    try:
        for _ in range(2400):  # wait until the probe's first window is written
            if probing() and _workers_running(tmp_path):
                break
            time.sleep(0.05)
        else:
            pytest.fail("no engine probe was seen running in the cell's launch")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    time.sleep(1.0)
    assert not _workers_running(tmp_path, probes=True), "the launch's workers survived the interrupt"
    assert list(read_records(tmp_path).status) == ["interrupted"]


def _workers_running(tmp_path: Path, probes: bool = False) -> bool:
    """Whether the cell's workers run (`probes`: or an engine probe's, which are the cell's program too)."""
    for p in psutil.process_iter(["cmdline"]):
        try:
            cmd = p.info["cmdline"] or []
        except psutil.Error:
            continue
        if any("resnet50/pytorch_worker.py" in part for part in cmd) and any(str(tmp_path) in part for part in cmd) \
                and (probes or not any("/engine-probe-" in part for part in cmd)):
            return True
    return False


def test_real_data_cells_for_every_framework_and_layout(tmp_path):
    axes = """
  gpu: [cpu]
  framework: [pytorch, tensorflow, keras]
  data_layout: [jpeg, tfrecord]
  mpi: [openmpi]
  gpus: [2]
  channels_last: [true]"""
    backend = """
backend:
  imagenet_dir: sample
  imagenet_sample: {classes: 3, per_class: 8}
"""
    (tmp_path / "m.yaml").write_text(f"name: real-data\n{TINY_WORKLOAD}  data: imagenet\n  loader_workers: 1\n"
                                     f"axes:{axes}{backend}", encoding="utf-8")
    plan = json.loads(bench_cli("plan", "m.yaml", "--format", "json", cwd=tmp_path).stdout)
    skipped = [r for r in plan if r["status"] == "skipped"]
    assert [(r["framework"], r["data_layout"]) for r in skipped] == [("pytorch", "tfrecord")]
    # Run: each framework's worker and each layout's reader once. TensorFlow and Keras read both layouts through one
    # tf.data pipeline (models/data/imagenet_tf.py), so TensorFlow reads the TFRecords and Keras the JPEGs; the two
    # crossings would start two more TensorFlow launches (~25 s each) to prove that pipeline again.
    # --no-probe: what the real-data path reads and records, not the cells' expected values (a first run's probes
    # add about 40% to its cells' time, docs/install.md)
    run_axes = axes.replace("framework: [pytorch, tensorflow, keras]", "framework: [pytorch, keras]") \
        .replace("data_layout: [jpeg, tfrecord]", "data_layout: [jpeg]")
    include = ("include:\n  - {gpu: cpu, framework: tensorflow, data_layout: tfrecord, mpi: openmpi, gpus: 2, "
               "channels_last: true}\n")
    (tmp_path / "m.yaml").write_text(f"name: real-data\n{TINY_WORKLOAD}  data: imagenet\n  loader_workers: 1\n"
                                     f"axes:{run_axes}\n{include}{backend}", encoding="utf-8")
    result = bench_cli("run", "m.yaml", "--no-probe", cwd=tmp_path, timeout=850)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "made an ImageNet sample" in result.stderr and (tmp_path / "sample" / "tfrecord").is_dir()
    df = read_records(tmp_path)
    assert sorted(set(zip(df.framework, df.data_layout))) == [("keras", "jpeg"), ("pytorch", "jpeg"),
                                                              ("tensorflow", "tfrecord")]
    # The framework grid leaves these (framework, flavour) pairs under Horovod to this run (tests/framework_grid.py)
    assert set(zip(df.framework, df.mpi)) >= set(framework_grid.RUN_WITH_REAL_DATA) and set(df.engine) == {"horovod"}
    assert len(df) == 3 * 2 and set(df.status) == {"ok"} and set(df.data) == {"imagenet"}
    for row in df.itertuples():
        rec = json.loads(row.record_json)
        assert rec["data"] == "imagenet" and rec["data_layout"] == row.data_layout
        assert 0 <= rec["input_wait_s"] < rec["window_s"]  # Keras too: its batches are fetched outside the step
        command = rec["command"]
        assert command[command.index("--data-dir") + 1] == str(tmp_path / "sample")


def test_an_unusable_dataset_fails_its_cell_with_the_reason(tmp_path):
    (tmp_path / "empty" / "train" / "n0001").mkdir(parents=True)
    (tmp_path / "m.yaml").write_text(f"""
name: bad-data
{TINY_WORKLOAD}
  data: imagenet
  loader_workers: 1
axes:
  gpu: [cpu]
  mpi: [gloo]
  gpus: [1]
backend:
  imagenet_dir: empty
""", encoding="utf-8")
    result = bench_cli("run", "m.yaml", cwd=tmp_path)
    assert result.returncode == 1
    df = read_records(tmp_path)
    assert list(df.status) == ["failed"]
    assert "bench worker: error: no JPEG files under" in df.error.iloc[0]


def test_a_launcher_that_is_not_installed_fails_its_cell_and_the_others_run(tmp_path):
    # PATH names nothing: Open MPI's mpirun cannot be found; torchrun (python -m torch.distributed.run) still runs.
    (tmp_path / "m.yaml").write_text(f"""
name: no-launcher
{TINY_WORKLOAD}
axes:
  gpu: [cpu]
  framework: [pytorch]
  mpi: [openmpi, gloo]
  ib: [false]
  gpus: [1]
  engine: [native]
backend: {{name: local, timeout_s: 300}}
""", encoding="utf-8")
    done = bench_cli("run", "m.yaml", cwd=tmp_path, env={"PATH": str(tmp_path / "nowhere")})
    assert done.returncode == 1, done.stderr[-2000:]
    df = read_records(tmp_path)
    by_mpi = df.groupby("mpi").status.agg(set).to_dict()
    assert by_mpi == {"openmpi": {"failed"}, "gloo": {"ok"}}, df[["mpi", "status", "error"]]
    assert "could not start mpirun" in df[df.mpi == "openmpi"].error.iloc[0]
