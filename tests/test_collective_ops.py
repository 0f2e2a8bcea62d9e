"""Allgather and broadcast beside allreduce: one table of bus bandwidth factors (models/registry/collectives.py) that
the worker and the record's validation both use, the sizes allgather moves, their own cell ids, and α/β kept to
allreduce."""
import pytest

from bench.analysis.collectives import fit_alpha_beta, fit_stacks
from bench.backends.shared.cell_launch import worker_program
from bench.core.errors import BenchInputError
from bench.planning.cell import PlannedCell, cell_id
from bench.planning.feasibility import build_reason
from bench.planning.matrix import load_matrix_text
from bench.records.schema import COLLECTIVE_MODELS, parse_record
from models.registry.collectives import COLLECTIVES
from models.workloads.collectives.sweep_worker import op_sizes, size_row, sweep_sizes


@pytest.mark.parametrize("op,n,factor", [
    ("allreduce", 2, 1.0), ("allreduce", 4, 1.5), ("allreduce", 8, 1.75),
    ("allgather", 2, 0.5), ("allgather", 4, 0.75), ("allgather", 8, 0.875),
    ("reduce_scatter", 2, 0.5), ("reduce_scatter", 8, 0.875),
    ("broadcast", 2, 1.0), ("broadcast", 8, 1.0), ("sendrecv", 2, 1.0), ("sendrecv", 8, 1.0),
    ("pipeline_p2p", 2, 1.0), ("pipeline_p2p", 8, 1.0),
])
def test_bus_factors_are_nccl_tests_definitions(op, n, factor):
    assert COLLECTIVES[op]["bus_factor"](n) == pytest.approx(factor)
    row = size_row(op, 4096 * n, [[0.001, 0.002, 0.003]] * n, n)
    assert row["op"] == op and row["algbw_bytes_per_s"] == pytest.approx(4096 * n / 0.002)
    assert row["busbw_bytes_per_s"] == pytest.approx(row["algbw_bytes_per_s"] * factor)


def test_collective_models_come_from_the_registry():
    assert COLLECTIVE_MODELS == tuple(COLLECTIVES) == ("allreduce", "allgather", "reduce_scatter", "broadcast",
                                                       "sendrecv", "pipeline_p2p")


def _record(op: str, world: int, busbw_factor: float, model: str | None = None) -> dict:
    size, t = 65536, 0.002
    row = {"op": op, "bytes": size, "iterations": 3, "time_median_s": t, "time_p10_s": t, "time_p90_s": t,
           "time_min_s": t, "time_max_s": t, "algbw_bytes_per_s": size / t,
           "busbw_bytes_per_s": size / t * busbw_factor}
    return {"run_id": "r", "cell_id": "c", "repeat": 0, "status": "ok", "cell": {"model": model or op},
            "world_size": world, "collective": [row]}


@pytest.mark.parametrize("op,factor", [("allreduce", 1.5), ("allgather", 0.75), ("broadcast", 1.0)])
def test_a_record_s_busbw_must_follow_from_its_own_op_s_factor(op, factor):
    assert parse_record(_record(op, 4, factor)).collective[0].op == op


@pytest.mark.parametrize("op,factor,formula", [("allgather", 1.5, "(n-1)/n"), ("broadcast", 0.75, "1"),
                                               ("allreduce", 0.75, "2(n-1)/n")])
def test_a_busbw_from_another_op_s_factor_is_refused_naming_the_formula(op, factor, formula):
    with pytest.raises(BenchInputError, match=rf"busbw .* != algbw x {formula.replace('(', '[(]').replace(')', '[)]')}"
                                             rf" = .* \({op}, n = 4\)"):
        parse_record(_record(op, 4, factor))


def test_a_row_of_another_op_than_the_cell_s_model_is_refused():
    with pytest.raises(BenchInputError, match="a allgather row in a model=broadcast cell's record"):
        parse_record(_record("allgather", 2, 0.5, model="broadcast"))
    with pytest.raises(BenchInputError, match="op"):
        parse_record(_record("alltoall", 2, 1.0, model="allreduce"))


def test_reduce_scatter_sizes_are_whole_slices_like_allgathers():
    assert op_sizes("reduce_scatter", 16384, 3) == op_sizes("allgather", 16384, 3) == [4092, 16380]


def test_allgather_sizes_are_whole_slices_of_the_gathered_output():
    assert op_sizes("allgather", 4 << 20, 2) == sweep_sizes(4 << 20) == op_sizes("broadcast", 4 << 20, 3)
    # n = 3 does not divide 4096: each rank sends 341 floats, 4,092 bytes gathered, and the row says 4,092.
    assert op_sizes("allgather", 16384, 3) == [4092, 16380]
    # ResNet-50's 102,228,128 bytes over 16 ranks: 25,557,032 floats do not split in 16: 1,597,314 each, 32 bytes fewer.
    assert op_sizes("allgather", 102_228_128, 16)[-1] == 1_597_314 * 16 * 4 == 102_228_096
    # Far more ranks than floats in the smallest message: one float each, and sizes that collapse appear once.
    assert op_sizes("allgather", 65536, 4096) == [16384, 65536]


def test_each_op_is_its_own_cell_with_its_own_id_planned_like_allreduce(tmp_path):
    text = ("name: t\nworkload: {max_message_bytes: 8192}\n"
            "axes: {gpu: [cpu], model: [allreduce, allgather, broadcast]}\n")
    cells = load_matrix_text(text).cells()
    assert [c["model"] for c in cells] == ["allreduce", "allgather", "broadcast"]
    assert len({cell_id(c) for c in cells}) == 3
    for c in cells:
        assert build_reason(c) is None
        argv = worker_program(PlannedCell(c, cell_id(c), "planned"), "r1", tmp_path / "out.jsonl", 1)
        assert argv[1].endswith("models/workloads/collectives/sweep_worker.py")
        assert argv[argv.index("--op") + 1] == c["model"]
    tf, = load_matrix_text("name: t\nworkload: {model: broadcast}\naxes: {gpu: [cpu], framework: [keras]}\n").cells()
    assert build_reason(tf) == "model=broadcast: the collective sweep runs through pytorch only (framework=keras)"


def test_an_unknown_collective_is_refused_in_the_matrix():
    with pytest.raises(BenchInputError, match="workload.model"):
        load_matrix_text("name: t\nworkload: {model: alltoall}\naxes: {gpu: [cpu]}\n")


def _rows(op: str, stack: dict) -> list[dict]:
    return [{"op": op, "bytes": b, "time_median_s": 1e-4 + b / 1e9, "world_size": 2, **stack}
            for b in (4096, 65536, 1 << 20, 16 << 20)]


def test_alpha_beta_come_from_allreduce_rows_only_and_a_stack_without_them_has_no_fit():
    stack = {"gpu": "cpu", "mpi": "gloo", "ib": False, "engine": "horovod", "nodes": 1}
    gathered = _rows("allgather", stack) + _rows("broadcast", stack)
    fit = fit_alpha_beta(gathered)
    assert not fit.usable and "no allreduce rows" in fit.reason and fit.points == 0
    assert fit_stacks(gathered) == {}
    fits = fit_stacks(gathered + _rows("allreduce", stack))
    (only,) = fits.values()
    assert only.usable and only.points == 4


def test_the_replay_pace_is_each_replays_slowest_rank_then_the_median():
    """A step waits for whichever rank is slower that step: replay by replay the slower rank's pace, then the median
    (0.6 here), not the slower of the ranks' own medians (0.7), which forgets the replays the other rank lagged."""
    replayed = [{"rates": [0.9, 0.5, 0.8], "tails": [0.01, 0.02, 0.03]},
                {"rates": [0.6, 0.9, 0.7], "tails": [0.05, 0.01, 0.01]}]
    row = size_row("allreduce", 4096, [[0.001, 0.002, 0.003]] * 2, 2, replayed=replayed)
    assert row["replay_compute_ratio"] == 0.6 and row["replay_tail_s"] == 0.03
    assert size_row("allreduce", 4096, [[0.001]] * 2, 2)["replay_compute_ratio"] is None
