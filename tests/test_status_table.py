"""`bench status`'s table (issue 64, item 4) on a real store: report_stores.write_full_store's records, written through
the real record model (three GPUs, two frameworks, two MPI flavours, ImageNet, fp16, a failed cell, an imported
reference, allreduce sweeps and the tiny transformer), with a run entry so the run's line has its matrix and backend.
One row per cell, grouped by run and workload, no line over 120 columns in a pipe, a verdict on every row; -v, --cell,
--where and --format json|md; and bad input in one line, exit 2."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys

import pytest

from bench.cli import main
from tests.conftest import ROOT, bench_cli
from tests.report_stores import write_full_store

SCHEMA = json.loads((ROOT / "docs" / "ci" / "status-result.schema.json").read_text(encoding="utf-8"))
VERDICT_AT_END = re.compile(r"(as expected|below expected by -?\d+%|above expected by -?\d+%|not measured apart|"
                            r"no expected value)$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from bench.store import Store

    path = tmp_path_factory.mktemp("status") / "bench.db"
    write_full_store(path)
    with Store(path) as s:
        s.begin_run("r1", matrix_name="full", matrix_path="m.yaml", backend="local", host="h", bench_version="0",
                    plan={})
        s.finish_run("r1")
    return path


def cells(path) -> dict[str, list[float]]:
    """The cells the table must show, read from the store with SQL (not with bench's analysis): every measured
    training cell whose latest run completed it, with its ok windows' samples/s. The full store's failed cell has
    no ok record, and its earlier runs of one cell leave r1 that cell's latest."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT cell_id, run_id, samples_per_sec FROM records WHERE status = 'ok' AND "
                            "run_id NOT LIKE 'import:%' AND model != 'allreduce'").fetchall()
    out: dict[str, list[float]] = {}
    for cell_id, run_id, rate in rows:
        if run_id == "r1":
            out.setdefault(cell_id, []).append(rate)
    return out


def status(path, *args: str) -> tuple[int, str, str]:
    """`bench status --store PATH ARGS` in this process (stdout is no terminal here): exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["status", "--store", str(path), *args])
    return code, out.getvalue(), err.getvalue()


def cell_lines(text: str, ids) -> dict[str, list[str]]:
    return {c: [line for line in text.splitlines() if c in line] for c in ids}


@pytest.mark.slow
def test_one_line_per_cell_none_over_120_columns_in_a_pipe_whatever_the_terminal(store):
    ids = cells(store)
    assert len(ids) == 15  # the store's 13 ResNet-50 cells and 2 transformer cells (sweeps and the failed cell: none)
    narrow = bench_cli("status", "--store", str(store), cwd=store.parent, env={"COLUMNS": "40", "FORCE_COLOR": "1"})
    wide = bench_cli("status", "--store", str(store), cwd=store.parent, env={"COLUMNS": "300"})
    assert narrow.returncode == 0 and wide.returncode == 0, narrow.stderr + wide.stderr
    assert narrow.stdout == wide.stdout  # a pipe: 120 columns and no colour, whatever COLUMNS or FORCE_COLOR say
    text = wide.stdout
    assert not ANSI.search(text)
    assert max(len(line) for line in text.splitlines()) <= 120
    assert all(line == line.rstrip() for line in text.splitlines())
    assert {c: len(lines) for c, lines in cell_lines(text, ids).items()} == {c: 1 for c in ids}
    # the default is the table: none of the sentences -v adds
    assert "expected vs measured" not in text and "MFU" not in text and ": measured " not in text


def test_every_row_has_its_verdict_and_the_table_agrees_with_the_json(store):
    code, text, _ = status(store)
    assert code == 0
    rows = {r["cell_id"]: r for r in json.loads(status(store, "--format", "json")[1])}
    for cell_id, (line,) in cell_lines(text, cells(store)).items():
        assert VERDICT_AT_END.search(line), line
        assert line.endswith(rows[cell_id]["verdict_text"]), line
    assert {r["verdict"] for r in rows.values()} == {"as expected", "above expected", "no expected value"}
    # a 1-worker cell has no expected value; a 2-worker cell with a 1-worker twin has one, shown with its interval
    one = next(r for r in rows.values() if r["label"] == "cpu/pytorch/gloo/ib=off/1w fp32")
    two = next(r for r in rows.values() if r["label"] == "cpu/pytorch/gloo/ib=off/2w fp32")
    assert one["verdict"] == "no expected value" and one["expected"] is None
    assert two["expected_low"] <= two["expected"] <= two["expected_high"]
    (line,) = cell_lines(text, [two["cell_id"]])[two["cell_id"]]
    assert f"{two['expected']:,.1f} ({two['expected_low']:,.1f}–{two['expected_high']:,.1f})" in line
    assert f"{two['speedup']:.2f}×" in line and f"{100 * two['efficiency']:.0f}%" in line


def test_rows_are_grouped_by_run_and_by_workload_in_its_unit(store):
    code, text, _ = status(store)
    assert code == 0
    lines = text.splitlines()
    # the 15 training cells, the 2 allreduce sweeps and the failed cell
    assert lines[0] == "r1  full  local  cells run: 18  failed: 1  finished"
    ids = cells(store)
    rows = json.loads(status(store, "--format", "json")[1])
    tokens = {r["cell_id"] for r in rows if r["rate_unit"] == "tokens/s"}
    assert len(tokens) == 2 and all(r["workload"] == "Transformer language models (tokens/s)" for r in rows
                                    if r["cell_id"] in tokens)
    head = next(i for i, line in enumerate(lines) if "tokens/s (95% CI)" in line)
    at = {c: next(i for i, line in enumerate(lines) if c in line) for c in ids}
    assert all(at[c] > head for c in tokens) and all(at[c] < head for c in set(ids) - tokens)
    assert "img/s" not in "\n".join(lines[head:])
    # the rate in the cell's unit: the median window × the tokens in a sequence (128)
    for r in rows:
        per = 128 if r["cell_id"] in tokens else 1
        assert r["rate"] == pytest.approx(statistics.median(ids[r["cell_id"]]) * per)
        assert r["rate_low"] <= r["rate"] <= r["rate_high"]


def test_the_json_validates_against_its_schema(store):
    import jsonschema

    code, text, _ = status(store, "--format", "json")
    assert code == 0
    rows = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(rows, SCHEMA)
    assert sorted(r["cell_id"] for r in rows) == sorted(cells(store))
    with pytest.raises(jsonschema.ValidationError):  # the schema holds: a row without its verdict fails it
        jsonschema.validate([{k: v for k, v in rows[0].items() if k != "verdict"}], SCHEMA)


def test_markdown_is_one_github_table_of_every_cell(store):
    code, text, _ = status(store, "--format", "md")
    assert code == 0
    head, rule, *body = text.splitlines()
    assert head.startswith("| run | cell_id | cell | rate |") and head.endswith("| verdict |")
    assert re.fullmatch(r"\|(-+:?\|)+", rule.replace("---:", "---"))
    columns = head.count("|") - 1
    assert len(body) == len(cells(store)) and all(r.count("|") - 1 == columns for r in body)
    assert all(VERDICT_AT_END.search(r.removesuffix(" |")) for r in body)
    assert sum("tokens/s" in r for r in body) == 2


def test_verbose_adds_todays_sentences_after_the_table(store):
    from bench.analysis.mfu import with_power
    from bench.commands.lines import expected_lines, mfu_lines, probe_entries
    from bench.report.power import power_records
    from bench.store import Store

    with Store(store, read_only=True) as s:
        records = s.dataframe(record_json=False)
        prose = expected_lines(records, s.collectives(), s.rank_windows(), probe_entries(store))
        gpu = mfu_lines(with_power(records, power_records(s, records)))
    assert len(prose) == 9 and len(gpu) == 5  # the 9 multi-worker cells; the V100 and A100 cells
    code, text, _ = status(store, "-v")
    assert code == 0
    lines = text.splitlines()
    table_end = next(i for i, line in enumerate(lines) if "cell(s) complete in" in line)
    assert lines[table_end + 2] == "expected vs measured (latest complete run of each cell):"
    assert lines[table_end + 3:table_end + 3 + len(prose)] == prose
    assert all(line in lines for line in gpu) and "MFU (model FLOPs ÷ dense peak)" in text
    assert "no expected value: no 1-worker cell with real data" in text
    assert text.startswith(status(store)[1].split("\n", 1)[0])  # the run's line, as the table's


def test_one_cell_by_a_prefix_of_its_id(store):
    ids = cells(store)
    target = next(c for c in ids if not any(o != c and o.startswith(c[:6]) for o in ids))
    code, text, err = status(store, "--cell", target[:6])
    assert code == 0 and err == ""
    assert [c for c in ids if c in text] == [target]
    rows = json.loads(status(store, "--cell", target, "--format", "json")[1])
    assert [r["cell_id"] for r in rows] == [target]
    if rows[0]["gpus"] > 1:
        assert f"  {target}  {rows[0]['label']}: " in text  # its sentence


@pytest.mark.parametrize("args, says", [
    (("--cell", "fedcba987654"), "fedcba987654"),
    (("--where", "nosuchkey=1"), "unknown key 'nosuchkey'"),
    (("--where", "gpu=H100"), "matches none"),
    (("--format", "nope"), "invalid choice: 'nope'"),
])
def test_bad_input_is_one_line_and_exit_2(store, args, says):
    code, text, err = status(store, *args)
    assert code == 2 and text == ""
    assert len(err.splitlines()) == 1 and says in err, err


def test_where_selects_cells_as_plan_does(store):
    code, text, _ = status(store, "--where", "gpu=V100,gpus=2")
    assert code == 0
    rows = json.loads(status(store, "--where", "gpu=V100,gpus=2", "--format", "json")[1])
    assert len(rows) == 2 and {r["gpu"] for r in rows} == {"V100"} and {r["gpus"] for r in rows} == {2}
    assert [c for c in cells(store) if c in text] == [c for c in cells(store) if c in {r["cell_id"] for r in rows}]
    verbose = status(store, "--where", "gpu=V100,gpus=2", "-v")[1]
    said = [line for line in verbose.splitlines() if line.startswith("  ") and ": " in line and "·" not in line]
    assert said and all(any(r["cell_id"] in line for r in rows) for line in said)  # only the chosen cells' sentences


def test_labels_drop_only_what_every_row_shares():
    from bench.report.status_table import relative_labels

    labels = ["cpu/pytorch/gloo/ib=off/1w fp32 b16", "cpu/pytorch/gloo/ib=off/2w fp32 b16",
              "cpu/pytorch/openmpi/ib=off/2w/imagenet-jpeg fp32 b16 lw1"]
    short, shared = relative_labels(labels)
    assert shared == "cpu/pytorch/ib=off fp32 b16"
    assert short == ["gloo/1w", "gloo/2w", "openmpi/2w/imagenet-jpeg lw1"]
    assert relative_labels(labels[:1]) == (["1w"], "cpu/pytorch/gloo/ib=off fp32 b16")  # the workers stay


@pytest.mark.slow
def test_a_terminal_gets_colour_and_the_same_120_columns(store):
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "bench", "status", "--store", str(store)], cwd=ROOT,
                            stdout=follower, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "60"})
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the follower closed: the process is done
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    os.close(leader)
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    assert ANSI.search(text)  # the verdicts' colours
    plain = ANSI.sub("", text)
    assert max(len(line) for line in plain.splitlines()) <= 120
    piped = bench_cli("status", "--store", str(store), cwd=store.parent).stdout
    assert [line.rstrip() for line in plain.splitlines()] == piped.splitlines()  # (a header's padding is bold)


def test_a_table_leaves_out_the_columns_no_row_of_it_has(store):
    code, text, _ = status(store)
    assert code == 0
    rows = json.loads(status(store, "--format", "json")[1])
    lines = text.splitlines()
    lone = next(r for r in rows if r["gpu"] == "A100")  # alone on its GPU: no series, no 1-worker twin
    at = next(i for i, line in enumerate(lines) if lone["cell_id"] in line)
    assert lines[at - 1].startswith("─") and lines[at - 2].split() == ["cell", "id", "cell", "img/s", "(95%", "CI)",
                                                                       "verdict"]
    scaled = next(r for r in rows if r["gpu"] == "V100" and r["expected"] is not None)
    at = next(i for i, line in enumerate(lines) if scaled["cell_id"] in line)
    head = next(lines[i - 2] for i in range(at, 0, -1) if lines[i - 1].startswith("─"))
    assert "S(N)" in head and "E(N)" in head and "expected (95% CI)" in head
