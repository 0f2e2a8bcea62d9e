"""Expansion semantics (axes product, exclude, GitHub-Actions include) and validation messages."""
import pytest

from bench.core.errors import BenchInputError
from bench.planning.matrix import CELL_KEYS, load_matrix_text


def cells(text):
    return load_matrix_text(text, "m.yaml").cells()


def pick(cell_list, *keys):
    return sorted(tuple(c[k] for k in keys) for c in cell_list)


def test_product_of_axes_with_defaults_filled_in():
    got = cells("""
name: t
workload: {batch_per_gpu: 32}
axes: {gpu: [V100, A100], gpus: [1, 2, 4]}
""")
    assert len(got) == 6
    assert all(set(c) == set(CELL_KEYS) for c in got)
    assert {c["batch_per_gpu"] for c in got} == {32}          # workload default
    assert {(c["framework"], c["mpi"], c["ib"]) for c in got} == {("pytorch", "openmpi", False)}  # core defaults
    assert pick(got, "gpu", "gpus") == [("A100", 1), ("A100", 2), ("A100", 4), ("V100", 1), ("V100", 2), ("V100", 4)]


def test_workload_key_as_axis_overrides_default():
    got = cells("name: t\nworkload: {precision: fp32}\naxes: {gpu: [A100], precision: [fp32, bf16]}\n")
    assert pick(got, "precision") == [("bf16",), ("fp32",)]


def test_exclude_removes_every_matching_cell_partial_match():
    got = cells("""
name: t
axes: {gpu: [V100, A100], mpi: [openmpi, gloo], gpus: [1, 2]}
exclude:
  - {gpu: V100, mpi: gloo}
  - {gpus: 2, gpu: A100, mpi: openmpi}
""")
    assert len(got) == 8 - 2 - 1
    assert ("V100", "gloo") not in {(c["gpu"], c["mpi"]) for c in got}
    assert ("A100", "openmpi", 2) not in {(c["gpu"], c["mpi"], c["gpus"]) for c in got}


def test_include_follows_github_actions_semantics():
    # The GitHub docs example (fruit=gpu, animal=mpi, color=batch, shape=image_size), translated to bench keys.
    got = cells("""
name: t
axes: {gpu: [V100, A100], mpi: [openmpi, gloo]}
include:
  - {batch_per_gpu: 8}                       # no original axis: extends every cell
  - {batch_per_gpu: 16, mpi: openmpi}        # overwrites an *added* value on the openmpi cells only
  - {gpu: V100, image_size: 64}              # extends the V100 cells
  - {gpu: H100}                              # matches nothing: a new cell
  - {gpu: H100, mpi: openmpi}                # a new cell again (new cells are not extended)
""")
    rows = pick(got, "gpu", "mpi", "batch_per_gpu", "image_size")
    assert rows == [
        ("A100", "gloo", 8, 224), ("A100", "openmpi", 16, 224),
        ("H100", "openmpi", 64, 224),   # {gpu: H100} and {gpu: H100, mpi: openmpi} both fill defaults → one cell
        ("V100", "gloo", 8, 64), ("V100", "openmpi", 16, 64),
    ]


def test_include_never_overwrites_an_original_axis_value():
    got = cells("name: t\naxes: {gpu: [V100], mpi: [gloo]}\ninclude:\n  - {mpi: openmpi, gpu: V100, steps: 9}\n")
    # mpi is an original axis and differs: the entry cannot extend the cell, so it is added as a new one.
    assert pick(got, "gpu", "mpi", "steps") == [("V100", "gloo", 50), ("V100", "openmpi", 9)]


def test_include_adding_a_cell_without_gpu_is_an_error_naming_the_entry():
    with pytest.raises(BenchInputError) as e:
        cells("name: t\naxes: {gpu: [V100], mpi: [gloo]}\ninclude:\n  - {steps: 9, mpi: gloo}\n  - {mpi: openmpi}\n")
    assert str(e.value).startswith("m.yaml:5: include[1]")


def test_include_only_matrix_and_duplicate_cells_are_one_cell():
    got = cells("name: t\naxes: {}\ninclude:\n  - {gpu: cpu, gpus: 2}\n  - {gpu: cpu, gpus: 2}\n")
    assert pick(got, "gpu", "gpus") == [("cpu", 2)]


def test_bool_and_int_are_not_confused():
    # `ib: 1` is an int, not true: rejected rather than silently matched.
    with pytest.raises(BenchInputError, match="ib"):
        cells("name: t\naxes: {gpu: [A100], ib: [1]}\n")
