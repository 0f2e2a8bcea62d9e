"""The whole grid on the default install, shared by its two halves (tests/test_framework_grid_torch.py: PyTorch and
the transformer; tests/test_framework_grid_tf.py: TensorFlow and Keras): every framework under every MPI flavour
(Open MPI, Intel MPI, MPICH, Gloo) and every engine it has (Horovod; DDP and the transformer's FSDP2 where a flavour
starts torch.distributed), 2 workers each, planned and run for real with `bench run`. Two halves, each its own `bench
run`, so that the suite's two workers share the grid (a module runs on one worker).

A pair the default install cannot serve fails twice over: planned but failing, or skipped. The only skips allowed
are the design's own (an engine the workload does not have, or one no launcher of that flavour starts), and they are
derived from the registries rather than listed.

Every pair is planned here; a TensorFlow or Keras pair that another module already runs through `bench run`, under
harder conditions, is not run a second time (RUN_ELSEWHERE: each TensorFlow launch costs a suite worker about a
minute). Those modules read their pairs from here and assert that they ran them, so a pair cannot drop out of both.
"""
import json
import sqlite3
from pathlib import Path

import pandas as pd

from bench.launch import LAUNCHERS
from models.registry.engines import TORCH_DISTRIBUTED_ENGINES
from models.registry.workloads import WORKLOADS
from tests.conftest import TINY_WORKLOAD, bench_cli

FLAVOURS = ("openmpi", "intelmpi", "mpich", "gloo")
ENGINES = ("horovod", "native")
# (framework, flavour) pairs under Horovod that another module runs through `bench run`, and the grid does not:
RUN_ACROSS_NODES = (("tensorflow", "mpich"), ("keras", "intelmpi"))  # tests/test_hosts.py: one worker on each node
RUN_WITH_REAL_DATA = (("tensorflow", "openmpi"), ("keras", "openmpi"))  # tests/test_e2e.py: an ImageNet sample
RUN_ELSEWHERE = RUN_ACROSS_NODES + RUN_WITH_REAL_DATA


def matrix(frameworks: tuple[str, ...], include: str, exclude: tuple[tuple[str, str], ...] = ()) -> str:
    """The frameworks × FLAVOURS × ENGINES at 2 workers, plus `include`'s YAML list items, less the Horovod cells of
    the (framework, flavour) pairs in `exclude`."""
    left_out = "".join(f"  - {{framework: {f}, mpi: {m}, engine: horovod}}\n" for f, m in exclude)
    return f"""
name: grid
{TINY_WORKLOAD}
axes:
  gpu: [cpu]
  framework: [{", ".join(frameworks)}]
  mpi: [{", ".join(FLAVOURS)}]
  engine: [{", ".join(ENGINES)}]
  gpus: [2]
  channels_last: [true]
include:
{include}""" + (f"exclude:\n{left_out}" if left_out else "")


def run_grid(d: Path, text: str, run_text: str | None = None) -> tuple[list, object, pd.DataFrame]:
    """(the plan as JSON, the `bench run`, the store's records) of the matrix `text` planned in folder `d`, and run
    as it is or as `run_text` (the same cells, some left out: the same ids)."""
    (d / "m.yaml").write_text(text, encoding="utf-8")
    plan = json.loads(bench_cli("plan", "m.yaml", "--format", "json", cwd=d).stdout)
    if run_text is not None:
        (d / "m.yaml").write_text(run_text, encoding="utf-8")
    # --no-probe: the grid asks whether each pair runs, not how its rate compares with its expected value. Cells of
    # 10-25 s each on 2 cores (TensorFlow's start-up is most of its cells)
    run = bench_cli("run", "m.yaml", "--no-probe", cwd=d, timeout=1500)
    with sqlite3.connect(d / "results" / "bench.db") as conn:
        df = pd.read_sql("SELECT * FROM records", conn)
    return plan, run, df


def by_design(framework: str, mpi: str, engine: str) -> bool:
    """Whether the registries themselves rule the cell out (not this machine, not its install)."""
    engines = ("horovod", "native", "fsdp2") if framework == "transformer" else WORKLOADS[framework]["engines"]
    return engine not in engines or (engine in TORCH_DISTRIBUTED_ENGINES and LAUNCHERS[mpi].native is None)


def pair(row) -> tuple[str, str, str]:
    return ("transformer" if row["model"] == "tiny" else row["framework"], row["mpi"], row["engine"])


def check_plan(plan: list, frameworks: tuple[str, ...], extra: int) -> None:
    """Skipped exactly where the design rules a pair out; every framework planned under every flavour with Horovod."""
    assert len(plan) == len(frameworks) * len(FLAVOURS) * len(ENGINES) + extra
    wrong = [(pair(c), c["reason"]) for c in plan if (c["status"] == "skipped") != by_design(*pair(c))]
    assert not wrong, wrong
    horovod = {(c["framework"], c["mpi"]) for c in plan if c["engine"] == "horovod" and c["status"] == "planned"}
    assert {(f, m) for f in frameworks for m in FLAVOURS} <= horovod


def check_runs(plan: list, run, df: pd.DataFrame, elsewhere: tuple[tuple[str, str], ...] = ()) -> None:
    """Every planned cell ran ok with 2 workers and 2 repeats (but the Horovod cells of the pairs run `elsewhere`);
    each flavour's own Horovod build, or torch's Gloo."""
    assert run.returncode == 0, run.stderr[-4000:]
    planned = {c["cell_id"]: pair(c) for c in plan if c["status"] == "planned"
               and not (c["engine"] == "horovod" and (c["framework"], c["mpi"]) in elsewhere)}
    failed = df[df.status != "ok"]
    assert failed.empty, [(planned.get(r.cell_id), r.error) for r in failed.itertuples()]
    assert set(df.cell_id) == set(planned)
    assert (df.world_size == 2).all() and set(df.groupby("cell_id").repeat.nunique()) == {2}
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


def record_shapes(df: pd.DataFrame) -> dict[str, set]:
    """framework → the shapes of its ResNet-50 Horovod records (their keys, a rank's keys, the step time's keys);
    every framework holds freed memory (glibc mallopt)."""
    shapes: dict[str, set] = {}
    for row in df[(df.model == "resnet50") & (df.engine == "horovod")].itertuples():
        rec = json.loads(row.record_json)
        shape = (tuple(sorted(k for k in rec if rec[k] is not None or k in ("error",))),
                 tuple(sorted(rec["per_rank"][0])), tuple(sorted(rec["step_time_s"])))
        shapes.setdefault(row.framework, set()).add(shape)
        assert rec["env_probe"]["malloc"].startswith("glibc mallopt")
    return shapes
