"""Bad matrices: one line on stderr naming file, line and key; exit 2; nothing run, nothing written."""
import os

import pytest

from bench.cli import main
from tests.conftest import bench_cli

GOOD_HEAD = "name: t\n"

# (matrix text, the line the error must name, words the message must contain)
CASES = [
    ("name: t\naxes: {gpu: [cpu]\n", 3, ["invalid YAML"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  gpu: [V100]\n", 4, ["duplicate key 'gpu'"]),
    ("name: t\nflavour: 1\naxes: {gpu: [cpu]}\n", 2, ["unknown key 'flavour'"]),
    ("name: t\nworkload:\n  batch: 3\naxes: {gpu: [cpu]}\n", 3, ["unknown key 'batch'", "batch_per_gpu"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  fabric: [true]\n", 4, ["unknown axis 'fabric'"]),
    ("name: t\naxes:\n  gpu:\n    - cpu\n    - V200\n", 5, ["axes.gpu[1]", "unknown gpu 'V200'"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  mpi: [openmpi, mvapich]\n", 4, ["axes.mpi[1]", "mvapich"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  gpus: ['2']\n", 4, ["axes.gpus[0]", "integer"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  gpus: [0]\n", 4, ["axes.gpus[0]", "between 1"]),
    ("name: t\nworkload:\n  steps: -5\naxes: {gpu: [cpu]}\n", 3, ["workload.steps", "must be greater than 0"]),
    ("name: t\nworkload:\n  precision: fp8\naxes: {gpu: [cpu]}\n", 3, ["workload.precision", "fp8"]),
    ("name: t\naxes:\n  gpu: []\n", 3, ["axes.gpu", "empty axis"]),
    ("name: t\naxes:\n  gpu: [cpu, cpu]\n", 3, ["duplicate value"]),
    ("name: t\naxes:\n  gpu: [cpu]\nexclude:\n  - {flavour: x}\n", 5, ["exclude[0]", "'flavour' is not an axis"]),
    ("name: t\naxes:\n  gpu: [cpu]\nexclude:\n  - {gpus: 2}\n", 5, ["exclude[0]", "'gpus' is not an axis"]),
    ("name: t\naxes:\n  gpu: [cpu]\ninclude:\n  - gpu: cpu\n    colour: red\n", 6, ["include[0]", "unknown key 'colour'"]),
    ("name: t\naxes:\n  gpu: [cpu]\ninclude:\n  - {gpu: cpu, precision: int4}\n", 5, ["include[0].precision"]),
    ("name: t\naxes:\n  gpu: [cpu]\ninclude:\n  - {}\n", 5, ["include[0]", "empty entry"]),
    ("axes:\n  gpu: [cpu]\n", 1, ["missing required key 'name'"]),
    ("name: t\naxes:\n  framework: [pytorch]\n", 2, ["missing required axis 'gpu'"]),
    ("name: t\naxes:\n  gpu: cpu\n", 3, ["axes.gpu", "valid list"]),
    ("name: t\naxes:\n  ib: [yes-please]\n  gpu: [cpu]\n", 3, ["axes.ib[0]", "boolean"]),
    ("name: t\naxes:\n" + "".join(f"  {k}: [{', '.join(str(i) for i in range(1, 31))}]\n"
                                  for k in ("gpus", "steps", "repeats", "batch_per_gpu", "warmup_steps"))
     + "  gpu: [cpu]\n", 2, ["product has", "limit"]),
    ("- just\n- a list\n", 1, ["must be a YAML mapping"]),
    ("name: t\nbackend: {name: kubernetes}\naxes: {gpu: [cpu]}\n", 2, ["backend.name"]),
]


@pytest.mark.parametrize("text,line,words", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_bad_matrix_gets_one_line_and_exit_2(tmp_path, capsys, monkeypatch, text, line, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text(text, encoding="utf-8")
    for verb in ("plan", "run"):
        rc = main([verb, "m.yaml"])
        err = capsys.readouterr().err
        assert rc == 2, err
        assert err.count("\n") == 1, err
        assert err.startswith(f"bench: error: m.yaml:{line}: "), err
        for word in words:
            assert word in err, err
    assert sorted(os.listdir(tmp_path)) == ["m.yaml"], "nothing may be written"


def test_non_utf8_file_and_directory_and_missing_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "latin1.yaml").write_bytes("name: caf\xe9\naxes: {gpu: [cpu]}\n".encode("latin-1"))
    (tmp_path / "adir").mkdir()
    for target, words in (("latin1.yaml", "latin1.yaml:1: not valid UTF-8"), ("adir", "adir: is a directory"),
                          ("nope.yaml", "nope.yaml: no such file")):
        assert main(["run", target]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err
    assert sorted(os.listdir(tmp_path)) == ["adir", "latin1.yaml"]


def test_usage_errors_exit_2_in_a_real_process(tmp_path):
    result = bench_cli("plan", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "usage" in result.stderr
    result = bench_cli("frobnicate", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
