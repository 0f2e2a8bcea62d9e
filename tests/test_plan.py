"""Planning: skipped reasons, cell ids, and the plan's JSON/--show-commands output."""
import json
import os
import subprocess
import sys

import pytest

from bench.backends.local.backend import LocalBackend, local_gpus
from bench.facts.catalog import catalog
from bench.planning.cell import cell_id
from bench.planning.matrix import load_matrix_text
from bench.planning.plan import plan_cells
from tests.conftest import ROOT, bench_cli


def plan(text, backend=None):
    return plan_cells(load_matrix_text(text).cells(), backend)


def one(gpu, backend=None, **kw):
    extra = "".join(f"  {k}: [{str(v).lower() if isinstance(v, bool) else v}]\n" for k, v in kw.items())
    cells = plan(f"name: t\naxes:\n  gpu: [{gpu}]\n{extra}", backend)
    assert len(cells) == 1
    return cells[0]


@pytest.mark.parametrize("gpu,kw,words", [
    ("K80", {"precision": "fp16"}, "fp16 on K80"),
    ("P40", {"precision": "fp16"}, "fp16 on P40"),
    ("V100", {"precision": "bf16"}, "bf16 on V100"),
    ("T4", {"precision": "bf16"}, "needs Ampere"),
    ("cpu", {"precision": "fp16"}, "fp16 on cpu"),
    ("T4", {"ib": True, "gpus": 8}, "has no InfiniBand"),
    ("K80", {"ib": True, "gpus": 8, "mpi": "openmpi"}, "only by Intel MPI"),
    ("A100", {"ib": True, "gpus": 8}, "single-node cell"),
    ("V100", {"gpus": 6}, "unevenly"),
    ("V100", {"framework": "keras", "warmup_steps": 0}, "needs at least 1"),
    ("V100", {"engine": "native", "mpi": "mpich"}, "DDP is started by mpirun (mpi: openmpi) or torchrun (mpi: gloo)"),
    ("V100", {"data": "imagenet", "data_layout": "tfrecord"}, "reads ImageNet as jpeg only"),
])
def test_infeasible_cells_stay_in_the_plan_with_a_reason(gpu, kw, words):
    cell = one(gpu, **kw)
    assert cell.status == "skipped"
    assert words in cell.reason
    assert "\n" not in cell.reason


def test_feasible_gpu_cells_are_planned_without_a_backend_and_unreachable_on_local(tmp_path):
    assert one("V100", precision="fp16", gpus=8, ib=True).status == "planned"
    assert one("K80", gpus=8, ib=True, mpi="gloo").reason.endswith("reachable only by Intel MPI")
    local = LocalBackend(tmp_path, 60)
    v100 = one("V100", local, gpus=1)
    gpus = local_gpus()  # none here; a GPU machine (not a V100 one) names what it has
    has = f"{len(gpus)}x {gpus[0]}" if gpus else "no GPU"
    assert v100.status == "skipped"
    assert v100.reason == f"V100 cell needs 1x {catalog()['V100'].gpu_model}; this machine has {has}"
    assert "needs 2 nodes" in one("V100", local, gpus=8).reason
    assert one("cpu", local, gpus=1).status == "planned"
    assert "oversubscribe" in one("cpu", local, gpus=os.cpu_count() + 1).reason
    assert "set backend.imagenet_dir" in one("cpu", local, data="imagenet").reason
    missing = LocalBackend(tmp_path, 60, imagenet_dir=str(tmp_path / "nowhere"))
    assert "no dataset at" in one("cpu", missing, data="imagenet").reason


def test_reasons_shared_between_cells_are_those_each_cell_gets_alone(tmp_path):
    """The plan memoises reasons on the fields the rules read: a field left out of its key would hand one cell's
    reason (or none) to another that differs only there (a collective cell and a training cell once did)."""
    from bench.planning.feasibility import build_reason, hardware_reason

    cells = load_matrix_text("name: t\naxes: {gpu: [cpu, V100], model: [resnet50, allreduce], "
                             "framework: [pytorch, tensorflow, keras], engine: [horovod, native], mpi: [gloo, mpich], "
                             "channels_last: [true, false], warmup_steps: [0, 1], precision: [fp32, bf16], "
                             "data: [synthetic, imagenet], data_layout: [jpeg, tfrecord]}\n").cells()
    backend = LocalBackend(tmp_path, 60, imagenet_dir=str(tmp_path))
    planned = plan_cells(cells, backend)
    alone = [hardware_reason(c, catalog()[c["gpu"]]) or build_reason(c) or backend.reach_reason(c, 1) for c in cells]
    assert [p.reason for p in planned] == alone
    assert len(set(alone)) > 10  # the axes above reach many different rules


def test_node_count_comes_from_the_catalogue():
    assert [c.nodes for c in plan("name: t\naxes: {gpu: [V100], gpus: [1, 4, 8, 32]}\n")] == [1, 1, 2, 8]
    assert [c.nodes for c in plan("name: t\naxes: {gpu: [H200], gpus: [8, 16]}\n")] == [1, 2]


def test_cell_id_is_stable_content_addressed_and_order_independent():
    cells = load_matrix_text("name: t\naxes: {gpu: [V100, A100], gpus: [1, 2]}\n").cells()
    ids = [cell_id(c) for c in cells]
    assert len(set(ids)) == 4 and all(len(i) == 12 for i in ids)
    reordered = load_matrix_text("name: other\naxes: {gpus: [2, 1], gpu: [A100, V100]}\n").cells()
    assert sorted(cell_id(c) for c in reordered) == sorted(ids)
    # Every field counts: a change anywhere gives another id.
    c = dict(cells[0])
    for key, value in (("steps", 51), ("ib", True), ("threads", 2), ("channels_last", False)):
        assert cell_id({**c, key: value}) != cell_id(c)
    # Same id in another process (no dependence on hash seeds or dict order).
    code = ("from bench.planning.matrix import load_matrix_text; from bench.planning.cell import cell_id;"
            "print(cell_id(load_matrix_text('name: t\\naxes: {gpu: [V100, A100], gpus: [1, 2]}\\n').cells()[0]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONHASHSEED": "123"}, check=True).stdout.strip()
    assert out == ids[0]


def test_cell_id_golden_value():
    # If this changes, every stored history loses its link to new runs: only change it on purpose
    # (bump the workload version instead when what is measured changes).
    cell = load_matrix_text("name: t\naxes: {gpu: [cpu], gpus: [2]}\n").cells()[0]
    assert cell_id(cell) == "d7151f5334aa"


def test_plan_json_lists_every_cell_with_status_reason_and_commands(write_matrix, tmp_path):
    path = write_matrix("name: t\naxes:\n  gpu: [cpu, V100]\n  mpi: [gloo, openmpi]\n  gpus: [1, 2]\n")
    result = bench_cli("plan", str(path), "--format", "json", "--show-commands", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == 8
    for row in rows:
        assert {"cell_id", "gpu", "framework", "mpi", "ib", "gpus", "batch_per_gpu", "precision", "status",
                "reason"} <= set(row)
    planned = [r for r in rows if r["status"] == "planned"]
    assert {(r["gpu"], r["mpi"], r["gpus"]) for r in planned} == {("cpu", m, n) for m in ("gloo", "openmpi")
                                                                   for n in (1, 2)}
    for r in planned:
        argv = r["command"]["argv"]
        assert argv[0].endswith("horovodrun" if r["mpi"] == "gloo" else "mpirun")
        assert argv[argv.index("-np") + 1] == str(r["gpus"])
        assert "--cell-id" in argv and argv[argv.index("--cell-id") + 1] == r["cell_id"]
        assert r["command"]["env"]["OMP_NUM_THREADS"].isdigit()
    assert all(r["reason"] and "command" not in r for r in rows if r["status"] == "skipped")


@pytest.mark.slow
def test_plan_prints_a_summary_and_every_cell_only_with_all(write_matrix, tmp_path):
    path = write_matrix("name: tiny\naxes:\n  gpu: [cpu, K80]\n  precision: [fp32, fp16]\n")
    cells = json.loads(bench_cli("plan", str(path), "--format", "json", cwd=tmp_path).stdout)
    planned = [c for c in cells if c["status"] == "planned"]
    skipped = [c for c in cells if c["status"] == "skipped"]
    assert planned and skipped
    summary = bench_cli("plan", str(path), cwd=tmp_path)
    assert summary.returncode == 0, summary.stderr
    lines = summary.stdout.splitlines()
    assert lines[0] == f"tiny: 4 cells, {len(planned)} planned, {len(skipped)} skipped"
    # One count per distinct reason, adding up to the skipped cells; each planned cell on a line of its own.
    reason_lines = lines[lines.index("skipped, by reason:") + 1:lines.index("planned cells:") - 1]
    counts = {line.split(None, 1)[1]: int(line.split()[0]) for line in reason_lines}
    assert counts == {r: sum(c["reason"] == r for c in skipped) for r in {c["reason"] for c in skipped}}
    for c in planned:
        assert any(line.split()[0] == c["cell_id"] for line in lines if line.startswith("  ")), c["cell_id"]
    assert not any(c["cell_id"] in summary.stdout for c in skipped)  # skipped cells only counted
    every = bench_cli("plan", str(path), "--all", cwd=tmp_path, env={"COLUMNS": "200"})
    assert every.returncode == 0
    assert "tiny: 4 cells" in every.stdout and all(c["cell_id"] in every.stdout for c in cells)


@pytest.mark.slow
def test_plan_summary_of_the_default_matrix_is_short_when_piped(tmp_path):
    result = bench_cli("plan", str(ROOT / "matrix.yaml"), cwd=tmp_path)  # piped: not a terminal
    assert result.returncode == 0, result.stderr
    rows = json.loads(bench_cli("plan", str(ROOT / "matrix.yaml"), "--format", "json", cwd=tmp_path).stdout)
    reasons = {r["reason"] for r in rows if r["status"] == "skipped"}
    planned = sum(r["status"] == "planned" for r in rows)
    # Header, reasons, planned cells and a few blank/hint lines; nothing per skipped cell.
    assert len(result.stdout.splitlines()) <= len(reasons) + planned + 8
    assert f"{len(rows)} cells, {planned} planned" in result.stdout


def test_select_cells_keeps_plan_order_takes_a_cell_id_and_refuses_a_selection_of_none():
    from bench.core.errors import BenchInputError
    from bench.planning.plan import select_cells

    planned = plan("name: t\naxes: {gpu: [cpu, V100], mpi: [gloo, openmpi], gpus: [1, 2]}\n")
    assert select_cells(planned, None) == planned and select_cells(planned, " ") == planned
    gloo_cpu = select_cells(planned, "mpi=gloo,gpu=cpu")
    assert [(p.cell["mpi"], p.cell["gpu"]) for p in gloo_cpu] == [("gloo", "cpu")] * 2
    assert [p.cell["gpus"] for p in gloo_cpu] == [p.cell["gpus"] for p in planned if p in gloo_cpu]
    assert select_cells(planned, planned[3].cell_id) == [planned[3]]
    assert [p.cell_id for p in select_cells(planned, "gpus=2,ib=off|on")] == \
        [p.cell_id for p in planned if p.cell["gpus"] == 2]
    for bad, words in (("mpi=mpich", "matches none of the matrix's 8 cells"), ("gpux=1", "unknown key 'gpux'"),
                       ("gpus=two", "'gpus' takes a whole number")):
        with pytest.raises(BenchInputError, match=words):
            select_cells(planned, bad)
