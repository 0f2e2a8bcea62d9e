"""The grid's PyTorch half (tests/framework_grid.py): ResNet-50 under Horovod and DDP and the transformer under
FSDP2, under every MPI flavour, 2 workers each, run for real."""
import pytest

from tests import framework_grid as grid_of

pytestmark = pytest.mark.e2e

FRAMEWORKS = ("pytorch",)
# jobs: 2 on one cell: a cell's jobs repeat it (each its own launch, its own job index)
INCLUDE = "  - {framework: pytorch, mpi: gloo, engine: horovod, jobs: 2}\n" + "".join(
    f"  - {{gpu: cpu, framework: pytorch, mpi: {m}, engine: fsdp2, gpus: 2, model: tiny, seq_len: 32}}\n"
    for m in grid_of.FLAVOURS)


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    return grid_of.run_grid(tmp_path_factory.mktemp("grid-torch"), grid_of.matrix(FRAMEWORKS, INCLUDE))


@pytest.mark.timeout(1800)  # the first test pays for the module's run
def test_the_plan_skips_only_what_the_design_rules_out(grid):
    grid_of.check_plan(grid[0], FRAMEWORKS, extra=len(grid_of.FLAVOURS))


def test_every_planned_pair_runs_and_records_two_workers(grid):
    plan, run, df = grid
    grid_of.check_runs(plan, run, df)
    jobs = df[df.model == "resnet50"].groupby(["framework", "mpi", "engine"]).job.nunique()
    assert jobs.to_dict() == {pair: 2 if pair == ("pytorch", "gloo", "horovod") else 1 for pair in jobs.index}
    # FSDP2 under every flavour that starts torch.distributed
    assert set(df[df.model == "tiny"].mpi) == {m for m in grid_of.FLAVOURS
                                               if not grid_of.by_design("transformer", m, "fsdp2")} != set()


def test_records_have_the_same_shape_under_every_flavour(grid):
    shapes = grid_of.record_shapes(grid[2])
    assert list(shapes) == ["pytorch"] and len(shapes["pytorch"]) == 1, shapes
