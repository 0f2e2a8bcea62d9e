"""The whole grid on the default install: every framework (PyTorch, TensorFlow, Keras) under every MPI flavour (Open
MPI, Intel MPI, MPICH, Gloo) and every engine it has (Horovod; DDP and the transformer's FSDP2 where a flavour starts
torch.distributed), 2 workers each, planned and run for real with `bench run`.

A pair the default install cannot serve fails this test twice over: planned but failing, or skipped. The only skips
allowed are the design's own (an engine the workload does not have, or one no launcher of that flavour starts), and
the test derives them from the registries rather than listing them. The same pairs across two emulated nodes:
tests/test_hosts.py (TensorFlow under MPICH, Keras under Intel MPI).
"""
import json
import sqlite3

import pandas as pd
import pytest

from bench.launch import LAUNCHERS
from models.registry.engines import TORCH_DISTRIBUTED_ENGINES
from models.registry.workloads import WORKLOADS
from tests.conftest import TINY_WORKLOAD, bench_cli

pytestmark = pytest.mark.e2e

FRAMEWORKS = ("pytorch", "tensorflow", "keras")
FLAVOURS = ("openmpi", "intelmpi", "mpich", "gloo")
ENGINES = ("horovod", "native")

# jobs: 2 on one cell: a cell's jobs repeat it (each its own launch, its own job index); on a PyTorch cell, whose
# launch costs a third of a TensorFlow one's start-up.
MATRIX = f"""
name: grid
{TINY_WORKLOAD}
axes:
  gpu: [cpu]
  framework: [{", ".join(FRAMEWORKS)}]
  mpi: [{", ".join(FLAVOURS)}]
  engine: [{", ".join(ENGINES)}]
  gpus: [2]
  channels_last: [true]
include:
  - {{framework: pytorch, mpi: gloo, engine: horovod, jobs: 2}}
""" + "".join(
    f"  - {{gpu: cpu, framework: pytorch, mpi: {m}, engine: fsdp2, gpus: 2, model: tiny, seq_len: 32}}\n"
    for m in FLAVOURS)


def by_design(framework: str, mpi: str, engine: str) -> bool:
    """Whether the registries themselves rule the cell out (not this machine, not its install)."""
    engines = ("horovod", "native", "fsdp2") if framework == "transformer" else WORKLOADS[framework]["engines"]
    return engine not in engines or (engine in TORCH_DISTRIBUTED_ENGINES and LAUNCHERS[mpi].native is None)


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    d = tmp_path_factory.mktemp("grid")
    (d / "m.yaml").write_text(MATRIX, encoding="utf-8")
    plan = json.loads(bench_cli("plan", "m.yaml", "--format", "json", cwd=d).stdout)
    # --no-probe: the grid asks whether each pair runs, not how its rate compares with its expected value. 16 cells
    # of 10-25 s each on 2 cores (TensorFlow's start-up is most of its cells)
    run = bench_cli("run", "m.yaml", "--no-probe", cwd=d, timeout=1500)
    with sqlite3.connect(d / "results" / "bench.db") as conn:
        df = pd.read_sql("SELECT * FROM records", conn)
    return plan, run, df


def _pair(row) -> tuple[str, str, str]:
    return ("transformer" if row["model"] == "tiny" else row["framework"], row["mpi"], row["engine"])


@pytest.mark.timeout(1800)  # the first test pays for the module's run
def test_the_plan_skips_only_what_the_design_rules_out(grid):
    plan, _, _ = grid
    assert len(plan) == len(FRAMEWORKS) * len(FLAVOURS) * len(ENGINES) + len(FLAVOURS)
    wrong = [(_pair(c), c["reason"]) for c in plan if (c["status"] == "skipped") != by_design(*_pair(c))]
    assert not wrong, wrong
    # every framework under every flavour with Horovod, on this install
    horovod = {(c["framework"], c["mpi"]) for c in plan if c["engine"] == "horovod" and c["status"] == "planned"}
    assert horovod == {(f, m) for f in FRAMEWORKS for m in FLAVOURS}


def test_every_planned_pair_runs_and_records_two_workers(grid):
    plan, run, df = grid
    assert run.returncode == 0, run.stderr[-4000:]
    planned = {c["cell_id"]: _pair(c) for c in plan if c["status"] == "planned"}
    failed = df[df.status != "ok"]
    assert failed.empty, [(planned.get(r.cell_id), r.error) for r in failed.itertuples()]
    assert set(df.cell_id) == set(planned)
    assert (df.world_size == 2).all() and set(df.groupby("cell_id").repeat.nunique()) == {2}
    jobs = df[df.model == "resnet50"].groupby(["framework", "mpi", "engine"]).job.nunique()
    assert jobs.to_dict() == {pair: 2 if pair == ("pytorch", "gloo", "horovod") else 1 for pair in jobs.index}
    # ResNet-50's workers record their environment probe (the transformer's record none yet)
    for row in df[df.model == "resnet50"].itertuples():
        rec = json.loads(row.record_json)
        assert rec["env_probe"]["framework"] == row.framework
        if row.engine == "horovod":  # each flavour's own Horovod build: both controllers, this ABI's MPI
            assert rec["env_probe"]["horovod_built"] == {"mpi": True, "gloo": True, "nccl": False}
        else:  # DDP and FSDP2 run without Horovod, over torch.distributed's Gloo backend
            assert rec["env_probe"]["horovod_version"] is None
            assert rec["env_probe"]["torch_distributed_backend"] == "gloo"
            assert ("torch.distributed.run" in rec["command"]) == (row.mpi == "gloo")


def test_records_have_the_same_shape_whatever_the_framework_and_flavour(grid):
    _, _, df = grid
    shapes: dict[str, set] = {}
    for row in df[(df.model == "resnet50") & (df.engine == "horovod")].itertuples():
        rec = json.loads(row.record_json)
        shape = (tuple(sorted(k for k in rec if rec[k] is not None or k in ("error",))),
                 tuple(sorted(rec["per_rank"][0])), tuple(sorted(rec["step_time_s"])))
        shapes.setdefault(row.framework, set()).add(shape)
        assert rec["env_probe"]["malloc"].startswith("glibc mallopt")  # every framework holds freed memory
    assert sorted(shapes) == sorted(FRAMEWORKS) and all(len(s) == 1 for s in shapes.values()), shapes
    core = {fw: set(next(iter(s))[0]) for fw, s in shapes.items()}
    # TensorFlow paths also record their data_format; the PyTorch worker also records its step settings (what ran:
    # loader, compile, optimizer kernel, CUDA graphs; TF and Keras have none); the rest is common to all three.
    step_settings = {"loader", "compile", "optimizer_impl", "cuda_graphs"}
    assert core["tensorflow"] == core["keras"] == (core["pytorch"] - step_settings) | {"data_format"}
