"""The engine probe (models/probes/engine_probe.py, bench/backends/local/engine_probe.py) and the expected value it
gives (bench/analysis/expected_probes.py engine_probed): N ranks at the probe's rate, each step longer by the gradients'
allreduce the probe timed; the verdict is the plain one against that value."""
import json
import re

import pytest

from bench.analysis.expected import Expected
from bench.analysis.expected_probes import engine_probed
from bench.analysis.probe import ProbeResult, engine_key, from_entry, to_entry
from bench.backends.local.engine_probe import per_rank_windows

ROW = {"cell_id": "c", "gpu": "cpu", "gpus": 2, "nodes": 1, "batch_per_gpu": 16, "framework": "pytorch",
       "engine": "horovod", "mpi": "gloo", "model": "resnet50", "image_size": 64, "precision": "fp32"}


def _probe(rate=27.4, low=25.5, high=27.7, allreduce_s=0.122) -> ProbeResult:
    return ProbeResult(workers=2, batch=16, rate=rate, rate_low=low, rate_high=high, step_s=16 / rate,
                       compute_s=0.5, allreduce_s=allreduce_s)


def _lead(measured: float) -> Expected:
    return Expected("c", 2, measured, measured * 0.97, measured * 1.03, None)


def test_the_expected_value_is_n_ranks_at_the_probes_rate_plus_the_allreduce():
    e = engine_probed(_lead(42.0), ROW, _probe())
    assert e.expected == pytest.approx(2 * 16 / (16 / 27.4 + 0.122))
    assert e.expected_low == pytest.approx(2 * 16 / (16 / 25.5 + 0.122))
    assert e.comm_s == pytest.approx(0.122) and e.links == "timed by the engine probe"
    assert e.verdict == "as expected"
    assert "engine probe: 2 × 27.4 img/s" in e.describe()


def test_with_no_timing_fsdp2_adds_only_its_reduce_scatters_share():
    # its probe gathers the parameters as the cell does; only the gradients' reduce-scatter (0.5 of 1.5) is left
    ddp = engine_probed(_lead(42.0), {**ROW, "engine": "native"}, _probe(allreduce_s=None))
    fsdp = engine_probed(_lead(42.0), {**ROW, "engine": "fsdp2"}, _probe(allreduce_s=None))
    assert ddp.comm_s > 0 and fsdp.comm_s == pytest.approx(0.5 * ddp.comm_s, rel=1e-3)


def test_ddp_buckets_fill_in_backwards_order_up_to_25_mib():
    from models.probes.engine_probe import DDP_BUCKET_BYTES, buckets_of

    sizes = [1_000_000] * 20  # 4 MB each: six to a 25 MiB bucket
    out = buckets_of(sizes)
    assert sum(out) == sum(sizes) and all(4 * b <= DDP_BUCKET_BYTES for b in out) and len(out) == 4


def test_a_cell_well_under_its_engine_probe_is_below_expected():
    e = engine_probed(_lead(23.6), ROW, _probe())
    assert e.verdict.startswith("below expected by 48%")


def test_a_probe_an_earlier_run_measured_allows_two_runs_noise_and_says_so():
    from dataclasses import replace as with_

    from bench.analysis.expected_probes import SAME_RUN_S, reused_tolerance

    probe = with_(_probe(), measured_unix=1_000_000.0)
    e_mid = 2 * 16 / (16 / 27.4 + 0.122)
    low = 2 * 16 / (16 / 25.5 + 0.122)  # the expected interval's low end
    lead = _lead(0.85 * low / 1.03)  # the measured interval's high end 15% under it
    edge = _lead(0.87 * low / 1.03)  # 13% under it: inside two runs' noise, outside 10%
    fresh = engine_probed(edge, ROW, probe, started=1_000_000.0 + 30)  # measured for this run, seconds before
    reused = engine_probed(edge, ROW, probe, started=1_000_000.0 + SAME_RUN_S + 3600)
    assert fresh.verdict.startswith("below expected") and fresh.tolerance == pytest.approx(0.10)
    assert reused.verdict == "as expected" and reused.tolerance == pytest.approx(reused_tolerance("cpu"))
    assert reused.expected == pytest.approx(e_mid)  # the value is the same number; only the verdict's allowance grows
    assert "the probe is an earlier run's (1.1 h before), so the verdict allows 14%" in reused.describe()
    assert "earlier run" not in fresh.describe()
    # past two runs' noise it is below, reused or not; and a GPU cell's runs differ by less than TOLERANCE
    assert engine_probed(lead, ROW, probe, started=1_000_000.0 + 7200).verdict.startswith("below expected")
    assert reused_tolerance("h100") == pytest.approx(0.10) and reused_tolerance("cpu") == pytest.approx(0.138, abs=1e-3)


def test_the_engine_threads_cost_is_the_engine_probe_against_the_compute_probe():
    compute = _probe(rate=35.6, low=34.9, high=36.0, allreduce_s=None)
    e = engine_probed(_lead(42.0), ROW, _probe(), compute)
    assert e.engine_cost == pytest.approx(1 - 27.4 / 35.6)
    assert "the engine's threads cost 23%" in e.describe()


def test_no_timed_allreduce_falls_back_to_the_model():
    e = engine_probed(_lead(42.0), ROW, _probe(allreduce_s=None))
    assert e.links in ("data sheet", "measured fit") and e.comm_s is not None and e.comm_s >= 0


def test_the_key_carries_the_stack_and_the_entry_round_trips():
    key = engine_key(ROW)
    assert key["stack"] == "gloo/horovod" and key["workers"] == 2
    assert engine_key({**ROW, "mpi": "openmpi"}) != key
    back = from_entry(json.loads(json.dumps(to_entry(key, _probe(), []))))
    assert back.allreduce_s == pytest.approx(0.122) and back.rate == pytest.approx(27.4)


def test_each_ranks_windows_are_the_windows_rate_per_worker():
    records = [{"samples_per_sec": 60.0, "measured_steps": 3, "start_unix": 1.0 + i, "end_unix": 1.5 + i,
                "per_rank": [{"rank": 0, "steps": 3}, {"rank": 1, "steps": 3}]} for i in range(3)]
    ranks = per_rank_windows(records)
    assert len(ranks) == 2 and all(len(w) == 3 for w in ranks)
    assert ranks[1][0]["samples_per_sec"] == 30.0 and ranks[1][0]["per_rank"] == [{"rank": 1, "steps": 3}]


def test_windows_last_about_a_second_at_the_compute_probes_step():
    from bench.backends.local.engine_probe import ENGINE_STEPS, MAX_STEPS, steps_for

    assert steps_for(0.45) == ENGINE_STEPS  # ResNet-50 on this VM: 3 steps are over a second
    assert steps_for(0.04) == 25  # the tiny transformer
    assert steps_for(0.001) == MAX_STEPS and steps_for(None) == ENGINE_STEPS


def test_a_cell_that_outran_its_engine_probe_is_found_and_a_cell_within_it_is_not():
    from bench.analysis.expected_probes import ran_faster_than_probe

    e_mid = 2 * 16 / (16 / 27.4 + 0.122)  # 42.5 img/s
    fast = ran_faster_than_probe(ROW, "c", [1.48 * e_mid + d for d in (-0.5, 0.0, 0.4, 0.2, -0.3)], _probe(), 1.0)
    assert fast is not None and fast.verdict.startswith("above expected by 48%") and fast.engine_probe.rate == 27.4
    assert ran_faster_than_probe(ROW, "c", [e_mid + d for d in (-0.5, 0.0, 0.4)], _probe(), 1.0) is None
    assert ran_faster_than_probe(ROW, "c", [1.08 * e_mid + d for d in (-0.5, 0.0, 0.4)], _probe(), 1.0) is None
    # a probe whose windows changed mode: an interval that holds the cell, a value 22% under it
    mixed = _probe(rate=27.4, low=23.0, high=37.8)
    wide = ran_faster_than_probe(ROW, "c", [1.22 * e_mid + d for d in (-0.5, 0.0, 0.4)], mixed, 1.0)
    assert wide is not None and wide.verdict == "as expected"
    slow = [0.5 * e_mid + d for d in (-0.5, 0.0, 0.4)]  # below: ran_slower_than_probe's case, not this one's
    assert ran_faster_than_probe(ROW, "c", slow, _probe(), 1.0) is None
    assert ran_faster_than_probe(ROW, "c", [2 * e_mid], None, 1.0) is None  # no engine probe
    assert ran_faster_than_probe({**ROW, "gpus": 1}, "c", [2 * e_mid], _probe(), 1.0) is None


def test_a_cell_slower_than_its_engine_probe_with_nothing_beside_it_is_found_once():
    from dataclasses import replace as with_

    from bench.analysis.expected_probes import ran_slower_than_probe
    from bench.analysis.outside import Beside

    e_mid = 2 * 16 / (16 / 27.4 + 0.122)  # 45.3 img/s
    slow = [0.87 * e_mid + d for d in (-0.5, 0.0, 0.4, 0.2, -0.3)]  # 13% under, inside the probe's interval
    found = ran_slower_than_probe(ROW, "c", slow, _probe(), 1.0)
    assert found is not None and found.gap > 0 and found.engine_probe.rate == 27.4
    assert ran_slower_than_probe(ROW, "c", [0.92 * e_mid + d for d in (-0.5, 0.0, 0.4)], _probe(), 1.0) is None
    # a cause named beside the cell: said by the verdict, no probe measured beside it
    hog = Beside(0.98, rank=1, contended=True, name="python3", pid=4242, process_cpu_s_per_s=0.98)
    assert ran_slower_than_probe(ROW, "c", slow, _probe(), 1.0, hog) is None
    # a probe already measured again because its cell was slower: not again
    again = with_(_probe(), again_for={"cell_id": "c", "started_unix": 1.0, "why": "…", "slower": True})
    assert ran_slower_than_probe(ROW, "c", slow, again, 1.0) is None
    assert ran_slower_than_probe({**ROW, "gpus": 1}, "c", slow, _probe(), 1.0) is None


def test_a_cell_still_slower_than_the_probe_measured_again_is_below_at_its_median():
    from dataclasses import replace as with_

    e_low = 2 * 16 / (16 / 25.5 + 0.122)
    # the median 17% under the low end, the windows' interval reaching it: as expected against a first probe
    lead = Expected("c", 2, 0.83 * e_low, 0.70 * e_low, 0.95 * e_low, None)
    assert engine_probed(lead, ROW, _probe()).verdict == "as expected"
    # against a probe measured again after it, that still allows as much: the median decides
    again = with_(_probe(), again_for={"cell_id": "c", "started_unix": 1.0, "why": "…", "slower": True})
    e = engine_probed(lead, ROW, again)
    assert e.verdict.startswith("below expected by ") and "at the median (interval " in e.verdict
    assert "the engine probe measured again after the cell still allows more" in e.verdict
    # a probe measured again that agrees with the cell: as expected, the number near the measurement
    agrees = with_(_probe(rate=0.83 * 27.4, low=0.80 * 25.5, high=0.86 * 27.7),
                   again_for={"cell_id": "c", "started_unix": 1.0, "why": "…", "slower": True})
    near = engine_probed(lead, ROW, agrees)
    assert near.verdict == "as expected" and abs(1 - near.measured / near.expected) < 0.1


def test_a_probe_measured_again_for_a_run_of_its_cell_stands_for_that_run_first():
    from dataclasses import replace as with_

    from bench.analysis.probe import engine_words, match

    key, host = engine_key(ROW), "vm"
    first = to_entry(key, with_(_probe(rate=23.0), measured_unix=1000.0, identity={"hostname": host}), [])
    again = to_entry(key, with_(_probe(rate=35.0), measured_unix=1100.0, identity={"hostname": host},
                                again_for={"cell_id": "c", "started_unix": 1030.0, "why": "the cell ran 48% faster"}),
                     [])
    entries = json.loads(json.dumps([first, again]))
    # that run of the cell (it started at 1030, before the probe measured again): the probe measured for it
    assert match(entries, ROW, host, 1030.0, key_of=engine_key).rate == 35.0
    # another run, started before either: the newest probe measured before it started, as for any cell
    assert match(entries, ROW, host, 1010.0, key_of=engine_key).rate == 23.0
    # another cell of the same settings and stack is not that run, nor is a row that names no cell
    assert match(entries, {**ROW, "cell_id": "d"}, host, 1030.0, key_of=engine_key).rate == 23.0
    unnamed = {k: v for k, v in ROW.items() if k != "cell_id"}
    assert match(entries, unnamed, host, 1010.0, key_of=engine_key).rate == 23.0
    assert "measured again: the cell ran 48% faster" in engine_words(from_entry(again))


@pytest.mark.e2e
@pytest.mark.alone
def test_an_engine_probe_the_cell_ran_faster_than_is_measured_again_after_it(tmp_path):
    """The real thing, with the disagreement planted: a first run measures the probes; the stored engine probe's
    rate is then cut to a third, as if it had caught the engine spinning; the next run of the cell reuses it, runs
    faster than it allows, and measures it again right after. `bench status` judges that run against the probe
    measured for it, and says why it was measured again."""
    from bench.backends.local.engine_probe import AGAIN_AT_MOST
    from tests.conftest import bench_cli

    (tmp_path / "m.yaml").write_text("""
name: again
workload: {model: tiny, seq_len: 128, batch_per_gpu: 4, warmup_steps: 2, steps: 6, repeats: 3, threads: 1}
axes: {gpu: [cpu], framework: [pytorch], mpi: [gloo], ib: [false], gpus: [2]}
backend: {name: local, timeout_s: 300}
""", encoding="utf-8")
    first = bench_cli("run", "m.yaml", cwd=tmp_path, timeout=400)
    assert first.returncode == 0, first.stderr[-2000:]
    path = tmp_path / "results" / "probes" / "engine.json"
    data = json.loads(path.read_text())
    # the newest probe is the one the next run reuses (the first run's, or one it measured again: a tiny cell's
    # first run can read more than 10% over its own probe)
    entry = max(data["entries"], key=lambda e: e["measured_unix"])
    for k in ("rate", "rate_low", "rate_high"):
        entry[k] /= 3
    path.write_text(json.dumps(data))
    before = len(data["entries"])
    second = bench_cli("run", "m.yaml", "--rerun", cwd=tmp_path, timeout=400)
    assert second.returncode == 0, second.stderr[-2000:]
    said = second.stdout + second.stderr
    assert "engine: reused" in said and "engine, again: measured in" in said, said
    entries = json.loads(path.read_text())["entries"]
    assert before < len(entries) <= before + AGAIN_AT_MOST and all(e.get("again_for") for e in entries[before:])
    again = entries[-1]  # the newest: the one that agreed with the cell, or the last try
    assert again["rate"] > 2 * entry["rate"] and "% above what the " in again["again_for"]["why"]
    status = bench_cli("status", "-v", cwd=tmp_path).stdout  # the sentences behind the table
    line = next(x for x in status.splitlines() if x.lstrip().startswith("engine probe for "))
    assert "measured again: the cell ran" in line, status
    verdict = next(x for x in status.splitlines() if "/2w " in x and ": measured " in x and "probe for" not in x)
    assert verdict.split()[0] == again["again_for"]["cell_id"], status
    assert f"2 × {128 * again['rate']:,.0f} tokens/s" in verdict, status  # 128 tokens a sequence


def test_the_first_runs_benchmark_refuses_bad_input_in_one_line():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "first_runs.py"
    for argv, says in ((["--where", "gpus=2", "--runs", "0"], "--runs must be 1 to 30"),
                       (["--where", "gpus=2", "--matrix", "no-such.yaml"], "no such file")):
        out = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and says in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr


def test_the_two_refs_benchmark_refuses_bad_input_in_one_line_and_leaves_no_worktree():
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = root / "benchmarks" / "first_run_refs.sh"
    before = subprocess.run(["git", "worktree", "list"], cwd=root, capture_output=True, text=True).stdout
    for argv, says in (([], "usage: "), (["HEAD", "HEAD", "--runs", "0"], "--runs must be a positive"),
                       (["HEAD", "no-such-ref"], "'no-such-ref' is not a commit here"),
                       (["HEAD", "HEAD", "--fast"], "unknown argument '--fast'")):
        out = subprocess.run([str(script), *argv], cwd=root, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and says in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    assert subprocess.run(["git", "worktree", "list"], cwd=root, capture_output=True, text=True).stdout == before


def test_a_probe_run_first_in_the_cells_launch_runs_before_the_cell_with_its_own_windows_and_file(tmp_path,
                                                                                                  monkeypatch):
    """models/probes/engine_probe.first_then: FIRST_ENV asks for the probe's windows first, to their own file; the
    probe part computes as the probe (active()), the cell after it does not; rank 0 closes the probe's file with
    the phase record; a malformed ask runs the cell alone."""
    import argparse

    from models.probes import engine_probe as worker

    out = tmp_path / "probe.jsonl"
    seen = []

    def run(args):
        seen.append((args.warmup_steps, args.steps, args.repeats, args.out, args.cell_id, worker.active()))
        return 0

    args = argparse.Namespace(warmup_steps=3, steps=8, repeats=5, out="cell.jsonl", cell_id="abc")
    monkeypatch.setenv(worker.FIRST_ENV, f"2,25,3,{out}")
    assert worker.first_then(args, 0, run) == 0
    assert seen == [(2, 25, 3, str(out), "engine-probe-abc", True), (3, 8, 5, "cell.jsonl", "abc", False)]
    phase = [json.loads(x) for x in out.read_text().splitlines()]
    assert [p["kind"] for p in phase] == [worker.PHASE_KIND] and phase[0]["code"] == 0
    assert phase[0]["ended_unix"] >= phase[0]["started_unix"]
    seen.clear()
    assert worker.first_then(args, 1, run) == 0 and len(seen) == 2  # another rank: the same runs, no record
    assert len(out.read_text().splitlines()) == 1
    for bad in ("2,25,3", "2,x,3,/p", "2,25,3,"):
        monkeypatch.setenv(worker.FIRST_ENV, bad)
        seen.clear()
        worker.first_then(args, 0, run)
        assert [s[-1] for s in seen] == [False], bad


def test_a_probe_launch_of_its_own_never_runs_a_probe_first(monkeypatch, tmp_path):
    """A launch that is the probe alone (ENV=1, measured again after a cell) runs once, as the probe."""
    import argparse

    from models.probes import engine_probe as worker

    monkeypatch.setenv(worker.ENV, "1")
    monkeypatch.setenv(worker.FIRST_ENV, f"2,25,3,{tmp_path / 'p.jsonl'}")
    seen = []
    args = argparse.Namespace(warmup_steps=3, steps=8, repeats=5, out="o", cell_id="abc")
    worker.first_then(args, 0, lambda a: seen.append(a.cell_id) or 0)
    assert seen == ["abc"] and not (tmp_path / "p.jsonl").exists()


def test_the_load_beside_a_probe_run_first_is_what_its_ranks_sampled():
    from bench.backends.local.engine_probe import outside_load

    def window(*cpu):
        return {"per_rank": [{"rank": i, "outside": {"cpu_s_per_s": c}} for i, c in enumerate(cpu)]}

    assert outside_load([window(0.1, 0.3), window(0.5, 0.2)]) == pytest.approx((0.3 + 0.5) / 2)
    assert outside_load([{"per_rank": [{"rank": 0}]}]) is None  # not sampled: not known, so never reused


def test_a_probe_run_first_that_wrote_nothing_fails_in_one_line_and_stores_nothing(tmp_path):
    from bench.backends.local.engine_probe import First, cache_path, from_first
    from bench.planning.cell import PlannedCell

    planned = PlannedCell(cell={**ROW, "repeats": 5}, cell_id="c", status="planned")
    outcome = from_first(planned, tmp_path, First("none stored", 3, tmp_path / "missing.jsonl"))
    assert outcome.result is None and outcome.in_cell_launch and not outcome.reused
    assert "no window measured in the cell's launch" in outcome.note and "rests on the compute probe" in outcome.note
    assert not cache_path(tmp_path).exists()


PING_UNDER_HOROVOD = """
import sys
import torch
import horovod.torch as hvd
from models.probes import engine_probe
hvd.init()
model = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(3)) for _ in range(int(sys.argv[1])))
model.append(torch.nn.Parameter(torch.zeros(3), requires_grad=False))  # frozen: no gradient, no ping
ping = engine_probe.ping(torch, torch.device("cpu"), hvd, model)
ping()
ping()
hvd.shutdown()
"""


@pytest.mark.parametrize("tensors", [1, 5])
def test_horovods_probe_pings_one_tensor_per_gradient_through_its_loop(tmp_path, tensors):
    """Real Horovod (one process): the tensors Horovod's loop negotiated, read from its timeline, are one per
    gradient the step asked for, each under its own stable name (so its response cache hits as the cell's do)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    timeline = tmp_path / "timeline.json"
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", PING_UNDER_HOROVOD, str(tensors)], cwd=root, check=True, timeout=120,
                   env={**os.environ, "HOROVOD_TIMELINE": str(timeline), "PYTHONPATH": str(root)})
    names = set(re.findall(r"bench_engine_probe\.\d+", timeline.read_text()))
    assert names == {f"bench_engine_probe.{i}" for i in range(tensors)}


PINGS_UNDER_TENSORFLOW = """
import tensorflow as tf
import horovod.tensorflow as hvd
from models.workloads.resnet50.tensorflow_worker import probe_pings

hvd.init()
w = tf.Variable(tf.ones([3, 2]))
x = tf.ones([4, 3])

@tf.function
def step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.matmul(x, w))
    return probe_pings(tf, hvd, tape.gradient(loss, [w]))

graph = step.get_concrete_function().graph
group = [op for op in graph.get_operations() if "Allreduce" in op.type]
assert len(group) == 1, [op.type for op in graph.get_operations()]
seen, todo = set(), list(group[0].inputs)
while todo:
    t = todo.pop()
    if t.op.name not in seen:
        seen.add(t.op.name)
        todo.extend(t.op.inputs)
print("MATMUL" if any(graph.get_operation_by_name(n).type == "MatMul" for n in seen) else "NO MATMUL")
print(float(step()[0][0]))
print(float(tf.add_n([p[0] for p in probe_pings(tf, hvd, [tf.constant([float("inf"), 1.0]),
                                                          tf.constant([float("nan")])])])))
hvd.shutdown()
"""


def test_tensorflows_probe_pings_are_made_from_the_gradients():
    """Real TensorFlow and Horovod (one process): the probe's grouped ping reads the backward pass's output (its
    inputs trace back to the gradient's MatMul), so it waits for the backward pass as the cell's allreduce does;
    each ping is 0, also from an inf or NaN gradient (fp16's scaled gradients overflow at times)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", PINGS_UNDER_TENSORFLOW], cwd=root, capture_output=True, text=True,
                         timeout=180, env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["MATMUL", "0.0", "0.0"]
