"""`bench model --layouts`: the JSON against docs/ci/layouts-result.schema.json, the table, and --emit-matrix's file
(the matrix has no layout axis yet: each entry's `layout` reads back with parse_layout, and the file less those keys
is a matrix `bench plan` plans)."""
from __future__ import annotations

import contextlib
import io
import json

import jsonschema
import pytest
import yaml

from bench.cli import main
from bench.layouts.layout import parse_layout
from tests.conftest import ROOT

SCHEMA = json.loads((ROOT / "docs" / "ci" / "layouts-result.schema.json").read_text(encoding="utf-8"))
ASK = ("model", "--layouts", "--model", "llama3-70b", "--gpu", "H100", "--nodes", "8", "--fabric", "ib")


def bench(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_the_json_validates_against_its_schema_and_the_schema_can_fail():
    code, text, err = bench(*ASK, "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(doc, SCHEMA)
    assert doc["ranked"][0]["rank"] == 1 and doc["refused"]
    doc["ranked"][0]["degrees"]["tp"] = -1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)


def test_the_table_ranks_the_top_rows_and_counts_the_rest():
    code, text, _ = bench(*ASK, "--top", "5")
    lines = text.splitlines()
    assert code == 0 and lines[1].startswith("#  layout") and [line.split()[0] for line in lines[2:7]] == list("12345")
    assert "layouts fit" in lines[7]


def test_a_given_layout_is_judged_alone():
    code, text, _ = bench(*ASK, "--layout", "dp_shard=8,tp=8", "--format", "json")
    (row,) = json.loads(text)["ranked"]
    assert code == 0 and row["layout"] == "dp_shard=8,tp=8" and row["tiers"]["tp"] == "intra"


def test_emit_matrix_writes_the_top_layouts_as_a_matrix(tmp_path):
    path = tmp_path / "layouts.yaml"
    code, _, err = bench(*ASK, "--top", "3", "--emit-matrix", str(path))
    assert (code, err) == (0, "")
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert len(doc["include"]) == 3
    for entry in doc["include"]:
        layout, _ = parse_layout(entry.pop("layout"), world=entry["gpus"])
        assert entry["engine"] in ("fsdp2", "native")
    stripped = tmp_path / "stripped.yaml"
    stripped.write_text(yaml.safe_dump(doc), encoding="utf-8")
    code, out, err = bench("plan", str(stripped), "--format", "json")
    assert code == 0, err
    assert {c["gpus"] for c in json.loads(out)} == {64}
