"""The layout worker's collective timer (models/workloads/transformer/collective_timer.py) charges FSDP2's gathers and
reduce-scatters to the dp_shard dimension: two real Gloo ranks take an FSDP2 step under it (tests/workers/
fsdp_collective_timer.py). Before torch 2.13's FSDP2 called all_gather_single and reduce_scatter_single, which the
timer did not wrap, the FSDP and HSDP cells' dp_shard time read nothing."""
import json
import socket
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.launcher  # two spawned Gloo ranks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fsdp2s_collectives_are_charged_to_dp_shard():
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "workers" / "fsdp_collective_timer.py"),
                           str(free_port())], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = json.loads(done.stdout.strip().splitlines()[-1])
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert set(r["seconds"]) == {"dp_shard"} and r["seconds"]["dp_shard"] > 0, r


@pytest.mark.parametrize("broken", [False, True], ids=["as-ddp", "broken-hook"])
def test_ddps_all_reduces_are_timed_by_a_hook_that_averages_as_ddp_does(broken):
    """Three SGD steps of two ranks under DDP's own all-reduce and under the timing hook end at the same parameters,
    with dp_replicate time charged; a hook that sums instead of averaging (the broken run) ends elsewhere."""
    args = [str(free_port())] + (["broken"] if broken else [])
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "workers" / "ddp_hook_timer.py"), *args],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = json.loads(done.stdout.strip().splitlines()[-1])
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert set(r["seconds"]) == {"dp_replicate"} and r["seconds"]["dp_replicate"] > 0, r
        assert (r["max_difference"] > 1e-3) if broken else (r["max_difference"] < 1e-6), r


ONE_DIMENSION = """
name: one-dimension
workload: {{model: tiny, seq_len: 64, batch_per_gpu: 2, warmup_steps: 2, steps: 6, repeats: 1, threads: 1}}
axes: {{gpu: [cpu], mpi: [gloo], gpus: [2], engine: [{engine}], layout: ['{layout}']}}
"""


@pytest.mark.parametrize("layout,engine", [("dp_shard=2", "fsdp2"), ("dp_replicate=2", "native")])
def test_a_one_dimension_layout_times_its_dimension_too(tmp_path, layout, engine):
    """A layout of one data-parallel degree runs as the engine itself (models/workloads/transformer/layout_run.py),
    not on a mesh of its own: its FSDP2 collectives are charged to dp_shard, and DDP's bucketed all-reduces (through
    a communication hook, from launch to completion) to dp_replicate (both read nothing before); the time in flight
    is within the step it overlaps."""
    import sqlite3

    from tests.conftest import bench_cli

    (tmp_path / "m.yaml").write_text(ONE_DIMENSION.format(layout=layout, engine=engine), encoding="utf-8")
    run = bench_cli("run", "m.yaml", "--no-probe", cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    with sqlite3.connect(tmp_path / "results" / "bench.db") as db:
        (record,) = [json.loads(text) for (text,) in db.execute("SELECT record_json FROM records")]
    dim = layout.split("=")[0]
    per_rank = record["layout"]["collective_s_per_step_by_rank"]
    assert len(per_rank) == 2 and all(set(r) == {dim} and r[dim] > 0 for r in per_rank), per_rank
    assert record["layout"]["collective_s_per_step"][dim] < record["step_time_s"]["max"], record["step_time_s"]


def test_the_time_in_flight_is_the_union_of_the_intervals():
    from models.workloads.transformer.collective_timer import covered

    assert covered([]) == 0.0
    assert covered([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]) == pytest.approx(3.0)  # overlapping buckets count once
    assert covered([(3.0, 4.0), (0.0, 5.0)]) == pytest.approx(5.0)  # one inside another, in any order
