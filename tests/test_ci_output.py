"""CI-native output of `bench check` (--json, --junit, --github) and the example CI files under docs/ci/, each
validated by a maintained validator: jsonschema against the committed schema, junitparser for the JUnit XML,
check-jsonschema's vendored GitHub-workflow and GitLab-CI schemas (run as a real process). Each validator is also
shown a malformed file, so a test here fails when an output goes wrong."""
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import junitparser
import pytest

from bench.store import Store
from tests.conftest import ROOT, bench_cli
from tests.test_regress import store_run

CHECK_SCHEMA = json.loads((ROOT / "docs" / "ci" / "check-result.schema.json").read_text())
AB_SCHEMA = json.loads((ROOT / "docs" / "ci" / "ab-result.schema.json").read_text())
# Run as a module of this Python: the venv's check-jsonschema script carries the shebang of the path it was
# installed through, which a venv shared through symlinks (or moved) may no longer have.
CHECK_JSONSCHEMA = [sys.executable, "-m", "check_jsonschema"]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """One real `bench check` of a store whose 2-worker cell is 20% slower, with every CI output."""
    d = tmp_path_factory.mktemp("ci-out")
    with Store(d / "results" / "bench.db") as store:
        store_run(store, "base", {1: [1.0, 1.01, 0.99, 1.0, 1.005], 2: [1.0, 1.01, 0.99, 1.0, 1.005]})
        store_run(store, "slow", {1: [1.0, 0.995, 1.006, 1.002, 0.998], 2: [0.8, 0.79, 0.81, 0.8, 0.805]})
    summary = d / "summary.md"
    r = bench_cli("check", "--baseline", "base", "--candidate", "slow", "--json", "out.json", "--junit", "out.xml",
                  "--github", cwd=d, env={"GITHUB_STEP_SUMMARY": str(summary)})
    return d, r, summary


def test_check_json_follows_its_schema_and_names_the_regression(outputs):
    d, r, _ = outputs
    assert r.returncode == 1, r.stderr
    doc = json.loads((d / "out.json").read_text())
    jsonschema.validate(doc, CHECK_SCHEMA, format_checker=jsonschema.FormatChecker())
    assert doc["exit_code"] == 1 and doc["counts"]["regressed"] == 1
    (regressed,) = [c for c in doc["cells"] if c["verdict"] == "regressed"]
    assert regressed["keys"]["gpus"] == 2 and regressed["ratio"] == pytest.approx(0.8, abs=0.01)
    assert regressed["ci_low"] <= regressed["ratio"] <= regressed["ci_high"]


@pytest.mark.parametrize("breakage", [
    lambda d: d.pop("cells"),
    lambda d: d.update(format_version=2),
    lambda d: d["cells"][0].update(verdict="slower"),
    lambda d: d["cells"][0].update(ratio=-1.0),
    lambda d: d["cells"][0].update(cell_id="not-an-id"),
])
def test_a_malformed_check_json_is_rejected(outputs, breakage):
    d, _, _ = outputs
    doc = json.loads((d / "out.json").read_text())
    breakage(doc)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, CHECK_SCHEMA)


def test_junit_has_one_case_per_cell_and_the_regression_is_a_failure_naming_cell_ratio_interval(outputs):
    d, _, _ = outputs
    xml = junitparser.JUnitXml.fromfile(str(d / "out.xml"))
    cases = [case for suite in xml for case in suite]
    assert len(cases) == 2
    failed = [c for c in cases if c.result and isinstance(c.result[0], junitparser.Failure)]
    assert len(failed) == 1
    message = failed[0].result[0].message
    assert "2w" in message and "ratio 0.800" in message and "interval 0.790–0.810" in message
    assert "2w" in failed[0].name
    passed = [c for c in cases if not c.result]
    assert len(passed) == 1 and "1w" in passed[0].name


def test_every_output_names_a_cell_by_its_one_label(outputs):
    """Terminal, JSON, JUnit and the GitHub summary: the same label, bench.cells.label's (docs/ci/README.md)."""
    from bench.cells.label import cell_label

    d, r, summary = outputs
    doc = json.loads((d / "out.json").read_text())
    labels = {c["cell_id"]: c["cell"] for c in doc["cells"]}
    assert labels == {c["cell_id"]: cell_label(c["keys"]) for c in doc["cells"]} and len(set(labels.values())) == 2
    xml = junitparser.JUnitXml.fromfile(str(d / "out.xml"))
    assert sorted(case.name for suite in xml for case in suite) == sorted(labels.values())
    (regressed,) = [c for c in doc["cells"] if c["verdict"] == "regressed"]
    assert regressed["cell"] in summary.read_text() and regressed["cell"] in r.stdout


@pytest.mark.parametrize("text", ["<testsuites><testsuite name='x'><testcase name='a'>", "not xml at all", ""])
def test_a_malformed_junit_file_is_rejected(tmp_path, text):
    path = tmp_path / "bad.xml"
    path.write_text(text)
    with pytest.raises(Exception):  # junitparser raises lxml's/ElementTree's parse error
        junitparser.JUnitXml.fromfile(str(path))


def test_github_mode_writes_the_summary_and_annotations(outputs):
    _, r, summary = outputs
    errors = [line for line in r.stdout.splitlines() if line.startswith("::error")]
    assert len(errors) == 1 and "2w" in errors[0] and "ratio 0.800" in errors[0]
    assert "%25 interval" in errors[0]  # '%' escaped as GitHub's workflow commands require
    text = summary.read_text()
    assert "bench check: ❌ regression" in text and "| **regressed** | 0.800 |" in text


def test_github_escaping():
    from bench.ci_output.github import escape_data, escape_property

    assert escape_data("a%b\nc\rd") == "a%25b%0Ac%0Dd"
    assert escape_property("t: a, b") == "t%3A a%2C b"


@pytest.mark.parametrize("args,message", [
    (["--json", "missing-dir/out.json"], "does not exist"),
    (["--junit", "."], "is a directory"),
])
def test_a_bad_output_path_is_exit_2_and_nothing_written(outputs, args, message):
    d, _, _ = outputs
    before = sorted(p.name for p in d.iterdir())
    r = bench_cli("check", "--baseline", "base", "--candidate", "slow", *args, cwd=d)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in d.iterdir()) == before


def _validate(schema: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*CHECK_JSONSCHEMA, "--builtin-schema", schema, str(path)], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow  # four check-jsonschema processes, ~3 s each
@pytest.mark.parametrize("name,schema", [("github-actions.yml", "vendor.github-workflows"),
                                         ("gitlab-ci.yml", "vendor.gitlab-ci")])
def test_the_example_ci_files_validate_and_a_broken_one_does_not(tmp_path, name, schema):
    good = ROOT / "docs" / "ci" / name
    r = _validate(schema, good)
    assert r.returncode == 0, r.stdout + r.stderr
    # The same file with a key its schema does not allow at the top of a job: must be refused.
    broken = tmp_path / name
    text = good.read_text()
    job = "  check:\n" if name == "github-actions.yml" else "throughput-check:\n"
    assert job in text
    broken.write_text(text.replace(job, job + ("    runs-on: 42\n" if name == "github-actions.yml"
                                               else "  stage: [not, a, string]\n"), 1))
    r = _validate(schema, broken)
    assert r.returncode != 0, f"check-jsonschema accepted a broken {name}"


def _commands(node):
    """Every `... -m bench ...` shell line in a loaded YAML document."""
    if isinstance(node, dict):
        return [c for v in node.values() for c in _commands(v)]
    if isinstance(node, list):
        return [c for v in node for c in _commands(v)]
    return [node] if isinstance(node, str) and " -m bench " in node else []


def test_the_ci_examples_use_options_bench_has():
    """The bench commands in the example files parse with this bench's CLI (a renamed option would break CI)."""
    import shlex

    import yaml

    from bench.cli import build_parser

    parser = build_parser()
    seen = 0
    for name in ("github-actions.yml", "gitlab-ci.yml"):
        for command in _commands(yaml.safe_load((ROOT / "docs" / "ci" / name).read_text())):
            command = command.replace("${{ github.base_ref }}", "main").replace(
                "$CI_MERGE_REQUEST_TARGET_BRANCH_NAME", "main")
            argv = shlex.split(command)
            parser.parse_args(argv[argv.index("bench") + 1:])
            seen += 1
    assert seen >= 5


def test_ab_json_schema_accepts_a_document_and_rejects_a_broken_one():
    from bench.ab.spec import parse_side
    from bench.analysis.paired import PairedSettings, paired_verdict
    from bench.ci_output.ab_json import ab_document

    a, b = [10.0, 10.2, 9.9, 10.1], [8.0, 8.1, 7.9, 8.2]
    res = paired_verdict(a, b)
    cell = {"cell": "cpu/pytorch/gloo/ib=off/1w", "gpu": "cpu", "framework": "pytorch", "mpi": "gloo", "ib": False,
            "gpus": 1, "pairs": 4, "pairs_run": 4, "a_values": a, "b_values": b, "ratio": res.ratio,
            "ci_low": res.ci_low, "ci_high": res.ci_high, "level": res.level, "p_change": res.p_change,
            "sd_log": res.sd_log, "decides": res.decides, "verdict": res.verdict, "why": res.why,
            "pairs_to_decide": res.pairs_to_decide}
    course = {"pairs_run": 4, "stopped": "every cell decided", "seconds": 160.0, "pair_seconds": 40.0,
              "budget_s": 600.0, "max_pairs": 40, "fixed_pairs": None, "cpu_weight": 100.0}
    doc = ab_document([cell], [], PairedSettings(), "s", [parse_side("A", "current"), parse_side("B", "cpus=0.9")],
                      "median", course)
    jsonschema.validate(doc, AB_SCHEMA)
    assert doc["regressed"] is True
    doc["cells"][0]["verdict"] = "worse"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, AB_SCHEMA)


# --- `bench ab --junit/--github`: the same writers, fed by ab's judge() over a real store of paired runs ----------

@pytest.fixture(scope="module")
def ab_outputs(tmp_path_factory):
    """Four A/B pairs in a real store (records from the worker-side meter; B's 2-worker cell 20% slower), judged by
    `bench ab`'s own judge() and written by its own CI writer, options parsed by bench's CLI."""
    import os

    from bench.ab.session import SideRun
    from bench.analysis.paired import PairedSettings
    from bench.cli import build_parser
    from bench.commands.ab import judge, write_ci_outputs

    d = tmp_path_factory.mktemp("ab-out")
    side_runs = []
    with Store(d / "ab.db") as store:
        for pair, noise in enumerate([1.0, 0.97, 1.02, 0.99]):
            for side in ("A", "B"):
                run_id = f"p{pair}{side}"
                slower = 0.8 * (1 + 0.01 * (pair % 2)) if side == "B" else 1.0
                store_run(store, run_id, {1: [noise * (1.002 if side == "B" else 1.0)], 2: [noise * slower]})
                side_runs.append(SideRun(pair, side, 0, run_id, 1.0, d / "log"))
        results, diffs = judge(store, side_runs, PairedSettings(), "median")
    course = {"pairs_run": 4, "stopped": "every cell decided", "seconds": 8.0, "pair_seconds": 2.0,
              "budget_s": 600.0, "max_pairs": 40, "fixed_pairs": None, "cpu_weight": None}
    args = build_parser().parse_args(["ab", "m.yaml", "--b", "cpus=0.8", "--junit", str(d / "ab.xml"), "--github",
                                      "--json", str(d / "ab.json")])
    summary = d / "summary.md"
    old = os.environ.get("GITHUB_STEP_SUMMARY")
    os.environ["GITHUB_STEP_SUMMARY"] = str(summary)
    import contextlib
    import io

    out = io.StringIO()
    try:
        from bench.ab.spec import parse_side

        with contextlib.redirect_stdout(out):
            write_ci_outputs(args, results, diffs, PairedSettings(), "s1",
                             [parse_side("A", args.a), parse_side("B", args.b)], course)
    finally:
        if old is None:
            del os.environ["GITHUB_STEP_SUMMARY"]
        else:
            os.environ["GITHUB_STEP_SUMMARY"] = old
    return d, results, out.getvalue(), summary


def test_ab_junit_has_one_case_per_cell_and_the_regression_names_cell_ratio_interval(ab_outputs):
    d, results, _, _ = ab_outputs
    xml = junitparser.JUnitXml.fromfile(str(d / "ab.xml"))
    cases = [case for suite in xml for case in suite]
    assert len(cases) == 2 == len(results)
    failed = [c for c in cases if c.result and isinstance(c.result[0], junitparser.Failure)]
    assert len(failed) == 1 and "2w" in failed[0].name
    (regressed,) = [r for r in results if r["verdict"] == "regressed"]
    message = failed[0].result[0].message
    assert message.startswith(regressed["cell"] + " regressed")
    assert f"ratio {regressed['ratio']:.3f} (B/A)" in message and regressed["ratio"] == pytest.approx(0.804, abs=0.01)
    assert f"95% interval {regressed['ci_low']:.3f}–{regressed['ci_high']:.3f}" in message
    (passed,) = [c for c in cases if not c.result]
    assert "1w" in passed.name and "unchanged" in passed.system_out
    assert jsonschema.validate(json.loads((d / "ab.json").read_text()), AB_SCHEMA) is None


def test_ab_github_mode_annotates_the_regression_and_writes_the_summary(ab_outputs):
    _, results, stdout, summary = ab_outputs
    errors = [line for line in stdout.splitlines() if line.startswith("::error")]
    assert len(errors) == 1 and errors[0].startswith("::error title=bench ab%3A regression::") and "2w" in errors[0]
    text = summary.read_text()
    assert text.startswith("### bench ab: ❌ regression") and "B (CPU quota 0.8) against A" in text
    (regressed,) = [r for r in results if r["verdict"] == "regressed"]
    assert f"| **regressed** | {regressed['ratio']:.3f} |" in text and f"| {regressed['p_change']:.3g} |" in text
    assert regressed["why"] in text  # the reason, in the note column
    assert "1 unchanged, 1 regressed" in text


def test_ab_refuses_a_bad_junit_path_before_anything_runs(tmp_path):
    (tmp_path / "m.yaml").write_text("name: x\naxes: {gpu: [cpu]}\n")
    r = bench_cli("ab", "m.yaml", "--b", "current", "--junit", "no-dir/ab.xml", "--store", "s.db", cwd=tmp_path)
    assert r.returncode == 2 and "--junit no-dir/ab.xml: folder no-dir does not exist" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["m.yaml"]
