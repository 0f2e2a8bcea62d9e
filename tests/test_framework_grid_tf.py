"""The grid's TensorFlow and Keras half (tests/framework_grid.py): ResNet-50 under Horovod with every MPI flavour, 2
workers each, planned, and run for real but for the pairs another module runs (framework_grid.RUN_ELSEWHERE: across
two nodes, on real data); and one PyTorch cell beside them, the reference their records' shape is held to."""
import pytest

from tests import framework_grid as grid_of

pytestmark = pytest.mark.e2e

FRAMEWORKS = ("tensorflow", "keras")
INCLUDE = "  - {gpu: cpu, framework: pytorch, mpi: gloo, engine: horovod, gpus: 2, channels_last: true}\n"


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    return grid_of.run_grid(tmp_path_factory.mktemp("grid-tf"), grid_of.matrix(FRAMEWORKS, INCLUDE),
                            grid_of.matrix(FRAMEWORKS, INCLUDE, exclude=grid_of.RUN_ELSEWHERE))


@pytest.mark.timeout(1800)  # the first test pays for the module's run
def test_the_plan_skips_only_what_the_design_rules_out(grid):
    grid_of.check_plan(grid[0], FRAMEWORKS, extra=1)


def test_every_planned_pair_runs_and_records_two_workers(grid):
    plan, run, df = grid
    grid_of.check_runs(plan, run, df, elsewhere=grid_of.RUN_ELSEWHERE)
    assert set(df.groupby(["framework", "mpi"]).job.nunique()) == {1}
    here = {(f, m) for f, m in zip(df.framework, df.mpi)}
    # each pair once: here, or in the module that runs it (which asserts it did)
    assert here.isdisjoint(grid_of.RUN_ELSEWHERE)
    assert here | set(grid_of.RUN_ELSEWHERE) >= {(f, m) for f in FRAMEWORKS for m in grid_of.FLAVOURS}


def test_records_have_the_same_shape_whatever_the_framework_and_flavour(grid):
    shapes = grid_of.record_shapes(grid[2])
    assert sorted(shapes) == sorted(FRAMEWORKS + ("pytorch",)) and all(len(s) == 1 for s in shapes.values()), shapes
    core = {fw: set(next(iter(s))[0]) for fw, s in shapes.items()}
    # TensorFlow paths also record their data_format; the PyTorch worker also records its step settings (what ran:
    # loader, compile, optimizer kernel, CUDA graphs; TF and Keras have none); the rest is common to all three.
    step_settings = {"loader", "compile", "optimizer_impl", "cuda_graphs"}
    assert core["tensorflow"] == core["keras"] == (core["pytorch"] - step_settings) | {"data_format"}
