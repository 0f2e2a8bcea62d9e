"""The matrix's `layout` key (issue 66, docs/layouts.md): a cell without it keeps its id; a layout is read by
bench/layouts' parser (a malformed one is bad input: one line, exit 2) and judged by bench/layouts' rules, each
refusal the cell's skip reason (tp across nodes only where the cell asks: `tp_across_nodes`); the planner's emitted
matrix plans with its layouts."""
import contextlib
import io
import json

import pytest
import yaml

from bench.cli import main
from bench.planning.cell import cell_id
from bench.planning.matrix import load_matrix, load_matrix_text
from bench.planning.plan import plan_cells

# gpus and engine are workload settings here, not axes, so an include entry extends the one cell whatever it sets
BASE = """
name: layouts
workload: {model: tiny, engine: fsdp2, seq_len: 32, batch_per_gpu: 4, warmup_steps: 1, steps: 2, repeats: 1}
axes:
  gpu: [cpu]
  mpi: [gloo]
include:
  - {gpus: 2}
"""


def bench(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def plan(text: str) -> list:
    return plan_cells(load_matrix_text(text).cells(), None)


def one(extra: str) -> tuple[str, str | None]:
    (cell,) = plan(BASE + f"  - {extra}\n")
    return cell.status, cell.reason


def test_a_cell_without_a_layout_keeps_its_id():
    (cell,) = plan(BASE)
    assert cell.cell["layout"] is None
    assert cell.cell_id == cell_id({k: v for k, v in cell.cell.items() if k != "layout"})
    (with_layout,) = plan(BASE + "  - {layout: 'tp=2'}\n")
    assert with_layout.cell_id != cell.cell_id and "(tp=2)" in with_layout.label()


@pytest.mark.parametrize("extra", [
    "{layout: 'tp=2'}",
    "{layout: 'pp=2,schedule=1f1b,m=4'}",
    "{layout: 'pp=2,schedule=gpipe,m=2'}",
    "{layout: 'dp_shard=2'}",
    "{layout: 'dp_replicate=2', engine: native}",
    "{layout: 'dp_replicate=2,dp_shard=2', gpus: 4}",
    "{layout: 'dp_shard=2,tp=2', gpus: 4}",
])
def test_layouts_the_cpu_runs_are_planned(extra):
    assert one(extra) == ("planned", None)


@pytest.mark.parametrize("extra,reason", [
    ("{layout: 'tp=8', gpus: 8}", "4 heads are not divisible by tp=8"),
    ("{layout: 'pp=4', gpus: 4}", "2 layers are not divisible by pp × virtual stages = 4"),
    ("{layout: 'pp=2,m=3'}", "4 sequences per replica are not divisible by 3 micro-batches"),
    ("{layout: 'cp=2'}", "context parallelism runs on GPU cells only"),
    # what no engine runs is said before which engine would (ep alone only replicates the model)
    ("{layout: 'ep=2', engine: native}", "ep is reserved for mixture-of-experts shapes"),
    ("{layout: 'ep=2'}", "ep is reserved for mixture-of-experts shapes"),
    ("{layout: 'tp=2,pp=2'}", "the degrees' product is 4, not the world size 2"),
    ("{layout: 'tp=2', engine: native}", "it runs as engine=fsdp2, not engine=native"),
    ("{layout: 'tp=2', model: resnet50, engine: native}", "layouts train the transformer only"),
])
def test_a_layout_that_cannot_run_is_skipped_with_its_reason(extra, reason):
    status, why = one(extra)
    assert status == "skipped" and reason in why, why


def test_tp_across_nodes_is_planned_only_when_the_cell_asks():
    """tp=2 over two nodes of one worker each: refused as a cell is, planned with `tp_across_nodes: true` (to
    measure the fabric), under an id of its own; a cell that does not set the key keeps the id it had before it."""
    across = "{gpus: 2, workers_per_node: 1, layout: 'tp=2'"
    (refused,) = plan(BASE + f"  - {across}}}\n")
    assert refused.status == "skipped" and "tp=2 would cross nodes of 1 GPUs" in refused.reason, refused.reason
    assert refused.nodes == 2 and refused.cell["tp_across_nodes"] is False
    (asked,) = plan(BASE + f"  - {across}, tp_across_nodes: true}}\n")
    assert (asked.status, asked.reason, asked.nodes) == ("planned", None, 2)
    assert asked.cell_id != refused.cell_id and "tp-across" in asked.label() and "tp-across" not in refused.label()
    # unset or false: the id the cell had before the key existed
    (unasked,) = plan(BASE + f"  - {across}, tp_across_nodes: false}}\n")
    assert unasked.cell_id == refused.cell_id
    assert refused.cell_id == cell_id({k: v for k, v in refused.cell.items() if k != "tp_across_nodes"})
    # an axis too, and a --where term
    (off, on) = plan(BASE.replace("  mpi: [gloo]", "  mpi: [gloo]\n  tp_across_nodes: [false, true]")
                     + f"  - {across}}}\n")
    assert (off.cell_id, off.status, on.cell_id, on.status) == (refused.cell_id, "skipped", asked.cell_id, "planned")


def test_where_selects_tp_across_nodes(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(BASE.replace("  mpi: [gloo]", "  mpi: [gloo]\n  tp_across_nodes: [false, true]")
                    + "  - {gpus: 2, workers_per_node: 1, layout: 'tp=2'}\n", encoding="utf-8")
    code, out, err = bench("plan", str(path), "--format", "json", "--where", "tp_across_nodes=true")
    assert code == 0, err
    (cell,) = json.loads(out)  # skipped here: the local backend has one machine, not two nodes
    assert cell["tp_across_nodes"] is True and "would cross nodes" not in (cell["reason"] or "")


def test_cp_plans_on_a_gpu_and_a_layout_too_big_for_the_gpu_is_skipped():
    gpu = BASE.replace("gpu: [cpu]", "gpu: [H100]").replace("mpi: [gloo]", "mpi: [openmpi]")
    assert one_of(gpu, "{layout: 'cp=2'}") == ("planned", None)
    # the model's state is small (the catalogue's rule passes it); 4,096 sequences of 8,192 tokens' activations are not
    big = gpu.replace("seq_len: 32, batch_per_gpu: 4", "seq_len: 8192, batch_per_gpu: 4096")
    status, why = one_of(big, "{layout: 'tp=2'}")
    assert status == "skipped" and "GiB per GPU" in why and "usable" in why, why


def one_of(text: str, extra: str):
    (cell,) = plan(text + f"  - {extra}\n")
    return cell.status, cell.reason


@pytest.mark.parametrize("value,words", [
    ("tp=two", "tp takes a whole number"),
    ("tq=2", "unknown key 'tq'"),
    ("pp=2,schedule=zigzag", "schedule 'zigzag' is not one of"),
])
def test_a_malformed_layout_is_one_line_and_exit_2(tmp_path, value, words):
    path = tmp_path / "m.yaml"
    path.write_text(BASE + f"  - {{layout: '{value}'}}\n", encoding="utf-8")
    code, out, err = bench("plan", str(path))
    assert code == 2 and out == "", out
    assert len(err.strip().splitlines()) == 1 and "include[1].layout" in err and words in err, err


def test_the_planners_emitted_matrix_plans_its_layouts(tmp_path):
    path = tmp_path / "emitted.yaml"
    code, _, err = bench("model", "--layouts", "--model", "llama3-70b", "--gpu", "H100", "--nodes", "8", "--fabric",
                         "ib", "--top", "3", "--emit-matrix", str(path))
    assert (code, err) == (0, "")
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    code, out, err = bench("plan", str(path), "--format", "json")
    assert code == 0, err
    assert [c["layout"] for c in json.loads(out)] == [e["layout"] for e in doc["include"]]
    # the planner's rules and the plan's agree: every layout it emitted as fitting is feasible (no backend's reach)
    cells = plan_cells(load_matrix(path).cells(), None)
    assert [c.status for c in cells] == ["planned"] * 3, [c.reason for c in cells]


def test_the_planners_emitted_matrix_asks_for_tp_across_nodes_where_it_was_asked(tmp_path):
    """With --tp-across-nodes, an emitted layout whose tp group crosses nodes (tp=4 over 2 × 2 GPUs) carries
    `tp_across_nodes: true`, so the plan runs it; one whose tp stays in a node leaves the key out."""
    path = tmp_path / "emitted.yaml"
    code, _, err = bench("model", "--layouts", "--model", "llama3-8b", "--gpu", "H100-NVL", "--nodes", "2", "--fabric",
                         "tcp", "--tp-across-nodes", "--layout", "tp=4", "--layout", "dp_shard=2,tp=2",
                         "--emit-matrix", str(path))
    assert (code, err) == (0, "")
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert {e["layout"]: e.get("tp_across_nodes") for e in doc["include"]} == {"tp=4": True, "dp_shard=2,tp=2": None}
    cells = plan_cells(load_matrix(path).cells(), None)
    assert [c.status for c in cells] == ["planned"] * 2, [c.reason for c in cells]


def test_the_transformers_bool_keys_select_by_true_and_false_in_a_plan_and_in_a_store_frame():
    """`--where activation_checkpointing=false` matched none of matrix.yaml's cells while the key was not one of the
    selection's bool keys (its text 'false' was compared with the cells' False); the store keeps both keys as 0/1."""
    import pandas as pd

    from bench.cells.selection import matches, parse_selection
    from tests.conftest import ROOT

    code, out, err = bench("plan", str(ROOT / "matrix-llm-layouts.yaml"), "--format", "json", "--where",
                           "activation_checkpointing=true")
    assert code == 0, err
    cells = json.loads(out)
    assert cells and all(c["activation_checkpointing"] is True for c in cells)
    frame = pd.DataFrame({"activation_checkpointing": [1, 0, 0], "tp_across_nodes": [0, 1, 0]})  # the store's 0/1
    assert matches(frame, parse_selection("activation_checkpointing=true")).tolist() == [True, False, False]
    assert matches(frame, parse_selection("activation_checkpointing=off,tp_across_nodes=yes")).tolist() == [
        False, True, False]
