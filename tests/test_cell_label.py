"""The one cell label (bench/cells/label.py): unique per cell, the same from a plan, a store row or a baseline row."""
from __future__ import annotations

import math

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.cells.keys import CELL_KEYS, WORKLOAD_DEFAULTS
from bench.cells.label import PROTOCOL_KEYS, TOKENS, cell_label
from bench.planning.cell import cell_id
from bench.planning.matrix import load_matrix_text
from tests.conftest import ROOT

# The keys the label's path part and its precision token show (cell_label spells them out; the rest are TOKENS or
# the protocol token).
PATH_KEYS = ("gpu", "framework", "mpi", "ib", "gpus", "model", "engine", "data", "data_layout", "precision")
BASE = {"gpu": "cpu", "framework": "pytorch", "mpi": "gloo", "ib": False, "gpus": 2, **WORKLOAD_DEFAULTS}
# One other value per workload key (the axes are in the path part).
OTHER = {"model": "allreduce", "engine": "native", "data": "imagenet", "data_layout": "tfrecord",
         "loader_workers": 4, "batch_per_gpu": 32, "image_size": 128, "precision": "bf16", "warmup_steps": 3,
         "steps": 8, "repeats": 5, "jobs": 2, "channels_last": False, "threads": 1, "workers_per_node": 1,
         "max_message_bytes": 1 << 20, "loader": "pil", "compile": "max-autotune", "optimizer_impl": "foreach",
         "cuda_graphs": True, "seq_len": 256, "grad_accum": 4, "activation_checkpointing": True,
         "layout": "tp=2", "tp_across_nodes": True}


def test_every_cell_key_has_its_place_in_the_label():
    """A key added to the cell and not here would let two cells share a label."""
    assert set(PATH_KEYS) | set(TOKENS) | set(PROTOCOL_KEYS) == set(CELL_KEYS)
    assert set(OTHER) == set(CELL_KEYS) - {"gpu", "framework", "mpi", "ib", "gpus"}


def test_a_default_cell_reads_short_and_a_changed_key_always_shows():
    assert cell_label(BASE) == "cpu/pytorch/gloo/ib=off/2w fp32"
    seen = {cell_label(BASE)}
    for key, value in OTHER.items():
        label = cell_label({**BASE, key: value})
        assert label not in seen, f"{key}={value} does not change the label: {label}"
        seen.add(label)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(sorted(OTHER)), unique=True), st.lists(st.sampled_from(sorted(OTHER)), unique=True))
def test_two_cells_with_different_ids_have_different_labels(a, b):
    one = {**BASE, **{k: OTHER[k] for k in a}}
    two = {**BASE, **{k: OTHER[k] for k in b}}
    if cell_id(one) != cell_id(two):
        assert cell_label(one) != cell_label(two)


def test_the_same_cell_reads_the_same_from_a_store_row():
    """A store row has 1/0 for booleans, floats where a column holds NaN, and NaN for an unset value."""
    cell = {**BASE, "ib": True, "gpus": 16, "threads": None, "precision": "fp16", "batch_per_gpu": 256}
    row = pd.Series({**cell, "ib": 1, "gpus": 16.0, "threads": math.nan, "batch_per_gpu": 256.0, "nodes": 1.0})
    assert cell_label(row) == cell_label(cell, nodes=1) == "cpu/pytorch/gloo/ib=on/16w fp16 b256"


def test_nodes_come_from_the_row_or_else_the_catalogue():
    h100 = {**BASE, "gpu": "H100", "gpus": 16}
    assert cell_label(h100).startswith("H100/pytorch/gloo/ib=off/16w/2n ")  # 8 GPUs per VM
    assert cell_label({**h100, "nodes": 4}).startswith("H100/pytorch/gloo/ib=off/16w/4n ")


def test_the_plan_labels_the_default_matrix_uniquely():
    cells = load_matrix_text((ROOT / "matrix.yaml").read_text(encoding="utf-8")).cells()
    labels = {}
    for c in cells:
        labels.setdefault(cell_label(c), set()).add(cell_id(c))
    assert len(cells) > 1000 and all(len(ids) == 1 for ids in labels.values())
