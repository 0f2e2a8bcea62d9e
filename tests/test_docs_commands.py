"""Every command line the README and docs show is tested: collected from their code blocks and inline code, each
classified and checked, so a new command in the docs is tested by default.

- `bench …` (or `python -m bench …`, `.venv/bin/python -m bench …`, `.venv/bin/bench …`): the verb must exist and
  every option it names must be one of that verb's. Then:
  - a **synopsis** (the usage convention: `[optional]`, `A|B` alternatives, `…`, `<placeholder>` or an upper-case
    placeholder such as `NAME`, `MATRIX`, `RUN`) or a **mention** (an inline verb with some of its options and not
    all it needs, e.g. `bench ab --json`) is checked that far;
  - a **complete** line must parse; the ones that run here in seconds (RUN_HERE) are run in a folder this test fills
    with what they read (a small store, the repository's matrices, a prices file, a reference CSV), and must exit 0
    with no traceback; the others (a cluster, a GPU, Azure, ssh, a long run, a container build) are checked by the
    parser only.
- `make TARGET`: the Makefile has the target. `scripts/NAME …`: the script exists and is executable.
The test prints how many lines it found of each kind (`pytest -s`).
"""
from __future__ import annotations

import re
import shlex
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.cli import build_parser, main
from bench.core.errors import BenchInputError
from tests.conftest import ROOT

DOCS = [ROOT / "README.md", ROOT / "docker" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BENCH_PREFIX = re.compile(r"^(?:\.venv/bin/python -m bench|python3? -m bench|\.venv/bin/bench|bench)(?=\s)")
IMAGES_MODULE = re.compile(r"^(?:\.venv/bin/python|python3?) -m bench\.images(?=\s)")  # = `bench images`
OTHER_PREFIX = re.compile(r"^(?:make\s+[a-z-]+|scripts/[\w./-]+)")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(?:=.*)?$|<[^>]*>|…|\.\.\.|^\$")
# Verbs (with sub-verbs) run here: they read a store, a matrix or a packaged file and write under the folder.
RUN_HERE = {("plan",), ("status",), ("report",), ("export",), ("history",), ("model",), ("images", "list"),
            ("baseline", "list"), ("baseline", "save"), ("check",), ("import",), ("data", "make-imagenet-sample"),
            ("data", "make-token-sample")}


@dataclass(frozen=True)
class Line:
    where: str  # file:line
    text: str  # the command, comment and prompt removed, continuations joined
    inline: bool


def _strip_comment(text: str) -> str:
    out, quote = [], None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            break
        out.append(ch)
    return "".join(out).strip()


def collect() -> list[Line]:
    lines: list[Line] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8").splitlines()
        fenced = False
        i = 0
        while i < len(text):
            raw = text[i]
            start = i
            if raw.lstrip().startswith("```"):
                fenced = not fenced
                i += 1
                continue
            in_block = fenced or raw.startswith("    ")
            if in_block:
                command = raw.strip().removeprefix("$ ")
                while command.endswith("\\") and i + 1 < len(text):
                    i += 1
                    command = command[:-1].rstrip() + " " + text[i].strip()
                command = _strip_comment(command)
                if _is_bench(command) or OTHER_PREFIX.match(command):
                    lines.append(Line(f"{doc.relative_to(ROOT)}:{start + 1}", command, False))
            else:
                for span in re.findall(r"`([^`]+)`", raw):
                    if _is_bench(span) or OTHER_PREFIX.match(span):
                        lines.append(Line(f"{doc.relative_to(ROOT)}:{start + 1}", span.strip(), True))
            i += 1
    return lines


def _tokens(line: Line) -> list[str]:
    text = re.split(r" \| |; ", line.text)[0]  # a pipe into another tool, a shell loop's next command: bench's part
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _verb_parser(tokens: list[str]):
    """(the verb path, its parser, the remaining tokens); raises LookupError for an unknown verb."""
    parser, path, rest = build_parser(), [], list(tokens)
    while True:
        sub = next((a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"), None)
        if sub is None or not rest or rest[0].startswith("-"):
            return tuple(path), parser, rest
        if rest[0] not in sub.choices:
            if PLACEHOLDER.search(rest[0]):
                return tuple(path), parser, rest  # `bench VERB --help`: the placeholder stands for any verb
            raise LookupError(f"unknown verb {' '.join([*path, rest[0]])!r}")
        path.append(rest[0])
        parser = sub.choices[rest.pop(0)]


def _options(parser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def _bench_words(line: Line) -> list[str]:
    m = IMAGES_MODULE.match(line.text)
    if m:
        return ["images", *_tokens(Line(line.where, line.text[m.end():], line.inline))]
    m = BENCH_PREFIX.match(line.text)
    return _tokens(Line(line.where, line.text[m.end():], line.inline))


def _is_bench(text: str) -> bool:
    return bool(BENCH_PREFIX.match(text) or IMAGES_MODULE.match(text))


def classify(line: Line) -> tuple[str, str | None]:
    """(kind, problem): kind is synopsis, mention, parsed, run, make, script; problem is None when fine."""
    if not _is_bench(line.text):
        if line.text.startswith("make"):
            target = line.text.split()[1]
            have = re.search(rf"^{re.escape(target)}\s*:", (ROOT / "Makefile").read_text(), re.M)
            return "make", None if have else f"no Makefile target {target!r}"
        name = line.text.split()[0]
        found = sorted(ROOT.glob(name))
        if not found:
            return "script", f"no file {name}"
        runnable = all(p.stat().st_mode & 0o111 for p in found if p.suffix == ".sh")
        return "script", None if runnable else f"{name} is not executable"
    words = _bench_words(line)
    try:
        verb, parser, rest = _verb_parser(words)
    except LookupError as e:
        return "synopsis", str(e)
    if not verb or (line.inline and not rest):
        return "mention", None  # `bench --help`, `bench VERB --help`, a verb named in a sentence
    unknown = [w.split("=")[0] for w in rest
               if w.startswith("--") and w.split("=")[0] not in _options(parser) and not PLACEHOLDER.search(w)]
    for w in rest:  # options inside [brackets] of a synopsis
        unknown += [o for o in re.findall(r"\[(--[a-z-]+)", w) if o not in _options(parser)]
    if unknown:
        return "synopsis", f"bench {' '.join(verb)} has no option {', '.join(sorted(set(unknown)))}"
    # A `|` between alternatives (`RUN|latest`) marks a synopsis; inside a selection (`mpi=openmpi|intelmpi`) it
    # is part of the value.
    if re.search(r"<[^>]*>", line.text) or any(PLACEHOLDER.search(w) or w.startswith("[") or w.endswith("]") or
                                              ("|" in w and "=" not in w) for w in rest):
        return "synopsis", None
    missing = [w for w in rest if not w.startswith("-") and ("/" in w or w.startswith("matrix")) and
               w.endswith((".yaml", ".yml", ".json", ".db")) and not w.startswith("/") and not (ROOT / w).exists()]
    if missing and not line.inline:
        return "parsed", f"names {', '.join(missing)}, which the repository does not have"
    try:
        build_parser().parse_args(words)
    except BenchInputError as e:
        if line.inline and ("required" in str(e) or "expected one argument" in str(e)):
            return "mention", None  # an inline verb naming some of its options, not a line to run
        return "parsed", f"the parser refuses it: {e}"
    return ("run" if verb in RUN_HERE else "parsed"), None


LINES = collect()


def test_the_docs_hold_the_commands_they_are_known_for():
    texts = {line.text for line in LINES}
    assert ".venv/bin/python -m bench plan matrix.yaml --show-commands" in texts  # README's command list
    assert "make test" in texts and len(LINES) > 100


@pytest.mark.parametrize("line", LINES, ids=[f"{line.where} {line.text[:60]}" for line in LINES])
def test_every_documented_command_is_known_to_bench(line):
    kind, problem = classify(line)
    assert problem is None, f"{line.where}: `{line.text}`: {problem}"


def _workspace(d: Path) -> Path:
    """What the runnable lines read: the repository's matrices and CI files, a store with records of two GPU types,
    a prices file, a reference CSV as `ref.csv`, a saved baseline `NAME`."""
    from bench.planning.matrix import load_matrix
    from bench.records.schema import parse_record
    from bench.store import Store
    from tests.factories import record

    d.mkdir(parents=True)
    for name in ("matrix.yaml", "matrix-gpu.yaml", "matrix-fabric.yaml", "matrix-kubernetes.yaml",
                 "matrix-llm-cluster.yaml", "matrix-llm-layouts.yaml"):
        shutil.copy(ROOT / name, d / name)
    for folder in ("ci", "benchmarks", "baselines"):
        shutil.copytree(ROOT / folder, d / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "docs" / "gpu-results", d / "docs" / "gpu-results")
    shutil.copy(ROOT / "bench" / "data" / "reference" / "batchai_pytorch_synthetic_from_svg.csv", d / "ref.csv")
    (d / "prices.yaml").write_text("V100: {price_per_hour_usd: 3.06, price_read: 2026-11-01}\n")
    with Store(d / "results" / "bench.db") as store:
        for run in ("r1", "r2"):
            store.begin_run(run, matrix_name="t", matrix_path="m.yaml", backend="local", host="h", bench_version="0",
                            plan={})
            for gpu, mpi in (("cpu", "gloo"), ("V100", "openmpi")):
                for gpus in (1, 2):
                    for repeat in range(3):
                        data = record(run_id=run, gpus=gpus, repeat=repeat, gpu=gpu, mpi=mpi)
                        store.write(parse_record({**data, "job": 0}))
            store.finish_run(run)
        # The newest run: ci/matrix-cpu.yaml's cells, every job and repeat (what CI's check compares with
        # baselines/ci-cpu.json).
        store.begin_run("ci", matrix_name="ci-cpu", matrix_path="ci/matrix-cpu.yaml", backend="local", host="h",
                        bench_version="0", plan={})
        for cell in load_matrix(d / "ci" / "matrix-cpu.yaml").cells():
            for job in range(cell["jobs"]):
                for repeat in range(cell["repeats"]):
                    data = record(run_id="ci", repeat=repeat, **cell)
                    store.write(parse_record({**data, "job": job}))
        store.finish_run("ci")
    for name, run in (("a", "r1"), ("b", "r2")):  # docs/regression-checks.md's `--baseline a.json --candidate b.json`
        assert main(["baseline", "save", name, "--run", run, "--store", str(d / "results" / "bench.db"),
                     "-o", str(d / f"{name}.json")]) == 0
    return d


@pytest.mark.slow
def test_the_commands_that_run_here_run(tmp_path, monkeypatch, capsys):
    """Each runnable line, as written, in a fresh copy of a folder holding what it reads (what one line writes, as
    `bench import` does to the store, never reaches the next): exit 0 (`check`: 0 or 1), no traceback."""
    template = _workspace(tmp_path / "template")
    kinds = Counter()
    failures = []
    for n, line in enumerate(LINES):
        kind, problem = classify(line)
        kinds[kind] += 1
        if kind != "run" or problem:
            continue
        work = tmp_path / f"line{n}"
        shutil.copytree(template, work)
        monkeypatch.chdir(work)
        words = _bench_words(line)
        outside = [Path(w) for w in words if w.startswith("/tmp/") and not Path(w).exists()]  # made by the line
        code = main(words)
        for path in outside:
            shutil.rmtree(path, ignore_errors=True)
        err = capsys.readouterr().err
        if code not in ((0, 1) if words[0] == "check" else (0,)) or "Traceback" in err:  # check: 1 = a regression
            failures.append(f"{line.where}: `{line.text}` exited {code}: {err.strip()[-300:]}")
    with capsys.disabled():
        print(f"\ndocumented command lines: {len(LINES)}; " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    assert not failures, "\n".join(failures)
    assert kinds["run"] >= 15


# The rule on lines of its own: (the line, inline?, its kind, a word of its problem or None).
RULE = [
    ("bench plan matrix.yaml --show-commands", False, "run", None),
    ("bench plan matrix.yaml --no-such-option", False, "synopsis", "has no option --no-such-option"),
    ("bench plam matrix.yaml", False, "synopsis", "unknown verb 'plam'"),
    ("bench check --baseline NAME [--candidate RUN|latest]", False, "synopsis", None),
    ("bench check --baseline NAME [--candiate RUN]", False, "synopsis", "has no option --candiate"),
    ("bench ab --json", True, "mention", None),
    ("bench ab --json", False, "parsed", "the parser refuses it"),
    ("bench status", True, "mention", None),
    ("bench run ci/no-such-matrix.yaml", False, "parsed", "which the repository does not have"),
    ("bench run matrix.yaml --backend slurm", False, "parsed", None),
    ("python -m bench.images render", False, "parsed", None),
    ("make test-fast", False, "make", None),
    ("make no-such-target", False, "make", "no Makefile target"),
    ("scripts/testcluster.sh up 2", False, "script", None),
    ("scripts/no_such.sh", False, "script", "no file"),
]


@pytest.mark.parametrize("text,inline,kind,problem", RULE, ids=[r[0] for r in RULE])
def test_the_rule(text, inline, kind, problem):
    got_kind, got_problem = classify(Line("x.md:1", text, inline))
    assert got_kind == kind
    assert (got_problem is None) if problem is None else (problem in (got_problem or "")), got_problem

