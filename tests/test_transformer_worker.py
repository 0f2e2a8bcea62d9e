"""The transformer worker (models/workloads/transformer/pytorch_worker.py) run for real: one process, and two ranks
under torchrun with DDP and FSDP2; its records' rates add up (tokens/s = sequences/s × tokens per sequence, sequences =
steps × micro-batch × accumulation × ranks), the loss falls, a step that does not train is refused, and bad settings get
one line and exit 2 before anything trains."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.workload

WORKER = ROOT / "models" / "workloads" / "transformer" / "pytorch_worker.py"
SMALL = ["--steps", "4", "--repeats", "2", "--warmup-steps", "2", "--threads", "1"]


def run(tmp_path, *flags, ranks=1, timeout=300):
    out = tmp_path / "records.jsonl"
    program = [str(WORKER), *flags, "--out", str(out)]
    if ranks == 1:
        argv = [sys.executable, *program]
    else:
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
                *program]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return result, records


def check_rates(record, ranks, micro, accum, steps=4):
    assert record["world_size"] == ranks and record["status"] == "ok"
    assert record["samples"] == steps * micro * accum * ranks
    assert record["samples_per_sec"] == pytest.approx(record["samples"] / record["window_s"], rel=1e-9)
    assert record["tokens_per_sec"] == pytest.approx(record["samples_per_sec"] * record["tokens_per_sample"],
                                                     rel=1e-9)
    assert record["flops_per_sample"] > 0 and record["sdpa_kernel"] != "unknown"
    assert len(record["peak_memory"]["bytes_per_rank"]) == ranks
    assert record["loss"] < record["loss_initial"]


def test_one_process_trains_and_its_rates_add_up(tmp_path):
    result, records = run(tmp_path, "--engine", "native", "--batch-size", "4", "--grad-accum", "2", *SMALL)
    # DDP without a launcher's rank variables: one line, nothing trained
    assert result.returncode == 2 and records == [] and "from its launcher" in result.stderr
    result, records = run(tmp_path, "--engine", "horovod", "--batch-size", "4", "--grad-accum", "2", *SMALL)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(records) == 2
    for r in records:
        check_rates(r, 1, 4, 2)
    assert "tokens/s" in result.stdout


@pytest.mark.parametrize("engine", ["native", "fsdp2"])
def test_two_ranks_under_torchrun(tmp_path, engine):
    result, records = run(tmp_path, "--engine", engine, "--batch-size", "2", *SMALL, ranks=2)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert [r["engine"] for r in records] == [engine, engine]
    for r in records:
        check_rates(r, 2, 2, 1)
    if engine == "fsdp2":
        assert records[0]["fsdp"]["reshard_after_forward"] == {"blocks": True, "root": False}


def test_a_token_file_feeds_the_model(tmp_path):
    tokens = tmp_path / "train.bin"
    # a repeating sentence: learnable, so the loss falls as on the synthetic language
    np.tile(np.arange(50, dtype=np.uint16), 400).tofile(tokens)
    result, records = run(tmp_path, "--data", "tokens", "--tokens-file", str(tokens), "--batch-size", "2", *SMALL)
    assert result.returncode == 0, result.stderr[-2000:]
    assert records[0]["data"] == "tokens"
    check_rates(records[-1], 1, 2, 1)


def test_a_token_file_shorter_than_a_window_is_one_line(tmp_path):
    tokens = tmp_path / "short.bin"
    np.arange(10, dtype=np.uint16).tofile(tokens)
    result, records = run(tmp_path, "--data", "tokens", "--tokens-file", str(tokens), *SMALL)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and records == [] and len(lines) == 1 and "fewer than one window" in lines[0]


def test_a_step_that_does_not_train_is_refused(tmp_path):
    result, records = run(tmp_path, "--lr", "0", "--batch-size", "2", "--warmup-steps", "16", "--steps", "4",
                          "--repeats", "1", "--threads", "1")
    assert result.returncode == 1
    assert records == []
    assert "the loss has not fallen" in result.stderr


@pytest.mark.parametrize("flags,why", [
    (["--model", "gpt5"], "unknown transformer 'gpt5'"),
    (["--model", "gpt2-124m", "--seq-len", "2048"], "1024 learned positions"),
    (["--precision", "fp16"], "precision=fp16 needs a GPU"),
    (["--precision", "fp16", "--engine", "fsdp2"], "no sharded loss scaler"),
    (["--data", "tokens"], "--data tokens needs --tokens-file"),
    (["--data", "tokens", "--tokens-file", "/nonexistent.bin"], "does not exist"),
    (["--grad-accum", "0"], "--grad-accum must be positive"),
])
def test_bad_settings_are_one_line_and_exit_2(tmp_path, flags, why):
    result, records = run(tmp_path, *flags, *SMALL)
    assert result.returncode == 2 and records == []
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and why in lines[0], result.stderr


def test_the_docs_worker_line_runs_as_written(tmp_path):
    doc = (ROOT / "docs" / "transformer.md").read_text(encoding="utf-8")
    lines = [line.strip() for line in doc.splitlines()
             if line.strip().startswith(".venv/bin/python models/workloads/transformer/pytorch_worker.py")]
    assert lines
    for line in lines:
        argv = [sys.executable, *line.split()[1:]]
        result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert result.returncode == 0, result.stderr[-2000:]
        assert "tokens/s" in result.stdout


def test_the_peer_benchmark_runs_both_sides(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "vs.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "transformer_vs_hf.py"), "--rounds", "1",
                             "--shapes", "tiny", "--steps", "2", "--windows", "1", "--warmup", "19", "--threads", "1",
                             "--batch", "2", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    figures = json.loads(out.read_text())["results"]["tiny"]
    assert set(figures["median_tokens_per_sec"]) == {"bench", "bench, no allocator setting", "transformers"}
    assert all(rate > 0 for rate in figures["median_tokens_per_sec"].values())
    assert figures["ratio_to_transformers"]["transformers"] == 1.0
