"""`bench data make-token-sample`: a nanoGPT-layout token file from local text, with no download, that the
transformer worker reads; bad input is one line and exit 2 with nothing written."""
import json

import numpy as np
import pytest

from bench.cli import main
from tests.conftest import ROOT


def test_the_file_is_the_texts_bytes_back_to_back_with_a_description(tmp_path, capsys):
    src = tmp_path / "text"
    src.mkdir()
    (src / "a.md").write_text("hello tokens " * 100, encoding="utf-8")
    (src / "b.txt").write_text("é" * 600, encoding="utf-8")  # two UTF-8 bytes each
    (src / "skip.bin").write_bytes(b"\x00" * 5000)  # not a text suffix
    out = tmp_path / "out" / "train.bin"
    assert main(["data", "make-token-sample", str(out), "--from", str(src)]) == 0
    ids = np.fromfile(out, dtype=np.uint16)
    expected = (("hello tokens " * 100).encode() + ("é" * 600).encode())
    assert ids.tolist() == list(expected)
    meta = json.loads((tmp_path / "out" / "train.bin.json").read_text())
    assert (meta["tokens"], meta["vocab"], meta["dtype"], len(meta["sources"])) == (len(expected), 256, "uint16", 2)
    assert f"{len(expected):,} tokens" in capsys.readouterr().out


def test_asked_for_more_tokens_than_the_text_it_repeats_it(tmp_path):
    out = tmp_path / "t.bin"
    assert main(["data", "make-token-sample", str(out), "--from", str(ROOT / "Makefile"), "--tokens", "100000",
                 "--dtype", "uint32"]) == 0
    ids = np.fromfile(out, dtype=np.uint32)
    text = (ROOT / "Makefile").read_bytes()
    assert len(ids) == 100_000 and ids[: len(text)].tolist() == list(text) and ids[len(text)] == text[0]


@pytest.mark.parametrize("args,words", [
    (["--from", "/no/such/place"], "/no/such/place: no such file or folder"),
    (["--tokens", "0"], "--tokens must be at least 1"),
])
def test_bad_input_is_one_line_and_nothing_written(tmp_path, capsys, args, words):
    out = tmp_path / "t.bin"
    assert main(["data", "make-token-sample", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err and not out.exists()


def test_too_little_text_is_refused(tmp_path, capsys):
    (tmp_path / "tiny.txt").write_text("short", encoding="utf-8")
    assert main(["data", "make-token-sample", str(tmp_path / "t.bin"), "--from", str(tmp_path / "tiny.txt")]) == 2
    assert "5 tokens of text; a token file needs at least 1024" in capsys.readouterr().err


@pytest.mark.workload
def test_the_transformer_worker_trains_on_it(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "train.bin"
    assert main(["data", "make-token-sample", str(out)]) == 0  # this checkout's README and docs
    records = tmp_path / "r.jsonl"
    worker = ROOT / "models" / "workloads" / "transformer" / "pytorch_worker.py"
    run = subprocess.run([sys.executable, str(worker), "--model", "tiny",
                          "--engine", "none", "--data", "tokens", "--tokens-file", str(out), "--batch-size", "2",
                          "--steps", "6", "--repeats", "1", "--warmup-steps", "2", "--threads", "1",
                          "--no-hold-freed-memory", "--out", str(records)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    [rec] = [json.loads(line) for line in records.read_text().splitlines()]
    assert rec["data"] == "tokens" and rec["loss"] < rec["loss_initial"]
