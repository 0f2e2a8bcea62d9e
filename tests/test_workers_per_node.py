"""`workers_per_node`: a cell says how many workers share a node, so a cpu cell can span nodes and a GPU cell can
use fewer GPUs per VM than it has. Unset, it changes nothing: not the plan, not a single cell id."""
import json
from pathlib import Path

import pytest

from bench.backend_settings.slurm import SlurmConfig
from bench.backends.local.backend import LocalBackend
from bench.backends.slurm import SlurmBackend
from bench.core.errors import BenchInputError
from bench.planning.cell import cell_id
from bench.planning.matrix import load_matrix_text
from bench.planning.plan import plan_cells

ROOT = Path(__file__).resolve().parent.parent


def plan(text: str, backend=None):
    return plan_cells(load_matrix_text(text).cells(), backend)


def test_unset_it_moves_no_existing_cell_id():
    # A committed baseline written before the key existed: every recorded id is what its cell hashes to now.
    baseline = json.loads((ROOT / "baselines" / "ci-cpu.json").read_text())
    assert baseline["cells"]
    for entry in baseline["cells"]:
        assert "workers_per_node" not in entry["cell"]
        assert cell_id({**entry["cell"], "workers_per_node": None}) == entry["cell_id"]
    cell = load_matrix_text("name: t\naxes: {gpu: [cpu], gpus: [2]}\n").cells()[0]
    assert cell["workers_per_node"] is None and cell_id(cell) == "d7151f5334aa"  # the id before the key


def test_set_it_is_part_of_the_cell_and_its_id():
    cells = load_matrix_text("name: t\naxes: {gpu: [cpu], gpus: [2], workers_per_node: [null, 1, 2]}\n").cells()
    ids = [cell_id(c) for c in cells]
    assert ids[0] == "d7151f5334aa" and len(set(ids)) == 3


def test_nodes_follow_workers_per_node_and_the_label_shows_them():
    cells = plan("name: t\naxes: {gpu: [cpu], gpus: [2, 4], workers_per_node: [null, 1, 2]}\n")
    assert [(c.cell["gpus"], c.cell["workers_per_node"], c.nodes, c.per_node) for c in cells] == [
        (2, None, 1, 2), (2, 1, 2, 1), (2, 2, 1, 2), (4, None, 1, 4), (4, 1, 4, 1), (4, 2, 2, 2)]
    assert cells[1].label() == "cpu/pytorch/openmpi/ib=off/2w/2n fp32 1/node" and cells[0].label().endswith("/2w fp32")
    assert cells[2].label() == "cpu/pytorch/openmpi/ib=off/2w fp32 2/node"  # one node, but not the same cell as [0]
    # A GPU cell may use fewer GPUs per VM than it has: 8 workers on 4 H100 VMs, 2 each.
    h100 = plan("name: t\naxes: {gpu: [H100], gpus: [8], workers_per_node: [null, 2]}\n")
    assert [(c.nodes, c.per_node, c.status) for c in h100] == [(1, 8, "planned"), (4, 2, "planned")]


@pytest.mark.parametrize("text,reason", [
    ("gpu: [V100], gpus: [8], workers_per_node: [8]", "workers_per_node=8 on V100: a Standard_NC24rs_v3 has 4 GPUs"),
    ("gpu: [cpu], gpus: [3], workers_per_node: [2]", "gpus=3 with workers_per_node=2: not a whole number of nodes"),
    ("gpu: [H100], gpus: [1], workers_per_node: [2]", "gpus=1 with workers_per_node=2: not a whole number of nodes"),
])
def test_nonsense_is_skipped_with_one_line(text, reason):
    [cell] = plan(f"name: t\naxes: {{{text}}}\n")
    assert cell.status == "skipped" and cell.reason == reason


def test_backends_reach_rules_see_the_nodes(tmp_path):
    [one, two] = plan("name: t\naxes: {gpu: [cpu], gpus: [2], workers_per_node: [null, 1]}\n",
                      LocalBackend(tmp_path, 60))
    assert one.status == "planned"
    assert two.reason == "needs 2 nodes; the local backend runs on this one machine"
    slurm = SlurmBackend(SlurmConfig(max_nodes=1, cores_per_node=4, gpus_per_node=0), tmp_path, 60)
    [one, two] = plan("name: t\naxes: {gpu: [cpu], gpus: [2], workers_per_node: [null, 1]}\n", slurm)
    assert one.status == "planned" and two.reason == "needs 2 nodes; backend.slurm.max_nodes is 1"


def test_a_bad_value_is_an_input_error_naming_the_line():
    with pytest.raises(BenchInputError, match=r"<string>:3: axes.workers_per_node\[0\]: .*greater than 0"):
        load_matrix_text("name: t\naxes:\n  workers_per_node: [0]\n  gpu: [cpu]\n")
