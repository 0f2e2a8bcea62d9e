"""Every verb on generated arguments: exit 0, 1 or 2 with at most one line on stderr for an error, never a traceback
and never exit 70 (an internal error, a bug).

The fuzz is of the parsers and the input files, not of side effects: it runs `bench.cli.main` in this process, in a
temporary folder, on the verbs that only read their inputs or write under that folder (`run`, `ab`, `doctor` and
`images build|check` start jobs or builds and are left out; `diagnose` gets its hosts from the fuzzed inputs, and its
ssh probes are replaced by a stand-in that refuses any host outside the reserved `.invalid` domain, RFC 6761). The
inputs are files a user may hand bench by mistake: none, empty, a directory, text that is not what the option expects,
a corrupt store, a valid store and matrix.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.backends.hosts import probes as hosts_probes
from bench.cli import main
from bench.records.schema import parse_record
from bench.store import Store
from tests.factories import record

# 100 fresh draws a run (~0.5 s each, `report` the dearest): with no example database every run of the suite draws
# anew, so CI's runs together go wider than one run of 200 did, at half its minutes.
FUZZ = settings(max_examples=100, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# The verbs (and sub-verbs) fuzzed; their options and positional arguments are read from bench's own parser.
VERBS = [("plan",), ("status",), ("report",), ("export",), ("import",), ("check",), ("baseline", "save"),
         ("baseline", "list"), ("history",), ("model",), ("images", "list"), ("diagnose",),
         ("data", "make-imagenet-sample")]
# Options left out: help exits through argparse; --hosts/--hostfile name hosts (the fuzz's hosts come from files).
NOT_FUZZED = {"--hosts", "--hostfile", "-h", "--help"}
# Values: the files made below (by name), numbers at and past the edges, selections, odd text.
VALUES = [
    "missing.db", "empty.db", "corrupt.db", "store.db", "dir", "matrix.yaml", "hosts.yaml", "bad.yaml", "empty.txt",
    "records.csv", "binary.bin", "out/x.csv", "out/x.json", "dir/x.xml", "/proc/none/x", "latest", "run:r1",
    "baseline:b", "b", "../escape", "r1", "0", "1", "-1", "0.5", "2", "1e309", "nan", "inf", "", " ", "none",
    "ratio-to:gpus=1", "ratio-to:", "ratio-to:nosuchkey=1", "gpus=1|2", "gpu=cpu,ib=on", "ib=maybe", "gpus=x",
    "abc123def456", "json", "csv", "parquet", "table", "records", "collectives", "local", "hosts", "compute",
    "links", "node1.invalid", "é", "$(x)", "a;b", "-", "--", "\x00",
]


def _make_inputs(d: Path) -> None:
    (d / "empty.db").write_bytes(b"")
    (d / "corrupt.db").write_bytes(b"SQLite format 3\x00" + os.urandom(2000))
    (d / "dir").mkdir()
    (d / "empty.txt").write_text("")
    (d / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (d / "bad.yaml").write_text("name: [unclosed\naxes: {gpu: cpu\n")
    (d / "matrix.yaml").write_text("name: t\naxes: {gpu: [cpu], gpus: [1, 2]}\nworkload: {steps: 2, repeats: 1}\n")
    (d / "hosts.yaml").write_text("name: t\naxes: {gpu: [cpu]}\nbackend:\n  name: hosts\n"
                                  "  hosts: {hosts: [node1.invalid, node2.invalid]}\n")
    (d / "records.csv").write_text("cell_id,gpu\nx,cpu\n")
    with Store(d / "store.db") as store:
        store.begin_run("r1", matrix_name="t", matrix_path="m.yaml", backend="local", host="h", bench_version="0",
                        plan={})
        for gpus in (1, 2):
            for repeat in range(3):
                data = record(run_id="r1", gpus=gpus, repeat=repeat)
                data["per_rank"] = [{**r, "host": f"node{r['rank'] + 1}.invalid"} for r in data["per_rank"]]
                store.write(parse_record({**data, "job": 0}))
        store.finish_run("r1")
    sqlite3.connect(d / "store.db").close()


def _no_probes(hosts, *args, **kwargs):
    assert all(h.endswith(".invalid") for h in hosts), hosts  # only reserved names reach here
    raise hosts_probes.ProbeError("not probed in the fuzz")


@pytest.fixture(scope="module")
def inputs():
    d = Path(tempfile.mkdtemp(prefix="bench-fuzz-cli-"))
    _make_inputs(d)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _parser_of(verb: tuple[str, ...]):
    from bench.cli import build_parser

    parser = build_parser()
    for word in verb:
        parser = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices[word]
    return parser


SHAPES = {verb: [a for a in _parser_of(verb)._actions if not set(a.option_strings) & NOT_FUZZED] for verb in VERBS}
# Values by what an argument names (its dest), mostly of the right kind, so the verbs get past their parsers too.
STORES = ["store.db", "store.db", "missing.db", "empty.db", "corrupt.db", "dir", "matrix.yaml"]
FILES = ["matrix.yaml", "hosts.yaml", "bad.yaml", "empty.txt", "records.csv", "binary.bin", "missing.yaml", "dir"]
OUTPUTS = ["out/x.csv", "out/x.json", "x.xml", "dir", "/proc/none/x", "dir/x.xml"]
NUMBERS = ["0", "1", "-1", "0.5", "2", "1e309", "nan", "inf", "x"]
RUNS = ["latest", "run:r1", "r1", "nope", "baseline:b", "b", "store.db", "../escape"]
SELECTIONS = ["gpus=1", "gpus=1|2", "gpu=cpu,ib=on", "ib=maybe", "gpus=x", "nosuchkey=1", "abc123def456",
              "ratio-to:gpus=1", "ratio-to:gpus=2", "ratio-to:", "none", ""]
BY_DEST = {"store": STORES, "matrix": FILES, "file": FILES, "prices": FILES, "out": OUTPUTS, "output": OUTPUTS,
           "json_path": OUTPUTS, "junit_path": OUTPUTS, "baselines_dir": ["baselines", "dir", "missing", "empty.txt"],
           "baseline": RUNS, "candidate": RUNS, "run": RUNS, "name": ["b", "ci-cpu", "../escape", "", "a b"],
           "where": SELECTIONS, "cell": SELECTIONS, "normalize": SELECTIONS, "min_effect": NUMBERS,
           "min_shift": NUMBERS, "overlap": NUMBERS, "classes": ["1", "0", "-1", "x"], "per_class": ["1", "0", "x"],
           "source": ["ref", "", "../x", "a;b"]}


def _value(draw, action) -> str:
    pool = [str(c) for c in action.choices] if action.choices else BY_DEST.get(action.dest, VALUES)
    return draw(st.sampled_from(pool if draw(st.integers(0, 5)) else VALUES))  # now and then anything at all


def _argv(draw) -> list[str]:
    """Mostly well-shaped (each positional given, each option with a value where it takes one), sometimes not."""
    verb = draw(st.sampled_from(VERBS))
    argv = list(verb)
    for action in SHAPES[verb]:
        if not action.option_strings:  # a positional
            if draw(st.integers(0, 9)):
                argv.append(_value(draw, action))
            continue
        if not (action.required or draw(st.booleans())):
            continue
        argv.append(action.option_strings[-1])
        if action.nargs != 0:
            argv.append(_value(draw, action))
    if not draw(st.integers(0, 7)):
        argv.insert(draw(st.integers(1, len(argv))), draw(st.sampled_from(["--no-such-option", *VALUES])))
    return argv


@pytest.mark.slow
@FUZZ
@given(data=st.data())
def test_no_input_gets_a_traceback(inputs, data, capsys, monkeypatch):
    argv = _argv(data.draw)
    work = Path(tempfile.mkdtemp(dir=inputs))  # a fresh folder per example, beside the shared input files
    for item in inputs.iterdir():
        if item.is_file() or item.name == "dir":
            target = work / item.name
            if item.is_dir():
                target.mkdir()
            else:
                shutil.copyfile(item, target)  # a verb may write to a store it is given: each example its own copy
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(work))  # where an internal error would keep its traceback
    monkeypatch.setattr(hosts_probes, "diagnose", _no_probes)  # diagnose's inputs are fuzzed, its ssh probes not
    if argv[:2] == ["data", "make-imagenet-sample"]:
        argv += ["--classes", "1", "--per-class", "1"]  # small, whatever else was drawn: argparse keeps the last
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's --help path; no option drawn asks for it
        pytest.fail(f"bench {argv} raised SystemExit({e.code})")
    err = capsys.readouterr().err
    assert code in (0, 1, 2), f"bench {argv} exited {code}: {err}"
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("bench: error: "), f"bench {argv}: {err}"
    assert "Traceback" not in err, f"bench {argv}: {err}"
