"""The engine probe (models/engine_probe.py, bench/backends/local/engine_probe.py) and the expected value it gives
(bench/analysis/expected.py engine_probed): N ranks at the probe's rate, each step longer by the gradients'
allreduce the probe timed; the verdict is the plain one against that value."""
import json

import pytest

from bench.analysis.expected import Expected, engine_probed
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
    from models.engine_probe import DDP_BUCKET_BYTES, buckets_of

    sizes = [1_000_000] * 20  # 4 MB each: six to a 25 MiB bucket
    out = buckets_of(sizes)
    assert sum(out) == sum(sizes) and all(4 * b <= DDP_BUCKET_BYTES for b in out) and len(out) == 4


def test_a_cell_well_under_its_engine_probe_is_below_expected():
    e = engine_probed(_lead(23.6), ROW, _probe())
    assert e.verdict.startswith("below expected by 48%")


def test_a_probe_an_earlier_run_measured_allows_two_runs_noise_and_says_so():
    from dataclasses import replace as with_

    from bench.analysis.expected import SAME_RUN_S, reused_tolerance

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
