"""Bad matrices: one line on stderr naming file, line and key; exit 2; nothing run, nothing written."""
import json
import os
import sqlite3

import pytest

from bench.cli import main
from bench.core.errors import BenchInputError
from bench.records.schema import parse_record
from tests.conftest import TINY_WORKLOAD, bench_cli
from tests.factories import record

GOOD_HEAD = "name: t\n"

# (matrix text, the line the error must name, words the message must contain)
CASES = [
    ("name: t\naxes: {gpu: [cpu]\n", 3, ["invalid YAML"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  gpu: [V100]\n", 4, ["duplicate key 'gpu'"]),
    ("name: t\nflavour: 1\naxes: {gpu: [cpu]}\n", 2, ["unknown key 'flavour'"]),
    ("name: t\nworkload:\n  batch: 3\naxes: {gpu: [cpu]}\n", 3, ["unknown key 'batch'", "batch_per_gpu"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  fabric: [true]\n", 4, ["unknown axis 'fabric'"]),
    ("name: t\naxes:\n  gpu:\n    - cpu\n    - V200\n", 5, ["axes.gpu[1]", "unknown gpu 'V200'"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  mpi: [openmpi, no-such-mpi]\n", 4, ["axes.mpi[1]", "no-such-mpi"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  gpus: ['2']\n", 4, ["axes.gpus[0]", "integer"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  gpus: [0]\n", 4, ["axes.gpus[0]", "between 1"]),
    ("name: t\nworkload:\n  steps: -5\naxes: {gpu: [cpu]}\n", 3, ["workload.steps", "must be greater than 0"]),
    ("name: t\nworkload:\n  precision: fp8\naxes: {gpu: [cpu]}\n", 3, ["workload.precision", "fp8"]),
    ("name: t\naxes:\n  gpu: []\n", 3, ["axes.gpu", "empty axis"]),
    ("name: t\naxes:\n  gpu: [cpu, cpu]\n", 3, ["duplicate value"]),
    ("name: t\naxes:\n  gpu: [cpu]\nexclude:\n  - {flavour: x}\n", 5, ["exclude[0]", "'flavour' is not an axis"]),
    ("name: t\naxes:\n  gpu: [cpu]\nexclude:\n  - {gpus: 2}\n", 5, ["exclude[0]", "'gpus' is not an axis"]),
    ("name: t\naxes:\n  gpu: [cpu]\ninclude:\n  - gpu: cpu\n    colour: red\n", 6,
     ["include[0]", "unknown key 'colour'"]),
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
    ("name: t\nbackend: {name: nomad}\naxes: {gpu: [cpu]}\n", 2, ["backend.name"]),
    ("name: t\nbackend: nomad\naxes: {gpu: [cpu]}\n", 2, ["backend.name", "nomad"]),
    # Issue 6: more shapes of bad input, each with the line it must name.
    ("name: t\naxes:\n\tgpu: [cpu]\n", 3, ["invalid YAML"]),
    ("name: t\nworkload:\n  batch_per_gpu: 0\naxes: {gpu: [cpu]}\n", 3, ["workload.batch_per_gpu", "greater than 0"]),
    ("name: t\nworkload:\n  image_size: -224\naxes: {gpu: [cpu]}\n", 3, ["workload.image_size"]),
    ("name: t\nworkload:\n  repeats: 1.5\naxes: {gpu: [cpu]}\n", 3, ["workload.repeats", "integer"]),
    ("name: t\nworkload:\n  steps: .inf\naxes: {gpu: [cpu]}\n", 3, ["workload.steps", "inf"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  gpus: [-2]\n", 4, ["axes.gpus[0]", "between 1"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  steps: [true]\n", 4, ["axes.steps[0]", "integer"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  batch_per_gpu: [0]\n", 4, ["axes.batch_per_gpu[0]", "greater than 0"]),
    ("name: ''\naxes: {gpu: [cpu]}\n", 1, ["name", "at least 1 character"]),
    ("name: t\ndescription: 5\naxes: {gpu: [cpu]}\n", 2, ["description", "string"]),
    ("name: t\nbackend: {timeout_s: 0}\naxes: {gpu: [cpu]}\n", 2, ["backend.timeout_s", "greater than 0"]),
    ("name: t\nbackend:\n  imagenet_sample: {classes: 0, per_class: 1}\naxes: {gpu: [cpu]}\n", 3,
     ["backend.imagenet_sample.classes"]),
    ("name: t\nbackend: {imagenet_dir: 5}\naxes: {gpu: [cpu]}\n", 2, ["backend.imagenet_dir", "string"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  gpus: [2]\nexclude:\n  - {gpus: two}\n", 6, ["exclude[0].gpus", "integer"]),
    ("name: t\naxes:\n  gpu: [cpu]\ninclude:\n  - {gpu: cpu, fabric: ib}\n", 5, ["include[0]", "unknown key 'fabric'"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  mpi: ['openmpi; rm -rf /']\n", 4, ["axes.mpi[0]", "openmpi; rm -rf /"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  framework: ['$(touch pwned)']\n", 4, ["axes.framework[0]"]),
    ("name: t\naxes:\n  gpu: ['cpu`id`']\n", 3, ["axes.gpu[0]", "unknown gpu"]),
    ("name: t\naxes:\n  gpu: [cpu]\ninclude:\n  - {gpu: cpu, mpi: \"gloo\\nrm -rf /\"}\n", 5, ["include[0].mpi"]),
    ("name: !!python/object:os.system x\naxes: {gpu: [cpu]}\n", 1, ["invalid YAML value"]),
    ("name: t\n? [a, b]\n: c\naxes: {gpu: [cpu]}\n", 2, ["mapping keys must be plain scalars"]),
    ("name: t\naxes: &a {gpu: [cpu], x: *a}\n", 2, ["nested over 50 deep"]),
    ("name: t\n" + "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9 if i else ['x'] * 9)}]\n" for i in range(8))
     + "axes: {gpu: [cpu]}\n", 2, ["more than 100,000 values"]),
    ("name: t\nworkload: {<<: {steps: 3}}\naxes: {gpu: [cpu]}\n", 2, ["merge keys"]),
    ("name: t\naxes:\n  gpu: [cpu]\n  precision: [fp32, {fp: 16}]\n", 4, ["axes.precision[1]"]),
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


# --- Issue 6: bad records, bad stores, and matrix values that look like shell -----------------------------------

NAN_RECORD = json.dumps(record()).replace('"samples_per_sec": ', '"samples_per_sec": NaN, "x": ', 1)

# (a worker's record: JSON text or a dict, words the one-line error must contain)
BAD_RECORDS = [
    (NAN_RECORD, ["not a valid JSON record", "NaN"]),
    ({**record(), "samples_per_sec": float("nan")}, ["samples_per_sec", "finite positive"]),
    ({**record(), "samples_per_sec": -12.5}, ["samples_per_sec", "finite positive"]),
    ({**record(), "samples_per_sec": 1e12}, ["samples_per_sec", "finite positive"]),
    ({**record(), "samples_per_sec": float("inf")}, ["samples_per_sec", "finite positive"]),
    (json.dumps(record())[:57], ["not a valid JSON record"]),
    ("[1, 2, 3]", ["must be a JSON object"]),
    ({**record(), "shoe_size": 44}, ["shoe_size", "Extra inputs"]),
    ({**record(), "status": "fine"}, ["status"]),
    ({**record(), "schema": 99}, ["newer than this bench"]),
    ({**record(), "samples": 1}, ["samples 1 != sum of per-rank samples"]),
    ({**record(), "status": "failed"}, ["must say why"]),
    ({**record(), "window_s": 0}, ["window_s", "greater than 0"]),
    ({k: v for k, v in record().items() if k != "run_id"}, ["run_id", "Field required"]),
]


@pytest.mark.parametrize("raw,words", BAD_RECORDS, ids=[f"record{i}" for i in range(len(BAD_RECORDS))])
def test_bad_record_is_one_line_naming_where_and_the_store_is_unchanged(tmp_path, raw, words):
    from bench.store import Store

    with Store(tmp_path / "b.db") as store:
        store.write(parse_record(record(run_id="kept")))
        before = store.records()
        with pytest.raises(BenchInputError) as e:
            store.write(parse_record(raw, where="records.jsonl:3"))
        assert store.records() == before
    message = str(e.value)
    assert message.startswith("records.jsonl:3: ") and "\n" not in message, message
    for word in words:
        assert word in message, message


def test_a_bad_worker_record_fails_its_cell_instead_of_reaching_the_store_as_a_measurement():
    from bench.backends.shared.outcome import Outcome
    from bench.execution.runner import records_for
    from bench.planning.cell import PlannedCell

    raw = {**record(run_id="r"), "samples_per_sec": -1.0}
    cell = PlannedCell(raw["cell"], raw["cell_id"], "planned")
    records, outcome = records_for(cell, "r", 0, Outcome("ok", [raw]), ["mpirun"], {})
    assert outcome.status == "failed" and "finite positive" in outcome.reason
    assert [r.status for r in records] == ["failed"]


def _store(path, kind: str):
    from bench.store import Store

    if kind == "not sqlite":
        path.write_bytes(b"id,samples_per_sec\n1,200\n" * 40)
    elif kind == "newer schema":
        Store(path).close()
        conn = sqlite3.connect(path)
        conn.execute("INSERT INTO schema_version VALUES (99)")
        conn.commit()
        conn.close()
    elif kind == "truncated sqlite":
        Store(path).close()
        path.write_bytes(path.read_bytes()[:1500])
    elif kind == "a directory":
        path.mkdir()
    elif kind == "empty header, garbage":
        path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)


STORE_CASES = [("not sqlite", "not a SQLite database"), ("newer schema", "store schema 99 is newer"),
               ("truncated sqlite", "not a usable SQLite store"), ("a directory", "is a directory"),
               ("empty header, garbage", "not a usable SQLite store")]


@pytest.mark.parametrize("kind,words", STORE_CASES, ids=[k for k, _ in STORE_CASES])
def test_bad_store_is_refused_before_anything_runs_and_left_byte_identical(tmp_path, capsys, monkeypatch, kind,
                                                                           words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text("name: t\naxes: {gpu: [cpu]}\n", encoding="utf-8")
    store = tmp_path / "results" / "bench.db"
    store.parent.mkdir()
    _store(store, kind)
    before = {p.name: (p.read_bytes() if p.is_file() else None) for p in store.parent.iterdir()}
    assert main(["run", "m.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bench: error: results/bench.db: ") and words in err, err
    after = {p.name: (p.read_bytes() if p.is_file() else None) for p in store.parent.iterdir()}
    assert after == before, "the store (and its directory) must be left exactly as it was"


SHELLY_DIR = "evil dir; touch PWNED1 $(touch PWNED2) `touch PWNED3` 'q\"\n&& touch PWNED4 #"


def test_shell_looking_values_reach_the_launcher_as_single_argv_elements(tmp_path, monkeypatch):
    from bench.backends.local.backend import LocalBackend
    from bench.planning.matrix import load_matrix_text
    from bench.planning.plan import plan_cells

    monkeypatch.chdir(tmp_path)
    (tmp_path / SHELLY_DIR / "train" / "n0001").mkdir(parents=True)
    text = f"""name: t
workload: {{data: imagenet}}
axes: {{gpu: [cpu], mpi: [openmpi, gloo, mpich, intelmpi], gpus: [1]}}
backend: {{imagenet_dir: {json.dumps(SHELLY_DIR)}}}
"""
    matrix = load_matrix_text(text, "m.yaml")
    backend = LocalBackend(tmp_path / "results", 60, imagenet_dir=matrix.spec.backend.imagenet_dir)
    rendered = 0
    for planned in plan_cells(matrix.cells(), backend):
        if not planned.runnable:
            continue
        argv = backend.describe(planned, "RUN")["argv"]
        i = argv.index("--data-dir")
        assert argv[i + 1] == str(tmp_path / SHELLY_DIR), argv  # one element, byte for byte
        assert not any("PWNED" in a for j, a in enumerate(argv) if j != i + 1), argv
        rendered += 1
    assert rendered >= 2


@pytest.mark.e2e
def test_shell_looking_data_dir_runs_for_real_under_mpirun_and_horovodrun_without_a_shell(tmp_path):
    (tmp_path / "m.yaml").write_text(f"""
name: shelly
{TINY_WORKLOAD}
  data: imagenet
  loader_workers: 1
axes:
  gpu: [cpu]
  mpi: [openmpi, gloo]
  gpus: [1]
backend:
  imagenet_dir: {json.dumps(SHELLY_DIR)}
  imagenet_sample: {{classes: 2, per_class: 4}}
""", encoding="utf-8")
    result = bench_cli("run", "m.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert not list(tmp_path.rglob("PWNED*")), "a matrix value was run by a shell"
    with sqlite3.connect(tmp_path / "results" / "bench.db") as conn:
        rows = conn.execute("SELECT mpi, status, record_json FROM records").fetchall()
    assert sorted((m, s) for m, s, _ in rows) == [("gloo", "ok"), ("gloo", "ok"), ("openmpi", "ok"), ("openmpi", "ok")]
    for _, _, rec in rows:
        command = json.loads(rec)["command"]
        assert command[command.index("--data-dir") + 1] == str(tmp_path / SHELLY_DIR)
