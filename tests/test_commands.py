"""The CLI's layout and the boundaries around it: one module per verb, vocabularies from the registries, the store
the only place with SQL, analysis pure, one rule for a complete cell."""
import ast
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import bench.commands
from bench.analysis.scaling import latest_complete
from bench.backends import BACKENDS
from bench.cli import build_parser, main
from bench.core.errors import BenchInputError
from bench.records.completeness import complete_runs
from bench.records.schema import parse_record
from bench.store import Store
from tests.conftest import ROOT, bench_cli
from tests.factories import record

BENCH = ROOT / "bench"


def _subparsers(parser):
    return next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices


# The modules under bench/commands/ that are not verbs: what several verbs share.
SHARED = {"shared", "lines", "console"}  # their options, the lines they print, the console that prints their tables


def test_every_verb_is_a_module_with_help_arguments_and_run():
    modules = {m.name for m in pkgutil.iter_modules(bench.commands.__path__)}
    assert modules - SHARED == set(bench.commands.VERBS.values()), \
        "a module in bench/commands/ is not a registered verb"
    verbs = _subparsers(build_parser())
    assert list(verbs) == list(bench.commands.VERBS)
    for verb in bench.commands.VERBS:
        module = bench.commands.command(verb)
        assert isinstance(module.HELP, str) and module.HELP, verb
        assert callable(module.add_arguments) and callable(module.run), verb
    assert {"plan", "run", "status", "report", "import", "export", "doctor", "images", "data", "check", "baseline",
            "model"} <= set(verbs)


def _bench_imports(path):
    """(line, module) for every bench import of a file, lazy ones too."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bench"):
            yield node.lineno, node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name, []) for a in node.names if a.name.startswith("bench"))


def test_no_verb_imports_another_verb():
    """What two verbs need lives in bench/commands/shared.py (or lower down), so each verb reads on its own."""
    verb_modules = {f"bench.commands.{m}" for m in bench.commands.VERBS.values()}
    offences = []
    for path in sorted((BENCH / "commands").glob("*.py")):
        for line, module, names in _bench_imports(path):
            targets = {module} | {f"{module}.{n}" for n in names}
            hit = sorted((targets & verb_modules) - {f"bench.commands.{path.stem}"})
            if hit:
                offences.append(f"bench/commands/{path.name}:{line} imports {', '.join(hit)}")
    assert not offences, "\n".join(offences)
    assert list(_bench_imports(BENCH / "commands" / "check.py"))  # it really read the imports


def test_backend_choices_come_from_the_registry():
    verbs = _subparsers(build_parser())
    for verb in ("plan", "run"):
        backend = next(a for a in verbs[verb]._actions if a.dest == "backend")
        assert tuple(backend.choices) == tuple(BACKENDS), verb


def test_building_the_parser_loads_nothing_heavy():
    code = ("import sys, bench.cli; bench.cli.build_parser(); "
            "print(sorted(m for m in ('pandas', 'numpy', 'pydantic', 'rich', 'yaml', 'bench.planning.matrix', "
            "'bench.store') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_an_internal_error_is_one_line_exit_70_and_its_traceback_kept(monkeypatch, capsys):
    """A bug is not bad input: one line saying so and where the traceback went, sysexits' EX_SOFTWARE."""
    import bench.commands.status as status

    def broken(args):
        raise RuntimeError("a bug in a verb")

    monkeypatch.setattr(status, "run", broken)
    assert main(["status", "--store", "x.db"]) == 70
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("bench: internal error (a bug): RuntimeError: a bug in a verb; traceback in ")
    kept = Path(line.rsplit("traceback in ", 1)[1])
    assert "RuntimeError: a bug in a verb" in kept.read_text() and "bench/cli.py" in kept.read_text()
    kept.unlink()


def test_a_reader_that_closes_the_pipe_ends_bench_quietly(tmp_path):
    """`bench plan m.yaml --format json | head -c 100`: exit 141 (what a shell reports for SIGPIPE), no traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "bench", "plan", str(ROOT / "matrix.yaml"), "--format", "json"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(100)
    proc.stdout.close()
    assert proc.wait(timeout=120) == 141
    assert proc.stderr.read() == b""


def test_export_to_a_path_it_cannot_write_is_one_line_exit_2(tmp_path, capsys):
    from bench.store import Store

    with Store(tmp_path / "s.db") as store:
        store.begin_run("r1", matrix_name="t", matrix_path="m.yaml", backend="local", host="h", bench_version="0",
                        plan={})
    assert main(["export", "--store", str(tmp_path / "s.db"), "-o", "/proc/no-such-dir/x.csv"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("bench: error: -o: cannot write /proc/no-such-dir/x.csv")


def test_diagnose_takes_its_hosts_from_a_hosts_matrix(tmp_path):
    """`bench diagnose --matrix m.yaml` (docs/diagnose.md): the matrix's hosts and its ssh settings, no probe run."""
    import argparse

    from bench.commands.diagnose import hosts_and_ssh

    (tmp_path / "m.yaml").write_text("name: t\naxes: {gpu: [cpu]}\nbackend:\n  name: hosts\n"
                                     "  hosts: {hosts: [node1.invalid, node2.invalid]}\n")
    args = argparse.Namespace(hosts=None, hostfile=None, matrix=str(tmp_path / "m.yaml"), cell=None)
    hosts, ssh = hosts_and_ssh(args)
    assert hosts == ["node1.invalid", "node2.invalid"] and "node2.invalid" in ssh("node2.invalid")
    (tmp_path / "local.yaml").write_text("name: t\naxes: {gpu: [cpu]}\n")
    with pytest.raises(BenchInputError, match="its backend is 'local', not hosts"):
        hosts_and_ssh(argparse.Namespace(hosts=None, hostfile=None, matrix=str(tmp_path / "local.yaml"), cell=None))


def test_bad_input_and_analysis_errors_are_one_line_and_exit_2(tmp_path, capsys):
    assert main(["check", "--baseline", "x", "--normalize", "ratio-to:nosuchkey=1",
                 "--store", str(tmp_path / "none.db")]) == 2  # the cell selection parser
    assert main(["baseline", "save", "../escape", "--store", str(tmp_path / "none.db")]) == 2  # BenchInputError
    assert main(["images"]) == 2  # usage
    assert main(["model", "--validate", "--overlap", "3"]) == 2  # an AnalysisError from the what-if model
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 4 and all(line.startswith("bench: error: ") for line in err), err
    assert "--normalize: unknown key 'nosuchkey'" in err[0] and "bad baseline name '../escape'" in err[1]
    assert "overlap must be within [0, 1]" in err[3]
    assert not list(tmp_path.iterdir())  # nothing written


def test_model_validate_end_to_end(tmp_path):
    """As a user runs it, on the bundled reference data: the table of 4 GPUs × 2 fabrics and the summary."""
    proc = bench_cli("model", "--validate", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if re.match(r"(K80|P40|P100|V100) +(IB|TCP) +\d", line)]
    assert len(rows) == 8 and {r.split()[0] for r in rows} == {"K80", "P40", "P100", "V100"}
    assert re.search(r"held out: largest error \d+\.\d points; within ±10: 6/7", proc.stdout)
    assert sum("FITTED" in r for r in rows) == 1 and sum("held out" in r for r in rows) == 7
    assert "batchai_tf_cnn_benchmarks_synthetic_from_svg.csv" in proc.stdout and not proc.stderr


# --- boundaries ---------------------------------------------------------------------------------------------------

_SQL = re.compile(r"\.execute(many|script)?\(|\bSELECT\s|\bINSERT\s|\bUPDATE\s+\w+\s+SET\b|\bDELETE\s+FROM\b|\bPRAGMA\s"
                  r"|\.conn\b|read_sql")


STORE = BENCH / "store"


def _outside_the_store() -> list[Path]:
    """Every module of bench/ and benchmarks/ but the store package's."""
    paths = [*BENCH.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
    return sorted(p for p in paths if STORE not in p.parents)


def test_no_sql_outside_the_store():
    offenders = []
    for path in _outside_the_store():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _SQL.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == [], "SQL belongs in bench/store/ (add a Store method):\n" + "\n".join(offenders)


def test_the_sql_check_can_fail(tmp_path):
    for line in ('rows = store.conn.execute("SELECT run_id FROM records")', 'pd.read_sql(q, conn)',
                 'c.execute("INSERT INTO runs VALUES (?)", x)'):
        assert _SQL.search(line), line
    assert not _SQL.search("store.records(run_id=run_id)")


def _imports_sqlite3(source: str) -> list[int]:
    """Line numbers of the imports of sqlite3 (or a name from it) anywhere in the module, functions included."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(name == "sqlite3" or name.startswith("sqlite3.") for name in names):
            lines.append(node.lineno)
    return lines


def test_only_the_store_imports_sqlite3():
    """Storage failures reach the rest of bench as StoreError alone: nothing else can even name a sqlite3 error."""
    offenders = [f"{path.relative_to(ROOT)}:{n}" for path in _outside_the_store()
                 for n in _imports_sqlite3(path.read_text(encoding="utf-8"))]
    assert offenders == [], "sqlite3 belongs to bench/store/ (raise or catch StoreError):\n" + "\n".join(offenders)
    assert _imports_sqlite3((STORE / "db.py").read_text(encoding="utf-8")), "the walk no longer sees the store's own"


def test_the_sqlite3_check_can_fail():
    for source in ("import sqlite3", "import os, sqlite3 as db", "from sqlite3 import Error",
                   "def f():\n    from sqlite3 import dbapi2\n", "import sqlite3.dbapi2"):
        assert _imports_sqlite3(source), source
    assert not _imports_sqlite3("import sqlite3_utils\nfrom bench.store import StoreError\n# import sqlite3")


def test_every_store_option_has_the_one_default():
    """--store is made by one helper, so every verb's default is the same and written once."""
    from bench.commands.shared import DEFAULT_STORE

    seen = []
    parsers = [build_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            if action.dest == "store":
                seen.append((parser.prog, action.default))
            if action.__class__.__name__ == "_SubParsersAction":
                parsers.extend(action.choices.values())
    assert sorted(prog for prog, _ in seen) == ["bench ab", "bench baseline save", "bench check", "bench diagnose",
                                                "bench export", "bench history", "bench import", "bench report",
                                                "bench run", "bench status"]
    assert {default for _, default in seen} == {DEFAULT_STORE}


def test_the_default_store_path_is_written_once():
    from bench.commands.shared import DEFAULT_STORE

    spelled = {str(p.relative_to(ROOT)) for p in [*BENCH.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
               if DEFAULT_STORE in p.read_text(encoding="utf-8")}
    assert spelled == {"bench/commands/shared.py"}


def test_analysis_is_pure():
    """No files read, nothing printed, no CLI error type, no heavy bench modules: numbers in, numbers out."""
    forbidden_calls = {"open", "print", "input"}
    forbidden_attrs = {"read_csv", "read_sql", "read_parquet", "read_json", "read_text", "read_bytes", "write_text",
                       "to_csv", "exit"}
    forbidden_modules = {"bench.core.errors", "bench.planning.matrix", "bench.store", "bench.cli", "bench.commands",
                         "sys", "csv", "argparse", "sqlite3"}
    for path in sorted((BENCH / "analysis").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            where = f"{path.name}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in forbidden_calls, where
            if isinstance(node, ast.Attribute):
                assert node.attr not in forbidden_attrs, where
            if isinstance(node, ast.Import):
                assert not {a.name for a in node.names} & forbidden_modules, where
            if isinstance(node, ast.ImportFrom):
                assert node.module not in forbidden_modules, where
    code = ("import sys; import bench.analysis.scaling, bench.analysis.compare, bench.analysis.regress, "
            "bench.analysis.whatif, bench.analysis.cost, bench.analysis.stats; "
            "print(sorted(m for m in ('pydantic', 'yaml', 'bench.planning.matrix', 'bench.facts.catalog', "
            "'bench.core.errors') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# --- one definition of a complete cell ------------------------------------------------------------------------------

def test_complete_runs_rule():
    rows = [("a", "r1", "ok", 2, 1), ("a", "r1", "ok", 2, 1),  # every repeat ok
            ("b", "r1", "ok", 2, 2), ("b", "r1", "ok", 2, 2), ("b", "r1", "ok", 2, 2),  # 3 of 2 × 2
            ("c", "r1", "ok", 1, 1), ("c", "r1", "failed", 1, 1),  # a failure spoils the run
            ("d", "r1", "ok", 1, None),  # no jobs column: one job
            ("e", "r1", "ok", None, 1),  # no repeats: cannot show it is complete
            ("f", "import:pub:x", "ok", 1, 1)]  # imported: a reference, never a measurement
    assert complete_runs(*zip(*rows)) == {("a", "r1"), ("d", "r1")}
    assert complete_runs(["d"], ["r1"], ["ok"], [1.0], [float("nan")]) == {("d", "r1")}  # pandas' missing value
    assert complete_runs(["e"], ["r1"], ["ok"], [pd.NA], [1]) == set()


def test_store_and_report_agree_on_complete_cells(tmp_path):
    """The store (resume) and the report (latest_complete) apply the same rule to the same records."""
    def rec(name, run_id, repeat, status="ok", jobs=1, job=0):
        doc = {**record(run_id=run_id, repeat=repeat, repeats=2, jobs=jobs), "cell_id": name, "job": job,
               "status": status}
        if status != "ok":
            doc["error"] = "exit code 1"
        return parse_record(doc)

    records = [rec("whole", "r1", 0), rec("whole", "r1", 1),
               rec("half", "r1", 0),
               rec("spoilt", "r1", 0), rec("spoilt", "r1", 1, status="failed"),
               rec("later", "r1", 0), rec("later", "r1", 1, status="failed"), rec("later", "r2", 0),
               rec("later", "r2", 1),
               rec("jobs", "r1", 0, jobs=2), rec("jobs", "r1", 1, jobs=2), rec("jobs", "r1", 0, jobs=2, job=1)]
    with Store(tmp_path / "b.db") as store:
        store.write_many(records)
        resumed = store.completed_cells()
        reported = latest_complete(store.dataframe())
    assert resumed == {"whole", "later"}
    assert set(reported["cell_id"]) == resumed
    assert set(reported.loc[reported["cell_id"] == "later", "run_id"]) == {"r2"}


def test_latest_complete_on_no_complete_run_is_empty():
    df = pd.DataFrame({"cell_id": ["x"], "run_id": ["r"], "status": ["failed"], "repeats": [1], "jobs": [1],
                       "start_unix": [1.0]})
    assert latest_complete(df).empty


@pytest.mark.parametrize("verb", list(bench.commands.VERBS))
def test_every_verb_has_help(verb, capsys):
    with pytest.raises(SystemExit) as e:
        main([verb, "--help"])
    assert e.value.code == 0 and f"bench {verb}" in capsys.readouterr().out
