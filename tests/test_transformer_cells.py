"""Transformer cells end to end, for real: a matrix of the tiny decoder under Horovod (Gloo), DDP (torchrun) and
FSDP2 → real launchers → the store's generic rate with its unit → `run`, `status`, `history`, `check` and the
report in tokens/s, never img/s; ResNet-50's sections never show them (issue 47)."""
import json
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from models.workloads.transformer.shapes import CONFIGS
from tests.conftest import bench_cli

pytestmark = pytest.mark.e2e

SEQ = 64
MATRIX = f"""
name: transformer-e2e
workload: {{model: tiny, seq_len: {SEQ}, batch_per_gpu: 2, warmup_steps: 2, steps: 6, repeats: 2, threads: 1}}
axes:
  gpu: [cpu]
  mpi: [gloo]
  gpus: [1, 2]
  engine: [horovod, native, fsdp2]
exclude:
  - {{gpus: 1, engine: native}}
  - {{gpus: 1, engine: fsdp2}}
"""


@pytest.fixture(scope="module")
def workdir():
    d = Path(tempfile.mkdtemp(prefix="bench-tfm-"))
    (d / "m.yaml").write_text(MATRIX, encoding="utf-8")
    first = bench_cli("run", "m.yaml", cwd=d, timeout=900)  # with the compute probe for the 2-worker cells
    yield d, first
    shutil.rmtree(d, ignore_errors=True)


def _rows(d: Path) -> pd.DataFrame:
    with sqlite3.connect(d / "results" / "bench.db") as conn:
        return pd.read_sql("SELECT * FROM records", conn)


def test_every_engine_runs_and_lands_in_the_store_as_sequences(workdir):
    d, run = workdir
    assert run.returncode == 0, run.stdout + run.stderr
    rows = _rows(d)
    assert set(rows["status"]) == {"ok"} and rows["cell_id"].nunique() == 4
    assert set(rows["engine"]) == {"horovod", "native", "fsdp2"}
    assert set(rows["sample_unit"]) == {"sequence"} and set(rows["rate_unit"]) == {"tokens/s"}
    assert set(rows["units_per_sample"]) == {SEQ} and (rows["samples_per_sec"] > 0).all()
    assert set(rows["flops_per_sample"]) == {float(CONFIGS["tiny"].flops_per_sequence(SEQ))}
    assert (rows["peak_memory_bytes"] > 0).all()
    for js in rows["record_json"]:
        rec = json.loads(js)
        assert rec["tokens_per_sec"] == pytest.approx(rec["samples_per_sec"] * SEQ)
        assert rec["loss"] < rec["loss_initial"]  # the window trained


def test_run_status_and_history_speak_tokens(workdir):
    d, run = workdir
    out = run.stdout + run.stderr  # the progress lines are on stderr
    lines = [ln for ln in out.splitlines() if ln.startswith("ok ")]
    assert len(lines) == 4 and all(re.search(r"[\d,]+ tokens/s", ln) for ln in lines), out
    assert "img/s" not in out
    status = bench_cli("status", "-v", cwd=d)  # the table, then the sentences behind it
    assert status.returncode == 0, status.stderr
    expected = [ln for ln in status.stdout.splitlines() if ": measured " in ln]
    assert len(expected) == 3 and all("tokens/s" in ln for ln in expected) and "img/s" not in status.stdout
    # The co-located probes stand for the transformer's cells as for ResNet-50's: one compute probe (same compute),
    # and an engine probe for each stack (Horovod, DDP, FSDP2), on which the expected values rest.
    assert all("(engine probe: 2 × " in ln for ln in expected), expected
    assert re.search(r"compute probe for .*: 2 plain processes at once: [\d,]+ tokens/s each", status.stdout)
    engines = re.findall(r"engine probe for .*: 2 ranks, engine up, no gradient traffic: [\d,]+ tokens/s each",
                         status.stdout)
    assert len(engines) == 3, status.stdout
    # what the gradients add: Horovod's and DDP's collectives timed alone, FSDP2's as its steps with sync on less off
    engine_of = {ln.split()[0]: next((e for e in ("ddp", "fsdp2") if f"+{e}/" in ln), "horovod") for ln in expected}
    lines = {engine_of[ln.split()[3].rstrip(":")]: ln for ln in status.stdout.splitlines()
             if ln.lstrip().startswith("engine probe for ")}
    assert re.search(r"one step's gradient sync, its steps with it on less off: \d\.\d{3} s", lines["fsdp2"]), lines
    assert all("one step's gradient collectives timed alone: " in lines[e] for e in ("horovod", "ddp")), lines
    history = bench_cli("history", cwd=d)
    assert history.returncode == 0 and "tokens/s" in history.stdout and "img/s" not in history.stdout


def test_check_between_two_runs_carries_the_unit(workdir):
    d, _ = workdir
    again = bench_cli("run", "m.yaml", "--no-probe", "--rerun", "--where", "engine=native", cwd=d, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    runs = list(dict.fromkeys(_rows(d).sort_values("written_unix")["run_id"]))
    check = bench_cli("check", "--baseline", f"run:{runs[0]}", "--candidate", f"run:{runs[1]}",
                      "--json", "check.json", cwd=d)
    assert check.returncode in (0, 1), check.stderr
    assert "tokens/s" in check.stdout + check.stderr and "img/s" not in check.stdout + check.stderr
    doc = json.loads((d / "check.json").read_text())
    assert {(c["rate_unit"], c["units_per_sample"]) for c in doc["cells"]} == {("tokens/s", SEQ)}
    [compared] = [c for c in doc["cells"] if c["n_candidate"]]  # the DDP cell, measured in both runs
    assert compared["keys"]["engine"] == "native" and compared["baseline_median"] > 0


def test_the_report_has_a_tokens_section_and_no_image_section_shows_them(workdir):
    d, _ = workdir
    report = bench_cli("report", cwd=d)
    assert report.returncode == 0, report.stderr
    md = (d / "reports" / "summary.md").read_text()
    sections = re.split(r"^## ", md, flags=re.M)
    [tfm] = [s for s in sections if s.startswith("Transformer language models (tokens/s)")]
    assert len(re.findall(r"^\| cpu/tiny:pytorch", tfm, re.M)) == 4
    assert re.search(r"\| [\d,]+ tokens/s \|", tfm) and "MiB" in tfm and "CPU: no peak" in tfm
    for other in sections:
        if not other.startswith("Transformer") and "images/sec" in other:
            assert "tiny:" not in other, other[:200]
