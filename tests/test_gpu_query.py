"""Reading nvidia-smi's output (models/gpu/query.py) on outputs in tests/data/nvidia_smi/.

No GPU here: each file is reconstructed from nvidia-smi's documented output format and public copies of it, and says
so in its header ("# " lines, with a date), which the test strips before parsing; the parser sees only what
nvidia-smi itself would print.
"""
from __future__ import annotations

import re

import pytest

from models.gpu.query import PROBE_FIELDS, count_gpus_from_list, gpu_summary, parse_query_gpu
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data" / "nvidia_smi"
FILES = sorted(p.name for p in DATA.iterdir())


def output(name: str) -> str:
    """The file's body: what nvidia-smi printed, without the header that says where it came from."""
    lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
    body = lines[next(i for i, line in enumerate(lines) if not line.startswith("# ")):]
    return "".join(body)


@pytest.mark.parametrize("name", FILES)
def test_every_sample_says_it_is_reconstructed_and_when(name):
    header = [line for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.startswith("# ")]
    assert header, f"{name}: no header"
    assert "Reconstructed from the documented format of `nvidia-smi " in header[0] and "not captured" in header[0]
    assert re.search(r"\(\d{4}-\d{2}-\d{2}\)", header[0])
    assert not any(line.startswith("#") for line in output(name).splitlines())


QUERIES = {
    "query_h100_x8.csv": {"model": "NVIDIA H100 80GB HBM3", "count": 8, "driver": "550.90.07", "memory": "81559 MiB"},
    "query_a100_single.csv": {"model": "NVIDIA A100-SXM4-80GB", "count": 1, "driver": "535.216.01",
                              "memory": "81920 MiB"},
    "query_gb10_na.csv": {"model": "NVIDIA GB10", "count": 1, "driver": "580.95.05", "memory": None},
    "query_no_devices.txt": None,
}


def test_every_query_sample_is_checked():
    assert set(QUERIES) == {n for n in FILES if n.startswith("query_")}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_the_probes_gpu_field_from_query_output(name):
    assert gpu_summary(parse_query_gpu(output(name), PROBE_FIELDS)) == QUERIES[name]


def test_each_gpu_is_one_row_keyed_by_the_fields_asked():
    rows = parse_query_gpu(output("query_h100_x8.csv"), PROBE_FIELDS)
    assert len(rows) == 8
    assert rows[7] == {"name": "NVIDIA H100 80GB HBM3", "driver_version": "550.90.07", "memory.total": "81559 MiB"}


def test_no_value_markers_become_none_and_other_values_stay_verbatim():
    [row] = parse_query_gpu("NVIDIA GB10, [N/A], [Not Supported], 0 %\n", ("name", "a", "b", "c"))
    assert row == {"name": "NVIDIA GB10", "a": None, "b": None, "c": "0 %"}


def test_a_message_in_place_of_rows_is_no_gpu():
    assert parse_query_gpu(output("query_no_devices.txt"), PROBE_FIELDS) == []
    assert parse_query_gpu(output("list_driver_failed.txt"), PROBE_FIELDS) == []
    assert parse_query_gpu("", PROBE_FIELDS) == []


LISTS = {"list_h100_x8.txt": 8, "list_a100_mig.txt": 4, "list_driver_failed.txt": 0}


def test_every_list_sample_is_checked():
    assert set(LISTS) == {n for n in FILES if n.startswith("list_")}


@pytest.mark.parametrize("name", sorted(LISTS))
def test_gpus_counted_from_the_list(name):
    assert count_gpus_from_list(output(name)) == LISTS[name]


def test_mig_devices_under_a_gpu_are_not_gpus():
    text = output("list_a100_mig.txt")
    assert text.count("  MIG 1g.10gb ") == 7  # the sample does hold the MIG lines the count must skip
    assert count_gpus_from_list(text) == 4
