"""`--format table|json|md` of the verbs that read results (`check`, `history`, `ab`, `model`; `status` has its own
tests in test_status_table.py), on real stores written through the Store API from the worker-side meter's records:
the table one line per cell within 120 columns and the same whatever the terminal's width in a pipe, the JSON valid
against its schema under docs/ci/ (each schema shown a broken document too), the Markdown one GitHub table with a
row per cell. Every verb is called in this process through bench.cli.main, as a user's command line."""
from __future__ import annotations

import contextlib
import io
import json
import math
import random
import re

import jsonschema
import pytest

from bench.cli import main
from bench.records.schema import parse_record
from bench.store import Store
from tests.conftest import ROOT
from tests.factories import record
from tests.test_regress import store_run

SCHEMAS = {name: json.loads((ROOT / "docs" / "ci" / f"{name}-result.schema.json").read_text(encoding="utf-8"))
           for name in ("check", "ab", "history", "model")}
ANSI = re.compile(r"\x1b\[")
CELL_ID = re.compile(r"\b[0-9a-f]{12}\b")


def bench(*argv: str, cwd=None, monkeypatch=None) -> tuple[int, str, str]:
    """`bench ARGV` in this process (stdout is no terminal here): exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """check: run `slow`'s 2-worker cell 20% slower than `base`'s; history: 12 runs in which the 1-worker cell drops
    20% from run 7, when torch's recorded version changes."""
    d = tmp_path_factory.mktemp("formats")
    with Store(d / "check.db") as store:
        store_run(store, "base", {1: [1.0, 1.01, 0.99, 1.0, 1.005], 2: [1.0, 1.01, 0.99, 1.0, 1.005]})
        store_run(store, "slow", {1: [1.0, 0.995, 1.006, 1.002, 0.998], 2: [0.8, 0.79, 0.81, 0.8, 0.805]})
    rng = random.Random(7)
    with Store(d / "history.db") as store:
        for i in range(12):
            run_id = f"run{i:02d}"
            store.begin_run(run_id, matrix_name="t", matrix_path="m.yaml", backend="local", host="h",
                            bench_version="0.1.0", plan={})
            for gpus in (1, 2):
                slower = 0.8 if gpus == 1 and i >= 6 else 1.0
                for repeat in range(3):
                    data = record(run_id=run_id, repeat=repeat, rate_scale=slower * math.exp(rng.gauss(0, 0.015)),
                                  gpus=gpus)
                    start = 1_700_000_000 + 3600 * i + 10 * repeat
                    data.update(start_unix=start, end_unix=start + 2,
                                env_probe={"packages": {"torch": "2.14.0" if i >= 6 else "2.13.0"}})
                    store.write(parse_record(data))
            store.finish_run(run_id)
    return d


def ab_results(tmp_path):
    """bench ab's judge() over a real store of four A/B pairs whose B side runs the 2-worker cell 20% slower."""
    from bench.ab.session import SideRun
    from bench.analysis.paired import PairedSettings
    from bench.commands.ab import judge

    side_runs = []
    with Store(tmp_path / "ab.db") as store:
        for pair, noise in enumerate([1.0, 0.97, 1.02, 0.99]):
            for side in ("A", "B"):
                run_id = f"p{pair}{side}"
                slower = 0.8 * (1 + 0.01 * (pair % 2)) if side == "B" else 1.0
                store_run(store, run_id, {1: [noise * (1.002 if side == "B" else 1.0)], 2: [noise * slower]})
                side_runs.append(SideRun(pair, side, 0, run_id, 1.0, tmp_path / "log"))
        return judge(store, side_runs, PairedSettings(), "median")


def ab_output(fmt: str, tmp_path) -> str:
    from bench.ab.spec import parse_side
    from bench.analysis.paired import PairedSettings
    from bench.commands.ab import print_results

    results, diffs = ab_results(tmp_path)
    course = {"pairs_run": 4, "stopped": "every cell decided", "seconds": 8.0, "pair_seconds": 2.0,
              "budget_s": 600.0, "max_pairs": 40, "fixed_pairs": None, "cpu_weight": None}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_results(fmt, results, diffs, PairedSettings(), "s1", [parse_side("A", "current"),
                                                                    parse_side("B", "cpus=0.8")], "median", course)
    return out.getvalue()


ARGV = {"check": lambda d: ["check", "--store", str(d / "check.db"), "--baseline", "base", "--candidate", "slow"],
        "history": lambda d: ["history", "--store", str(d / "history.db")],
        "model": lambda d: ["model", "--validate"]}
ROW = {"check": re.compile(r"^[0-9a-f]{12} "), "history": re.compile(r"^[0-9a-f]{12} "), "ab": re.compile(r"^\dw "),
       "model": re.compile(r"^(K80|P100|P40|V100) ")}


def verb_output(verb: str, fmt: str, stores, tmp_path) -> str:
    """What `bench VERB --format FMT` prints (ab: its print_results on judged pairs, the session's last step)."""
    if verb == "ab":
        return ab_output(fmt, tmp_path)
    code, text, err = bench(*ARGV[verb](stores), "--format", fmt)
    assert code in ((0, 1) if verb == "check" else (0,)) and err == "", err
    return text


def cell_ids(verb: str, stores, tmp_path) -> set[str]:
    """The ids of the cells the verb is about, from its JSON."""
    doc = json.loads(verb_output(verb, "json", stores, tmp_path))
    return {c["cell_id"] for c in (doc if verb == "history" else doc["cells"])}


@pytest.mark.parametrize("verb", ["check", "history", "ab", "model"])
def test_the_table_is_a_line_per_cell_within_120_columns_whatever_the_terminal(verb, stores, tmp_path, monkeypatch):
    text = verb_output(verb, "table", stores, tmp_path)
    monkeypatch.setenv("COLUMNS", "40")  # a pipe: the terminal's width does not matter, nor FORCE_COLOR
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert verb_output(verb, "table", stores, tmp_path) == text
    assert not ANSI.search(text)
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if set(line) == {"─"})
    rows = []
    for line in lines[rule + 1:]:
        if not ROW[verb].match(line):
            break
        rows.append(line)
    assert all(len(line) <= 120 and line == line.rstrip() for line in [lines[rule - 1], *rows]), rows
    if verb == "model":
        assert [row.split()[:2] for row in rows] == [[g, f] for g in ("K80", "P100", "P40", "V100")
                                                     for f in ("IB", "TCP")]
    elif verb == "ab":  # each cell by what sets it apart (the title names what they share)
        assert sorted(row.split()[0] for row in rows) == ["1w", "2w"]
        assert "every cell: cpu/pytorch/openmpi/ib=off fp32" in lines[0]
    else:
        assert sorted(row[:12] for row in rows) == sorted(cell_ids(verb, stores, tmp_path))


@pytest.mark.parametrize("verb", ["check", "history", "ab", "model"])
def test_the_json_validates_against_its_schema_and_the_schema_can_fail(verb, stores, tmp_path):
    text = verb_output(verb, "json", stores, tmp_path)
    doc = json.loads(text)  # stdout holds the document alone
    schema = SCHEMAS[verb]
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(doc, schema)
    broken = json.loads(text)
    if verb == "history":
        broken[0]["runs"][0]["rate"] = -1.0
    elif verb == "model":
        broken["rows"][0]["fabric"] = "ethernet"
    else:
        broken["cells"][0]["verdict"] = "slower"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_the_json_says_what_the_table_says(stores, tmp_path):
    check = json.loads(verb_output("check", "json", stores, tmp_path))
    assert check["exit_code"] == 1 and check["counts"]["regressed"] == 1
    (slow,) = [c for c in check["cells"] if c["verdict"] == "regressed"]
    assert slow["keys"]["gpus"] == 2 and slow["ratio"] == pytest.approx(0.8, abs=0.01)
    history = {c["label"]: c for c in json.loads(verb_output("history", "json", stores, tmp_path))}
    one = history["cpu/pytorch/openmpi/ib=off/1w fp32"]
    (cp,) = one["change_points"]
    assert (cp["at_run"], cp["run_before"], cp["run_after"]) == (7, "run05", "run06")
    assert cp["ratio"] == pytest.approx(0.8, abs=0.03) and cp["what_changed"] == ["package torch: 2.13.0 → 2.14.0"]
    assert [r["run_id"] for r in one["runs"]] == [f"run{i:02d}" for i in range(12)]
    assert history["cpu/pytorch/openmpi/ib=off/2w fp32"]["change_points"] == []
    model = json.loads(bench("model", "--validate", "--format", "json", "--all-points", "--sensitivity")[1])
    assert model["held_out"]["all"] == {"rows": 7, "largest_error_points": pytest.approx(41.9, abs=0.05),
                                        "within_10_points": 6}
    assert len(model["sensitivity"]) == 12 and all(len(s["points"]) == 7 for s in model["all_points"])
    assert json.loads(bench("model", "--validate", "--format", "json")[1])["all_points"] is None


@pytest.mark.parametrize("verb", ["check", "history", "ab", "model"])
def test_markdown_is_one_github_table_with_a_row_per_cell(verb, stores, tmp_path):
    text = verb_output(verb, "md", stores, tmp_path)
    head, rule, *body = text.splitlines()
    assert head.startswith("| ") and head.endswith(" |")
    assert re.fullmatch(r"\|(-+:?\|)+", rule.replace("---:", "---"))
    columns = head.count(" | ") + 1
    assert all(row.startswith("| ") and row.endswith(" |") and row.replace("\\|", "").count(" | ") + 1 == columns
               for row in body), body
    assert len(body) == (8 if verb == "model" else 2)
    if verb in ("check", "history"):
        assert {row.split(" | ")[0].removeprefix("| ") for row in body} == cell_ids(verb, stores, tmp_path)


def test_check_keeps_its_summary_last_and_its_ci_files(stores, tmp_path):
    code, text, _ = bench("check", "--store", str(stores / "check.db"), "--baseline", "base", "--candidate", "slow",
                          "--json", str(tmp_path / "out.json"))
    assert code == 1 and text.splitlines()[-1].startswith("check: 2 cells: 1 regressed")
    printed = bench("check", "--store", str(stores / "check.db"), "--baseline", "base", "--candidate", "slow",
                    "--format", "json")[1]
    assert json.loads((tmp_path / "out.json").read_text()) == json.loads(printed)  # --json writes what it prints


def test_history_says_each_change_point_and_what_changed_after_the_table(stores):
    code, text, _ = bench("history", "--store", str(stores / "history.db"), "--runs")
    assert code == 0
    lines = text.splitlines()
    assert lines[-1] == "history: 2 cells over 12 runs; 1 change points (PELT on log throughput, min shift 5%)"
    assert sum("change point at run 7 of 12 (run06" in line for line in lines) == 1
    assert "    what changed: package torch: 2.13.0 → 2.14.0" in lines
    assert sum(line.startswith("    run") for line in lines) == 24  # --runs: every run of both cells
