"""The matrix loader on random input: a valid matrix or a BenchInputError (one line), never any other exception."""
import string

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.core.errors import BenchInputError
from bench.planning.matrix import CELL_KEYS, load_matrix_text

FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(text: str) -> str:
    try:
        matrix = load_matrix_text(text, "m.yaml")
        cells = matrix.cells()
    except BenchInputError as e:
        message = str(e)
        assert "\n" not in message and message.startswith("m.yaml"), message
        return "error"
    assert all(set(c) == set(CELL_KEYS) for c in cells)
    return "valid"


# Text built from YAML's own punctuation, keys the schema knows, and values near its boundaries.
TOKENS = st.sampled_from([
    "name", "axes", "workload", "include", "exclude", "backend", "gpu", "gpus", "mpi", "ib", "steps", "cpu", "V100",
    "openmpi", "gloo", "true", "no", "null", "~", "0", "-1", "2", "1e9", ".nan", ".inf", "'x'", '"y"', ":", ": ",
    "- ", "[", "]", "{", "}", ",", "\n", "\n  ", "\n    ", "&a ", "*a", "!!str ", "!!binary ", "? ", "<<: ", "#",
    "---\n", "|\n  ", "\t", "\x00", "\ufeff", "é", "%YAML 1.1\n", "$(x)", ";", "`", " ",
])


@FUZZ
@given(st.lists(TOKENS, max_size=40).map("".join))
def test_yamlish_token_soup(text):
    outcome(text)


@FUZZ
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300))
def test_arbitrary_text(text):
    outcome(text)


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                    st.text(string.printable, max_size=12), st.sampled_from(["cpu", "V100", "openmpi", "gloo",
                                                                              "pytorch", "fp16", "imagenet"]))
KEYS = st.one_of(st.sampled_from(["name", "axes", "workload", "include", "exclude", "backend", "description",
                                  *CELL_KEYS, "timeout_s", "imagenet_dir", "imagenet_sample", "classes"]),
                 st.text(string.ascii_lowercase, min_size=1, max_size=8))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(KEYS, inner, max_size=5)), max_leaves=25)


@pytest.mark.slow
@FUZZ
@given(st.dictionaries(KEYS, VALUES, max_size=7), st.booleans())
def test_random_structures(data, with_axes):
    if with_axes:
        data.setdefault("name", "fuzz")
        data.setdefault("axes", {"gpu": ["cpu"]})
    try:
        text = yaml.safe_dump(data, allow_unicode=True)
    except yaml.YAMLError:
        return
    outcome(text)


def test_the_fuzzers_reach_both_outcomes():
    """The generators are not all garbage: known-good and known-bad inputs go where they should."""
    assert outcome("name: t\naxes: {gpu: [cpu], gpus: [1, 2]}\n") == "valid"
    assert outcome(yaml.safe_dump({"name": "fuzz", "axes": {"gpu": ["cpu"], "steps": [3]}})) == "valid"
    assert outcome("name: t\naxes: {gpu: [cpu], steps: [.nan]}\n") == "error"
